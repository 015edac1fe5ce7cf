//! The host-wide memory budget: one accountant for the memory that guests and rows can make
//! this process hold, across every episode, reward and tool call in flight.
//!
//! Per-call limits (linear memory, tensor bytes) bound one instance; with many in flight their
//! sum can still pass the machine (issue 31: 12 episodes each keeping their allowed tensor
//! bytes drove the host to 8.2 GB). Every allocation a guest or a row causes is reserved here
//! before it is made, and released when the memory is:
//!
//! * linear memories past each store's first [`LINEAR_MEMORY_ALLOWANCE`], as they grow (the
//!   store's `ResourceLimiter`), until the store is dropped;
//! * host tensors an episode creates (`tensor.create`, `concat`, images), until its
//!   trajectory is written or dropped (a trajectory carries its episode's reservation);
//! * the working memory of a tokenizer call or an image batch, while it runs.
//!
//! A reservation past the budget is refused: the episode that asks gets `limit-exceeded` (a
//! tensor, a tokenizer call, images) or a `limit_exceeded` fault (a memory that cannot grow),
//! and the others go on. Host-side data stops at [`HIGH_WATER_PERCENT`] of the budget, which
//! keeps the rest for instances to start and grow; new episodes wait (at most
//! [`ADMISSION_WAIT`]) while the host is above that mark.
//!
//! Not counted: the process's own baseline (code, the model, the tokenizer), rows being read
//! (bounded by the dataset's row cap), the first [`LINEAR_MEMORY_ALLOWANCE`] of each store,
//! and the pages a pool slot keeps resident for its next instance once an instance ends (at
//! most the pool's keep-resident bytes per slot used: 16 MiB in the default pool, 40 MiB in
//! the snapshot pool).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

/// The share of physical memory (or of the cgroup's limit, when lower) the default budget
/// allows.
pub const DEFAULT_BUDGET_PERCENT: usize = 60;

/// Episodes wait to start while reserved memory is above this share of the budget.
pub const HIGH_WATER_PERCENT: usize = 90;

/// Longest an episode waits to start because the host is above its high-water mark; then it
/// starts anyway and its own reservations are refused if the budget is still exhausted. (An
/// unbounded wait could deadlock: a group's finished trajectories hold memory until the rest of
/// the group has run.)
pub const ADMISSION_WAIT: Duration = Duration::from_secs(5);

/// Bytes of working memory reserved per byte of tokenizer input while a call runs (the
/// encoding's ids, offsets, token strings and pre-tokenized splits; measured ~7x here, with
/// room).
pub const TOKENIZER_BYTES_PER_INPUT_BYTE: usize = 16;

/// Bytes a reservation for host tensors takes from the budget at a time: an episode's small
/// tensors then cost one update of the shared counter, not one each (with 64 episodes in
/// flight on two cores, every update of it moves its cache line between the cores).
pub const TENSOR_RESERVATION_CHUNK: usize = 64 << 10;

/// Linear memory of each store not reserved: small instances (a Rust workflow or reward is
/// ~1-2 MiB, most of it never touched) cost no update of the shared counter, and 10,000 of
/// them in flight do not reserve ~20 GB they never use. Counted in the slack the budget
/// documents; an interpreter's heap (componentize-py: ~12 MiB) is reserved past it.
pub const LINEAR_MEMORY_ALLOWANCE: usize = 2 << 20;

/// The accountant.
#[derive(Debug)]
pub struct HostMemory {
    /// Bytes reserved, on a cache line of its own (it is written on every reservation; the
    /// limit and the peak are mostly read).
    used: Padded,
    limit: AtomicUsize,
    peak: AtomicUsize,
    refusals: AtomicUsize,
}

/// An atomic on a cache line of its own.
#[derive(Debug)]
#[repr(align(128))]
struct Padded(AtomicUsize);

/// The process's default accountant ([`default_budget`]): every runtime given no budget of its
/// own ([`Services::with_host_memory`](crate::Services::with_host_memory)) shares it, so that
/// hosts that leave the budget unset together stay within one default, not one each.
pub fn host_memory() -> &'static Arc<HostMemory> {
    static HOST: OnceLock<Arc<HostMemory>> = OnceLock::new();
    HOST.get_or_init(|| HostMemory::new(default_budget()))
}

/// [`DEFAULT_BUDGET_PERCENT`] of the machine's memory: physical memory, or the cgroup's
/// `memory.max` when that is lower (a container).
pub fn default_budget() -> usize {
    // SAFETY: sysconf has no preconditions.
    let (pages, page) = unsafe {
        (
            libc::sysconf(libc::_SC_PHYS_PAGES),
            libc::sysconf(libc::_SC_PAGESIZE),
        )
    };
    let physical = usize::try_from(pages.max(0))
        .unwrap_or(0)
        .saturating_mul(usize::try_from(page.max(0)).unwrap_or(0));
    let cgroup = std::fs::read_to_string("/sys/fs/cgroup/memory.max")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok());
    let total = match cgroup {
        Some(c) if c < physical || physical == 0 => c,
        _ => physical,
    };
    if total == 0 {
        return usize::MAX;
    }
    total / 100 * DEFAULT_BUDGET_PERCENT
}

impl HostMemory {
    /// A budget of `limit` bytes of its own (`max_host_memory`), nothing reserved yet.
    pub fn new(limit: usize) -> Arc<HostMemory> {
        Arc::new(HostMemory {
            limit: AtomicUsize::new(limit.max(1)),
            used: Padded(AtomicUsize::new(0)),
            peak: AtomicUsize::new(0),
            refusals: AtomicUsize::new(0),
        })
    }

    /// The budget, bytes.
    pub fn limit(&self) -> usize {
        self.limit.load(Ordering::Relaxed)
    }

    /// Set the budget (`--max-host-memory`). Reservations already made stay.
    pub fn set_limit(&self, bytes: usize) {
        self.limit.store(bytes.max(1), Ordering::Relaxed);
    }

    /// Bytes reserved now.
    pub fn used(&self) -> usize {
        self.used.0.load(Ordering::Relaxed)
    }

    /// The most bytes reserved at once so far.
    pub fn peak(&self) -> usize {
        self.peak.load(Ordering::Relaxed)
    }

    /// Reservations refused so far.
    pub fn refusals(&self) -> usize {
        self.refusals.load(Ordering::Relaxed)
    }

    /// The high-water mark, bytes: bulk reservations stop here.
    fn high_water(&self) -> usize {
        self.limit() / 100 * HIGH_WATER_PERCENT
    }

    /// Reserve `bytes` if that keeps the total within `limit`; counts a refusal.
    fn take(&self, bytes: usize, limit: usize) -> bool {
        let taken = self
            .used
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&n| n <= limit)
            });
        match taken {
            Ok(before) => {
                // A new peak is rare: read before writing the shared line.
                if before + bytes > self.peak.load(Ordering::Relaxed) {
                    self.peak.fetch_max(before + bytes, Ordering::Relaxed);
                }
                true
            }
            Err(_) => {
                self.refusals.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    fn give_back(&self, bytes: usize) {
        if bytes > 0 {
            self.used.0.fetch_sub(bytes, Ordering::AcqRel);
        }
    }

    /// A bulk reservation of `bytes` (see [`Reservation::grow_bulk`]), or `None`.
    pub fn try_reserve_bulk(self: &Arc<Self>, bytes: usize) -> Option<Reservation> {
        let mut r = Reservation::default();
        r.grow_bulk(self, bytes).then_some(r)
    }

    /// Whether reserved memory is above the high-water mark.
    pub fn above_high_water(&self) -> bool {
        self.used() > self.high_water()
    }

    /// Wait until reserved memory is at or below the high-water mark, at most `max`.
    pub async fn below_high_water(&self, max: Duration) {
        let start = Instant::now();
        while self.above_high_water() && start.elapsed() < max {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// What a refusal says: the budget, what is reserved, and what to change.
    pub fn exhausted(&self, what: &str, bytes: usize) -> String {
        format!(
            "the host's memory budget is exhausted: {what} needs {bytes} bytes, {} of {} are reserved by the episodes and calls in flight (`max_host_memory`; or run fewer at once, `max_concurrent`)",
            self.used(),
            self.limit()
        )
    }
}

/// Bytes reserved from the host budget, given back when dropped. The default reserves nothing.
#[derive(Debug, Default)]
pub struct Reservation {
    owner: Option<Arc<HostMemory>>,
    bytes: usize,
}

impl Reservation {
    /// Bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Reserve `bytes` more from `host` for an instance's linear memory: false (nothing
    /// taken) when that would pass the budget.
    pub fn grow(&mut self, host: &Arc<HostMemory>, bytes: usize) -> bool {
        self.grow_within(host, bytes, host.limit())
    }

    /// Reserve `bytes` more from `host` for host-side data (tensors, images, tokenizer work):
    /// false (nothing taken) when that would pass the high-water mark. The rest of the budget
    /// is kept for instances to start and grow, so that a guest hoarding tensors cannot keep
    /// every other episode from running.
    pub fn grow_bulk(&mut self, host: &Arc<HostMemory>, bytes: usize) -> bool {
        self.grow_within(host, bytes, host.high_water())
    }

    fn grow_within(&mut self, host: &Arc<HostMemory>, bytes: usize, limit: usize) -> bool {
        if !host.take(bytes, limit) {
            return false;
        }
        if self.owner.is_none() {
            self.owner = Some(host.clone());
        }
        self.bytes += bytes;
        true
    }

    /// Give back `bytes` of this reservation (at most what it holds).
    pub fn shrink(&mut self, bytes: usize) {
        let bytes = bytes.min(self.bytes);
        if let Some(o) = &self.owner {
            o.give_back(bytes);
        }
        self.bytes -= bytes;
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        if let Some(o) = &self.owner {
            o.give_back(self.bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host(limit: usize) -> Arc<HostMemory> {
        let h = Arc::new(HostMemory {
            limit: AtomicUsize::new(0),
            used: Padded(AtomicUsize::new(0)),
            peak: AtomicUsize::new(0),
            refusals: AtomicUsize::new(0),
        });
        h.set_limit(limit);
        h
    }

    #[test]
    fn reservations_stop_at_the_budget_and_are_given_back() {
        let h = host(100);
        let a = h.try_reserve_bulk(60).expect("fits");
        assert!(
            h.try_reserve_bulk(31).is_none(),
            "past the high-water mark (90)"
        );
        assert_eq!(h.refusals(), 1);
        let mut b = Reservation::default();
        assert!(b.grow_bulk(&h, 30));
        assert!(!b.grow_bulk(&h, 1), "bulk stops at the high-water mark");
        assert!(b.grow(&h, 10), "instances may use the rest");
        assert!(!b.grow(&h, 1), "but not past the budget");
        assert_eq!(h.used(), 100);
        assert!(h.above_high_water());
        b.shrink(30);
        assert_eq!((b.bytes(), h.used()), (10, 70));
        drop(a);
        drop(b);
        assert_eq!(h.used(), 0);
        assert_eq!(h.peak(), 100);
        assert!(!h.above_high_water());
    }

    #[test]
    fn the_default_is_a_share_of_this_machine() {
        let d = default_budget();
        assert!(d > 64 << 20, "{d}");
    }
}
