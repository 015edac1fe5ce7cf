//! AReaL's staleness control (`areal/infra/staleness_manager.py`), counted in groups (AReaL's
//! tasks: one row's `n_samples` episodes).

/// Counters and limits.
#[derive(Debug, Clone, Default)]
pub struct Staleness {
    /// Groups allowed in flight at once.
    pub max_concurrent: usize,
    /// Groups per batch (AReaL's `consumer_batch_size`).
    pub batch_size: usize,
    /// How many versions behind the newest a batch may start (`None`: no limit).
    pub max_head_offpolicyness: Option<u64>,
    /// Groups running.
    pub running: usize,
    /// Groups accepted so far (never decremented).
    pub accepted: usize,
    /// Groups rejected (dropped) so far.
    pub rejected: usize,
}

impl Staleness {
    /// `min(max(1, max_concurrent) - running, (ofp + version + 1) * max(1, batch_size) -
    /// (accepted + running))`, which may be negative. Without an off-policyness limit only the
    /// concurrency term applies.
    pub fn capacity(&self, version: i64) -> i64 {
        let concurrency = self.max_concurrent.max(1) as i64 - self.running as i64;
        match self.max_head_offpolicyness {
            None => concurrency,
            Some(ofp) => {
                let staleness = (ofp as i64 + version + 1) * self.batch_size.max(1) as i64
                    - (self.accepted + self.running) as i64;
                concurrency.min(staleness)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(max_concurrent: usize, batch_size: usize, ofp: u64) -> Staleness {
        Staleness {
            max_concurrent,
            batch_size,
            max_head_offpolicyness: Some(ofp),
            ..Staleness::default()
        }
    }

    /// AReaL's tests/test_rollout_controller.py (initial capacity) and
    /// tests/test_staleness_manager.py.
    #[test]
    fn areal_capacity_cases() {
        // consumer_batch_size 16, max_concurrent_rollouts 32, ofp 2 → min(32, 3 * 16) = 32.
        assert_eq!(s(32, 16, 2).capacity(0), 32);
        // consumer_batch_size 8, max_concurrent_rollouts 100, ofp 2 → min(100, 3 * 8) = 24.
        assert_eq!(s(100, 8, 2).capacity(0), 24);
        // Concurrency limit: 5 - 3 running = 2.
        let mut m = s(5, 100, 2);
        m.running = 3;
        assert_eq!(m.capacity(0), 2);
        // Staleness: (2 + 0 + 1) * 4 = 12, (2 + 5 + 1) * 4 = 32.
        assert_eq!(s(1000, 4, 2).capacity(0), 12);
        assert_eq!(s(1000, 4, 2).capacity(5), 32);
        // Accepted groups use up staleness capacity; it may go negative.
        let mut m = s(1000, 4, 2);
        m.accepted = 10;
        m.running = 1;
        assert_eq!(m.capacity(0), 1);
        m.accepted = 20;
        assert_eq!(m.capacity(0), -9);
        // max(1, ·) floors.
        assert_eq!(s(0, 0, 0).capacity(0), 1);
        // No limit: concurrency only.
        let m = Staleness {
            max_concurrent: 8,
            running: 3,
            ..Staleness::default()
        };
        assert_eq!(m.capacity(0), 5);
    }
}
