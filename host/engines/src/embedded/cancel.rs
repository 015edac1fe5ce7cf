//! Callers that gave up (an episode dropped, cancelled or timed out drops its request futures,
//! closing their reply channels): finding them among the waiting requests, when to give up a
//! forward pass part-way for them, and the counters that show what they cost.

use std::collections::VecDeque;
use std::sync::{Mutex, MutexGuard, PoisonError};

use super::Job;

/// What the engine thread has done since it started, for monitoring and tests. Counters only
/// grow; read them with [`EmbeddedBackend::stats`](super::EmbeddedBackend::stats).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EngineStats {
    /// Batched decode steps started (a step given up part-way and run again counts twice).
    pub steps: u64,
    /// Sequences decoded by those steps, summed over the steps (one row each per step).
    pub step_rows: u64,
    /// Decode steps given up part-way because most of their sequences' callers had gone.
    pub abandoned_steps: u64,
    /// Requests dropped before they started decoding (while queued, or during their prefill)
    /// because their caller had gone.
    pub dropped_waiting: u64,
    /// Sequences dropped from the batch because their caller had gone.
    pub dropped_running: u64,
    /// The most decode steps any request waited between its submission and its prefill.
    pub max_wait_steps: u64,
}

/// The counters, also when a panic elsewhere poisoned their lock (they are plain numbers).
pub(super) fn lock(stats: &Mutex<EngineStats>) -> MutexGuard<'_, EngineStats> {
    stats.lock().unwrap_or_else(PoisonError::into_inner)
}

/// Remove the requests whose caller has gone, keeping the others in order; how many left.
pub(super) fn drop_gone(waiting: &mut VecDeque<Job>) -> u64 {
    let before = waiting.len();
    waiting.retain(|job| !job.reply.is_closed());
    (before - waiting.len()) as u64
}

/// Whether to give up a forward pass over `rows` sequences, of which `live` still have a
/// caller, after `done` of its `stages` stages (layers, then the output projection): yes when
/// running the live ones again from the start costs less than finishing every row (cost taken
/// as rows × stages). With no live row it is always given up; with every row live, never.
pub(super) fn abandon(rows: usize, live: usize, done: usize, stages: usize) -> bool {
    live * stages < rows * stages.saturating_sub(done)
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use tokio::sync::oneshot;

    use super::*;
    use crate::GenerateRequest;

    #[test]
    fn a_pass_with_no_caller_left_stops_at_any_stage_and_a_wanted_one_never() {
        for done in 0..31 {
            assert!(abandon(64, 0, done, 31), "all gone, stage {done}");
            assert!(!abandon(64, 64, done, 31), "none gone, stage {done}");
            assert!(abandon(1, 0, done, 31), "a prefill whose caller left");
        }
    }

    #[test]
    fn a_pass_is_given_up_only_while_redoing_the_live_rows_is_cheaper() {
        // One gone in 64: finishing is cheaper from the first stage on.
        assert!(abandon(64, 63, 0, 31));
        assert!(!abandon(64, 63, 1, 31));
        // Half gone: worth it through the first half of the pass only.
        assert!(abandon(64, 32, 15, 31));
        assert!(!abandon(64, 32, 16, 31));
        // One live among 64: worth it up to the output projection; among 8, through 27 stages.
        assert!(abandon(64, 1, 30, 31));
        assert!(abandon(8, 1, 27, 31));
        assert!(!abandon(8, 1, 28, 31));
    }

    #[test]
    fn requests_whose_caller_left_leave_the_queue_and_the_rest_keep_their_order() {
        let mut waiting = VecDeque::new();
        let mut receivers = Vec::new();
        for i in 0..6 {
            let (reply, rx) = oneshot::channel();
            waiting.push_back(Job {
                request: GenerateRequest {
                    rid: format!("r{i}"),
                    ..GenerateRequest::new(vec![1])
                },
                reply,
                submitted: Instant::now(),
                submitted_step: 0,
            });
            receivers.push(Some(rx));
        }
        // Callers 0, 2, 3 and 5 give up.
        for i in [0, 2, 3, 5] {
            receivers[i] = None;
        }
        assert_eq!(drop_gone(&mut waiting), 4);
        let left: Vec<&str> = waiting.iter().map(|j| j.request.rid.as_str()).collect();
        assert_eq!(left, ["r1", "r4"]);
        assert_eq!(drop_gone(&mut waiting), 0, "nothing more to drop");
    }
}
