//! The rollout controller: dataset rows → GRPO groups of sandboxed episodes → safetensors
//! batches, with AReaL's WorkflowExecutor semantics.
//!
//! * `n_samples` episodes per row form a group; at most `max_concurrent` episodes run at once
//!   (a semaphore), and groups are submitted while AReaL's staleness capacity is positive
//!   ([`staleness::Staleness`]).
//! * Rejected and failed episodes are counted by kind, never fatal. A group with fewer accepted
//!   episodes than `n_samples` is dropped with `drop_incomplete_groups`, else kept with its true
//!   size recorded per trajectory (`group_size`, `accepted_in_group`).
//! * Optional group reward normalisation ([`group::Normalization`]: GRPO's z-score or Dr.
//!   GRPO's mean-only, over the group; an episode is represented by its `rollout_reward` when
//!   it has one, else its reward; raw rewards kept as `original_rewards`) and an acceptance
//!   filter ([`group::Filter`]).
//! * Kept groups are concatenated with AReaL's `concat_padded_tensors` semantics into batches
//!   of `batch_size` groups handed to a [`BatchSink`]: numbered safetensors files with
//!   `trajectories.jsonl` and `stats.json` ([`OutputDir`]; re-running with the same output
//!   directory resumes), or memory ([`MemorySink`], what `rollbox serve` answers from).
//! * The controller is a task on the same workers as the episodes. After each finished group it
//!   first refills the in-flight groups, then does batch work; a batch's files are written on
//!   tokio's blocking pool while it goes on, one batch at a time and in order.
//! * Rows are held as compact JSON text ([`rollbox_runtime::JsonText`]) shared by a row's
//!   episodes: the guest receives text anyway, and a parsed row took several times the memory.

//!
//! The stages, one module each:
//!
//! | module | stage |
//! |---|---|
//! | [`dataset`] | JSONL rows |
//! | [`controller`] | admission, spawning groups, the loop |
//! | [`staleness`] | AReaL's staleness capacity |
//! | [`group`] | a finished group kept (rewards normalised) or dropped with a [`DropReason`] |
//! | `trajectory_line` | one `trajectories.jsonl` line per trajectory |
//! | [`batch`] | kept groups padded into a batch, written in order |
//! | [`sink`], [`output`] | where batches go: memory or an output directory |
//! | [`stats`] | progress and `stats.json` |

pub mod batch;
pub mod controller;
pub mod dataset;
pub mod group;
pub mod meter;
pub mod options;
pub mod output;
pub mod sink;
pub mod staleness;
pub mod stats;
mod trajectory_line;

pub use batch::MAX_BATCH_TENSOR_BYTES;
pub use controller::Rollout;
pub use group::DropReason;
pub use meter::SandboxMeter;
pub use options::{RolloutOptions, RunScope, SharedEpisodes, neutral_hint};
pub use output::OutputDir;
pub use sink::{Batch, BatchSink, MemorySink, OverBudget};
pub use stats::{Progress, Stats};
