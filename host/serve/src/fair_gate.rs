//! Turns between a server's tenants for its sandbox pool (`rollbox serve --tenants`): each
//! reward and `/run_code` call takes a place from the [`FairGate`], shared by time and capped
//! per tenant, so no tenant's flood of calls holds another's back by more than a call a place.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Turns between tenants for the sandbox pool, shared by time: at most `n` calls pass at
/// once, and a place that frees goes to the waiting tenant whose calls have used the least
/// time, counting the time so far of its calls in flight (ties: the next by name after the
/// last served). A tenant whose calls each run to a
/// long timeout thus takes no more of the pool's time than one whose calls are quick, and a
/// tenant with thousands of calls queued delays another's next call by at most one call per
/// place. A tenant that starts waiting again begins at the least time of those waiting, so
/// time it left unused is not banked against the others. A tenant holding as many places as
/// its cap (`max_reward_calls_in_flight`) is passed over until one of its calls ends.
///
/// With two places or more, the last free place is kept for a tenant that holds none and has
/// asked for one within [`RESERVE_WINDOW`]: a tenant whose calls spin to a long timeout cannot
/// fill the pool while another is calling, so the other's next call finds a place at once
/// instead of waiting for a spinning call to end. A reserved place nobody takes within the
/// window goes to those waiting.
pub struct FairGate {
    state: Mutex<GateState>,
}

/// How long after a tenant last asked for a place the last free one is kept for it.
pub const RESERVE_WINDOW: Duration = Duration::from_secs(1);

/// A waiting call's place, handed over with the moment it was taken.
type Turn = tokio::sync::oneshot::Sender<Instant>;

struct GateState {
    free: usize,
    waiting: std::collections::BTreeMap<Arc<str>, std::collections::VecDeque<Turn>>,
    /// Time each tenant's finished calls held a place.
    used: HashMap<Arc<str>, Duration>,
    /// Places each tenant holds now.
    holding: HashMap<Arc<str>, Held>,
    /// The tenant served last.
    last: Arc<str>,
    /// What the places' start times in [`Held::started_ns`] count from.
    base: Instant,
    /// Places in all.
    places: usize,
    /// When a task will next look again at places kept free for a reservation.
    wake_at: Option<Instant>,
}

/// The places one tenant holds: how many, the most it may, and the sum of the moments they
/// were taken (ns after [`GateState::base`]), so the time its calls in flight have held them
/// is `n * now - started_ns` without a list.
#[derive(Clone, Copy)]
struct Held {
    n: usize,
    cap: usize,
    started_ns: u128,
    /// When it last asked for a place.
    asked: Instant,
}

impl GateState {
    /// Whether `tenant` may take another place (it holds fewer than its cap).
    fn under_cap(&self, tenant: &Arc<str>) -> bool {
        self.holding.get(tenant).is_none_or(|h| h.n < h.cap)
    }

    /// Until when the last free place is kept from `tenant` for another that holds none and
    /// asked within [`RESERVE_WINDOW`] (`None`: it is not).
    fn reserved_from(&self, tenant: &Arc<str>, now: Instant) -> Option<Instant> {
        if self.places < 2 || self.free > 1 {
            return None;
        }
        self.holding
            .iter()
            .filter(|(t, h)| *t != tenant && h.n == 0)
            .map(|(_, h)| h.asked + RESERVE_WINDOW)
            .filter(|until| *until > now)
            .max()
    }

    /// Whether `tenant` may take a free place now.
    fn may_take(&self, tenant: &Arc<str>, now: Instant) -> bool {
        self.under_cap(tenant) && self.reserved_from(tenant, now).is_none()
    }

    fn ns(&self, at: Instant) -> u128 {
        at.saturating_duration_since(self.base).as_nanos()
    }

    /// The time `tenant`'s calls have held places as of `now`: its finished calls' and the
    /// time so far of those in flight (a call that spins to a long timeout counts while it
    /// spins, not only once it ends).
    fn used_at(&self, tenant: &Arc<str>, now: Instant) -> Duration {
        let done = self.used.get(tenant).copied().unwrap_or_default();
        let running = self.holding.get(tenant).map_or(0, |h| {
            (h.n as u128 * self.ns(now)).saturating_sub(h.started_ns)
        });
        done + Duration::from_nanos(u64::try_from(running).unwrap_or(u64::MAX))
    }

    fn take(&mut self, tenant: &Arc<str>, at: Instant) {
        let ns = self.ns(at);
        let h = self.holding.entry(tenant.clone()).or_insert(Held {
            n: 0,
            cap: usize::MAX,
            started_ns: 0,
            asked: at,
        });
        h.n += 1;
        h.started_ns += ns;
        self.last = tenant.clone();
    }

    /// Return a place `tenant` took at `since`, counting the time it held it.
    fn give_back(&mut self, tenant: &Arc<str>, since: Instant) {
        let ns = self.ns(since);
        if let Some(h) = self.holding.get_mut(tenant) {
            h.n = h.n.saturating_sub(1);
            h.started_ns = h.started_ns.saturating_sub(ns);
        }
        *self.used.entry(tenant.clone()).or_default() += since.elapsed();
    }
}

/// A place in the gate, held by one call of `tenant`; handed on when dropped.
pub struct GatePass {
    gate: Arc<FairGate>,
    tenant: Arc<str>,
    since: Instant,
}

impl FairGate {
    /// A gate with `n` places (at least one).
    pub fn new(n: usize) -> Arc<Self> {
        Arc::new(FairGate {
            state: Mutex::new(GateState {
                free: n.max(1),
                waiting: Default::default(),
                used: HashMap::new(),
                holding: HashMap::new(),
                last: Arc::from(""),
                base: Instant::now(),
                places: n.max(1),
                wake_at: None,
            }),
        })
    }

    /// Wait for a place for one call of `tenant`, which may hold at most `cap` at once.
    pub async fn enter(self: &Arc<Self>, tenant: &Arc<str>, cap: usize) -> GatePass {
        let turn = {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let held = s.holding.entry(tenant.clone()).or_insert(Held {
                n: 0,
                cap,
                started_ns: 0,
                asked: now,
            });
            held.cap = cap.max(1);
            held.asked = now;
            let others_first = s.waiting.keys().any(|t| s.may_take(t, now));
            if s.free > 0 && !others_first && s.may_take(tenant, now) {
                s.free -= 1;
                s.take(tenant, now);
                Err(now)
            } else {
                if !s.waiting.contains_key(tenant) {
                    // Level with the least finished time of those waiting: time left unused
                    // is not banked (the time of their calls in flight still counts for them).
                    let floor = s
                        .waiting
                        .keys()
                        .map(|t| s.used.get(t).copied().unwrap_or_default())
                        .min();
                    let used = s.used.entry(tenant.clone()).or_default();
                    *used = (*used).max(floor.unwrap_or_default());
                }
                let (tx, rx) = tokio::sync::oneshot::channel();
                s.waiting.entry(tenant.clone()).or_default().push_back(tx);
                // A place kept free for another tenant: look again when that ends.
                Ok((rx, s.free > 0))
            }
        };
        let since = match turn {
            Err(now) => now,
            Ok((rx, kept_free)) => {
                if kept_free {
                    self.hand_on();
                }
                let mut waiter = Waiter {
                    rx: Some(rx),
                    gate: self.clone(),
                    tenant: tenant.clone(),
                };
                let since = match waiter.rx.as_mut() {
                    Some(rx) => rx.await.unwrap_or_else(|_| Instant::now()),
                    None => Instant::now(),
                };
                // Handed a place: it is this pass's now.
                waiter.rx = None;
                since
            }
        };
        GatePass {
            gate: self.clone(),
            tenant: tenant.clone(),
            since,
        }
    }

    /// Drop what the gate keeps of tenants not in `names` (a reload removed them) that hold
    /// no place and wait for none; one with calls still in flight is kept until a later
    /// reload.
    pub fn forget_all_but(&self, names: &[String]) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let gone: Vec<Arc<str>> = s
            .holding
            .iter()
            .filter(|(t, h)| h.n == 0 && !names.iter().any(|n| n.as_str() == &***t))
            .map(|(t, _)| t.clone())
            .filter(|t| !s.waiting.contains_key(t))
            .collect();
        for t in gone {
            s.holding.remove(&t);
            s.used.remove(&t);
        }
    }

    /// Tenants the gate keeps anything of.
    #[cfg(test)]
    fn known(&self) -> usize {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.holding.len().max(s.used.len())
    }

    /// Count `time` as held by `tenant`'s finished calls (the tests' way to give a tenant a
    /// history without sleeping: a sleep is moved by load, this is not).
    #[cfg(test)]
    fn charge(&self, tenant: &Arc<str>, time: Duration) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        *s.used.entry(tenant.clone()).or_default() += time;
    }

    /// The time `tenant`'s calls have held places so far.
    #[cfg(test)]
    fn used(&self, tenant: &Arc<str>) -> Duration {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.used_at(tenant, Instant::now())
    }

    /// Places `tenant` holds now.
    pub fn holding(&self, tenant: &str) -> usize {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.holding.get(tenant).map_or(0, |h| h.n)
    }

    /// Give free places to the waiting tenants that may take one, the one that has used the
    /// least time first; keep the rest free (and look again when a reservation that keeps a
    /// waiting tenant out ends).
    fn hand_on(self: &Arc<Self>) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while s.free > 0 {
            let now = Instant::now();
            // Each waiting tenant that may take a place, with the time its calls have held
            // places.
            let candidates: Vec<(Arc<str>, Duration)> = s
                .waiting
                .keys()
                .filter(|t| s.may_take(t, now))
                .map(|t| (t.clone(), s.used_at(t, now)))
                .collect();
            let Some(least) = candidates.iter().map(|(_, u)| *u).min() else {
                let reserved = s
                    .waiting
                    .keys()
                    .filter(|t| s.under_cap(t))
                    .filter_map(|t| s.reserved_from(t, now))
                    .min();
                // (Outside a runtime, the next call that enters or ends hands it on.)
                if let Some(until) = reserved
                    && s.wake_at.is_none_or(|w| w <= now || w > until)
                    && let Ok(runtime) = tokio::runtime::Handle::try_current()
                {
                    s.wake_at = Some(until);
                    let gate = self.clone();
                    runtime.spawn(async move {
                        tokio::time::sleep_until(until.into()).await;
                        gate.state.lock().unwrap_or_else(|p| p.into_inner()).wake_at = None;
                        gate.hand_on();
                    });
                }
                return;
            };
            // Ties: the next by name after the last served, round the ring.
            let next = candidates
                .iter()
                .filter(|(_, u)| *u == least)
                .map(|(t, _)| t)
                .find(|t| **t > s.last)
                .or_else(|| candidates.iter().find(|(_, u)| *u == least).map(|(t, _)| t))
                .cloned()
                .expect("a tenant uses the least");
            let queue = s.waiting.get_mut(&next).expect("listed");
            let tx = queue.pop_front().expect("non-empty");
            if queue.is_empty() {
                s.waiting.remove(&next);
            }
            // A waiter whose request was dropped (client gone) is skipped.
            if tx.send(now).is_ok() {
                s.free -= 1;
                s.take(&next, now);
            }
        }
    }

    /// Return a place `tenant` took at `since` and hand it on.
    fn release(self: &Arc<Self>, tenant: &Arc<str>, since: Instant) {
        {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            s.give_back(tenant, since);
            s.free += 1;
        }
        self.hand_on();
    }
}

/// A call waiting for its turn; if it is dropped (its request went away) after a place was
/// handed to it, the place goes on to the next.
struct Waiter {
    rx: Option<tokio::sync::oneshot::Receiver<Instant>>,
    gate: Arc<FairGate>,
    tenant: Arc<str>,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if let Ok(since) = rx.try_recv() {
                self.gate.release(&self.tenant, since);
            }
        }
    }
}

impl Drop for GatePass {
    fn drop(&mut self) {
        self.gate.release(&self.tenant, self.since);
    }
}

#[cfg(test)]
mod tests;
