//! Server choice for the `sglang` backend: round-robin or least-loaded, and rid-sticky.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Rids remembered for sticky routing; guards against the rid→server map growing without bound
/// as episodes come and go (AReaL's `RID_CACHE_SIZE`).
pub const MAX_STICKY_RIDS: usize = 128;

/// How a request without a known rid picks its server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Routing {
    /// Servers in turn.
    #[default]
    RoundRobin,
    /// The server with the fewest requests in flight from this backend (ties in turn).
    LeastLoaded,
}

struct Server {
    base: String,
    in_flight: AtomicUsize,
}

/// A request counted in flight on its server until dropped.
pub(super) struct InFlight<'a>(&'a Server);

impl InFlight<'_> {
    /// The server's base URL.
    pub(super) fn base(&self) -> &str {
        &self.0.base
    }
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Default)]
struct Sticky {
    server_of: HashMap<String, usize>,
    order: VecDeque<String>,
}

/// Picks servers and counts requests in flight on each.
pub(super) struct Router {
    servers: Vec<Server>,
    routing: Routing,
    next: AtomicUsize,
    sticky: Mutex<Sticky>,
}

impl Router {
    /// A router over these base URLs (at least one).
    pub(super) fn new(bases: Vec<String>, routing: Routing) -> Self {
        Router {
            servers: bases
                .into_iter()
                .map(|base| Server {
                    base,
                    in_flight: AtomicUsize::new(0),
                })
                .collect(),
            routing,
            next: AtomicUsize::new(0),
            sticky: Mutex::new(Sticky::default()),
        }
    }

    /// The base URLs, in routing order.
    pub(super) fn bases(&self) -> Vec<&str> {
        self.servers.iter().map(|s| s.base.as_str()).collect()
    }

    /// Picks the server for `rid` (sticky when non-empty) and counts the request there.
    pub(super) fn enter(&self, rid: &str) -> InFlight<'_> {
        let index = if rid.is_empty() {
            self.choose()
        } else {
            // A poisoned lock only means another request panicked mid-update; the map is
            // still a valid cache.
            let mut sticky = self.sticky.lock().unwrap_or_else(|p| p.into_inner());
            match sticky.server_of.get(rid) {
                Some(&index) => index,
                None => {
                    let index = self.choose();
                    if sticky.order.len() >= MAX_STICKY_RIDS
                        && let Some(old) = sticky.order.pop_front()
                    {
                        sticky.server_of.remove(&old);
                    }
                    sticky.server_of.insert(rid.to_string(), index);
                    sticky.order.push_back(rid.to_string());
                    index
                }
            }
        };
        let server = &self.servers[index];
        server.in_flight.fetch_add(1, Ordering::AcqRel);
        InFlight(server)
    }

    fn choose(&self) -> usize {
        let n = self.servers.len();
        let start = self.next.fetch_add(1, Ordering::Relaxed) % n;
        match self.routing {
            Routing::RoundRobin => start,
            Routing::LeastLoaded => (0..n)
                .map(|k| (start + k) % n)
                .min_by_key(|&i| self.servers[i].in_flight.load(Ordering::Acquire))
                .unwrap_or(start),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn router(routing: Routing) -> Router {
        Router::new(vec!["a".into(), "b".into(), "c".into()], routing)
    }

    #[test]
    fn round_robin_takes_turns_and_rids_stick() {
        let r = router(Routing::RoundRobin);
        let order: Vec<String> = (0..4).map(|_| r.enter("").base().to_string()).collect();
        assert_eq!(order, ["a", "b", "c", "a"]);
        let first = r.enter("ep").base().to_string();
        assert_eq!(first, "b");
        for _ in 0..3 {
            assert_eq!(r.enter("ep").base(), first);
        }
    }

    #[test]
    fn least_loaded_skips_busy_servers_and_counts_until_drop() {
        let r = router(Routing::LeastLoaded);
        let held_a = r.enter("");
        let held_b = r.enter("");
        assert_eq!((held_a.base(), held_b.base()), ("a", "b"));
        assert_eq!(r.enter("").base(), "c", "the only idle server");
        assert_eq!(r.enter("").base(), "c", "a and b still busy");
        let held_c = r.enter("");
        assert_eq!(held_c.base(), "c");
        drop(held_a);
        for _ in 0..3 {
            assert_eq!(r.enter("").base(), "a", "the only idle server");
        }
    }

    #[test]
    fn sticky_rids_are_bounded() {
        let r = router(Routing::RoundRobin);
        for i in 0..MAX_STICKY_RIDS + 10 {
            drop(r.enter(&format!("r{i}")));
        }
        let sticky = r.sticky.lock().expect("lock");
        assert_eq!(sticky.server_of.len(), MAX_STICKY_RIDS);
        assert!(!sticky.server_of.contains_key("r0"));
    }
}
