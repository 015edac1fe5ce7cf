//! The settings of a run (the episodes' config and limits are the [`Rollout`](crate::Rollout)'s).

use std::sync::Arc;

use rollbox_runtime::{Scope, Setting};
use tokio::sync::Semaphore;

use crate::group::{Filter, GroupPolicy, Normalization};
use crate::meter::SandboxMeter;

/// Settings of a run.
#[derive(Debug, Clone)]
pub struct RolloutOptions {
    /// Episodes per row (the GRPO group size).
    pub n_samples: u32,
    /// Episodes in flight at most.
    pub max_concurrent: usize,
    /// Groups per output batch.
    pub batch_size: usize,
    /// AReaL's `max_head_offpolicyness` (`None`: no staleness limit, for offline runs).
    pub max_head_offpolicyness: Option<u64>,
    /// Drop groups with fewer accepted episodes than `n_samples`.
    pub drop_incomplete_groups: bool,
    /// Group reward normalisation (`None`: raw rewards).
    pub normalize: Option<Normalization>,
    /// Group acceptance filter.
    pub filter: Option<Filter>,
    /// Base seed; episode seeds derive from it, the row and the sample index.
    pub seed: u64,
    /// Run at most this many (not yet done) rows.
    pub max_rows: Option<usize>,
    /// How the entry point says to change a setting, for failed episodes' logs and
    /// `dropped-rows.jsonl` (the CLI names its flag; the default names the setting's key).
    pub hint: fn(&Setting) -> String,
}

/// Who a run is for, when it is not the process's own ([`Rollout::run_for`](crate::Rollout::run_for)):
/// the scope its episodes run in and the budget they share with that caller's other runs.
#[derive(Debug, Clone, Default)]
pub struct RunScope {
    /// The rewards and tools the episodes reach and the caps they run under.
    pub scope: Scope,
    /// Episodes this run shares with other runs (a tenant's requests to `rollbox serve`):
    /// `None` for a run of its own.
    pub shared: Option<SharedEpisodes>,
}

/// A budget several runs draw on together: every episode of each also takes one of
/// `in_flight`'s permits while it runs, and is counted by `meter` from its start (it waits
/// while the meter's time is spent, and is stopped, `limit_exceeded`, once it is).
#[derive(Debug, Clone)]
pub struct SharedEpisodes {
    /// Episodes of all the runs in flight at once, at most this semaphore's permits.
    pub in_flight: Arc<Semaphore>,
    /// The runs' sandbox time ([`SandboxMeter`]).
    pub meter: Arc<SandboxMeter>,
    /// Where the episodes run (a tenant's own threads); `None`: on the caller's runtime.
    pub threads: Option<tokio::runtime::Handle>,
}

/// The default [`RolloutOptions::hint`]: the setting by its key (`raise the `timeout` limit`).
pub fn neutral_hint(setting: &Setting) -> String {
    format!("raise {setting}")
}

impl Default for RolloutOptions {
    fn default() -> Self {
        RolloutOptions {
            n_samples: 4,
            max_concurrent: 64,
            batch_size: 8,
            max_head_offpolicyness: None,
            drop_incomplete_groups: false,
            normalize: None,
            filter: None,
            seed: 0,
            max_rows: None,
            hint: neutral_hint,
        }
    }
}

impl RolloutOptions {
    /// What decides a finished group's fate.
    pub fn group_policy(&self) -> GroupPolicy {
        GroupPolicy {
            n_samples: self.n_samples,
            drop_incomplete: self.drop_incomplete_groups,
            normalize: self.normalize,
            filter: self.filter,
        }
    }
}

/// The seed of one episode: splitmix64 of the base seed, the row and the sample index, so
/// seeds differ per row and sample and are stable across runs.
pub fn episode_seed(base: u64, row: usize, sample: u32) -> u64 {
    let mut z = base ^ (row as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(sample) << 48;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}
