//! The rollout controller: dataset rows → GRPO groups of sandboxed episodes → safetensors
//! batches, with AReaL's WorkflowExecutor semantics.
//!
//! * `n_samples` episodes per row form a group; at most `max_concurrent` episodes run at once
//!   (a semaphore), and groups are submitted while AReaL's staleness capacity is positive
//!   ([`staleness::Staleness`]).
//! * Rejected and failed episodes are counted by kind, never fatal. A group with fewer accepted
//!   episodes than `n_samples` is dropped with `drop_incomplete_groups`, else kept with its true
//!   size recorded per trajectory (`group_size`, `accepted_in_group`).
//! * Optional group reward normalisation (z-score over the group; an episode is represented by
//!   its `rollout_reward` when it has one, else its reward; raw rewards kept as
//!   `original_rewards`) and an acceptance filter ([`group::Filter`]).
//! * Kept groups are concatenated with AReaL's `concat_padded_tensors` semantics into numbered
//!   safetensors batches of `batch_size` groups ([`output::OutputDir`]), with
//!   `trajectories.jsonl` and `stats.json`; re-running with the same output directory resumes.
//! * The controller is a task on the same workers as the episodes. After each finished group it
//!   first refills the in-flight groups, then does batch work; a batch's files are written on
//!   tokio's blocking pool while it goes on, one batch at a time and in order.
//! * Rows are held as compact JSON text ([`rollbox_runtime::JsonText`]) shared by a row's
//!   episodes: the guest receives text anyway, and a parsed row took several times the memory.

pub mod dataset;
pub mod group;
pub mod output;
pub mod staleness;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollbox_runtime::{
    EpisodeOutcome, EpisodeReport, EpisodeRequest, JsonText, Limits, Runtime, Trajectory,
    WorkflowComponent,
};
use rollbox_tensor::{HostTensor, TensorData};
use rollbox_tokenizer::HostTokenizer;
use serde::Serialize;
use tokio::sync::{Semaphore, mpsc};

use dataset::{BadRow, Row};
use group::Filter;
use output::{BatchFiles, OutputDir};
use staleness::Staleness;

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
    /// Group reward normalisation (z-score).
    pub normalize: bool,
    /// Group acceptance filter.
    pub filter: Option<Filter>,
    /// The workflow's configuration.
    pub config: serde_json::Value,
    /// Per-episode limits.
    pub limits: Arc<Limits>,
    /// Base seed; episode seeds derive from it, the row and the sample index.
    pub seed: u64,
    /// Run at most this many (not yet done) rows.
    pub max_rows: Option<usize>,
}

impl Default for RolloutOptions {
    fn default() -> Self {
        RolloutOptions {
            n_samples: 4,
            max_concurrent: 64,
            batch_size: 8,
            max_head_offpolicyness: None,
            drop_incomplete_groups: false,
            normalize: false,
            filter: None,
            config: serde_json::json!({}),
            limits: Arc::new(Limits::default()),
            seed: 0,
            max_rows: None,
        }
    }
}

/// Progress, reported after every group.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Progress {
    /// Rows this run will process.
    pub rows_total: usize,
    /// Rows finished in this run.
    pub rows_done: usize,
    /// Episodes finished.
    pub episodes: usize,
    /// Accepted episodes.
    pub accepted: usize,
    /// Rejected (returned nothing) and failed episodes.
    pub rejected_or_failed: usize,
    /// Mean raw reward of accepted trajectories so far.
    pub reward_mean: f64,
    /// Seconds since the start.
    pub elapsed_s: f64,
}

/// What a run did; written to `stats.json`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Stats {
    /// Rows in the dataset (valid lines).
    pub rows_in_dataset: usize,
    /// Rows skipped because an earlier run committed them.
    pub rows_already_done: usize,
    /// Rows run now.
    pub rows_run: usize,
    /// Malformed lines, with line numbers.
    pub bad_rows: Vec<BadRow>,
    /// Episodes by outcome: `accepted`, `rejected` or a fault kind (`timeout`, `trap`, ...).
    pub episodes: BTreeMap<String, usize>,
    /// Groups kept.
    pub groups_kept: usize,
    /// Groups dropped, by reason.
    pub groups_dropped: BTreeMap<String, usize>,
    /// Trajectories written (rows of the batches).
    pub trajectories: usize,
    /// Batches written by this run.
    pub batches: usize,
    /// Mean of raw rewards of written trajectories.
    pub reward_mean: f64,
    /// Standard deviation (population) of raw rewards.
    pub reward_std: f64,
    /// Share of written trajectories that stopped at the length limit.
    pub truncation_rate: f64,
    /// Tokens generated by all episodes.
    pub generated_tokens: u64,
    /// Wall time of the run, seconds.
    pub wall_s: f64,
    /// Episodes per second.
    pub episodes_per_s: f64,
    /// Generated tokens per second.
    pub tokens_per_s: f64,
    /// Episode wall time (from its start to its end), ms: mean, p50, p99.
    pub episode_ms: BTreeMap<String, f64>,
    /// Time from the admission of an episode's group by the controller (it counts as in flight
    /// from then) to the episode's end, ms: mean, p50, p99. Includes waiting for a worker to
    /// start it: by Little's law its mean is about `max_concurrent / episodes_per_s` when the
    /// workers are the bottleneck.
    pub admitted_ms: BTreeMap<String, f64>,
    /// Reward-call wall time, ms, summed per episode then averaged.
    pub reward_ms_per_episode: f64,
    /// Reward calls that timed out.
    pub reward_timeouts: usize,
}

/// A run of one workflow over rows.
pub struct Rollout {
    /// The runtime (engine, tokenizer, rewards registered).
    pub runtime: Arc<Runtime>,
    /// The workflow component.
    pub workflow: Arc<WorkflowComponent>,
    /// For prompt/completion text in `trajectories.jsonl`.
    pub tokenizer: Option<Arc<HostTokenizer>>,
    /// Settings.
    pub options: RolloutOptions,
    /// Metadata for every batch (component sha256s, rollbox version, ...).
    pub provenance: BTreeMap<String, String>,
}

struct GroupResult {
    row: Row,
    reports: Vec<EpisodeReport>,
    /// Per report: time from its group's admission by the controller to its end.
    admitted: Vec<Duration>,
}

/// One `trajectories.jsonl` line (serialized once, written to the batch header and the file).
#[derive(Serialize)]
struct Line<'a> {
    row: usize,
    sample: u32,
    episode: &'a str,
    group_size: u32,
    accepted_in_group: usize,
    reward: Option<f64>,
    raw_reward: Option<f64>,
    stop_reason: &'static str,
    version_head: Option<i32>,
    version_tail: Option<i32>,
    prompt_tokens: usize,
    completion_tokens: usize,
    prompt: Option<String>,
    completion: Option<String>,
    episode_ms: f64,
    reward_ms: f64,
    generate_calls: u32,
    generated_tokens: u64,
    reward_calls: &'a [rollbox_runtime::RewardRecord],
    workflow_sha256: &'a str,
    /// The workflow's metadata object (`episode-output.metadata`), as it returned it (compact,
    /// at most `rollbox_runtime::MAX_METADATA_BYTES`).
    metadata: &'a serde_json::value::RawValue,
}

/// A batch being written on the blocking pool, with what to account once it is on disk.
struct Writing {
    handle: tokio::task::JoinHandle<anyhow::Result<BatchFiles>>,
    account: BatchAccount,
}

/// What a batch adds to the run's tallies once it is on disk.
struct BatchAccount {
    rewards: Vec<f64>,
    truncated: usize,
    trajectories: usize,
}

/// An accepted episode of a kept group, ready for the batch.
struct Kept {
    tensors: Vec<(String, HostTensor)>,
    /// Serialized `trajectories.jsonl` lines (JSON objects).
    lines: Vec<String>,
    raw_rewards: Vec<f32>,
    truncated: Vec<bool>,
}

#[derive(Default)]
struct Tally {
    stats: Stats,
    episode_ms: Vec<f64>,
    admitted_ms: Vec<f64>,
    reward_ms: Vec<f64>,
    rewards: Vec<f64>,
    truncated: usize,
    /// The batch's schema, fixed by the first accepted episode: each key's dtype and rank.
    schema: Option<Vec<(String, rollbox_tensor::DType, usize)>>,
}

/// Tensor bytes of one batch at most (after padding). A batch that would be larger is split; a
/// group that alone would be larger is dropped (`too_large`), so no group can make the
/// controller allocate without bound.
pub const MAX_BATCH_TENSOR_BYTES: usize = 4 << 30;

fn episode_seed(base: u64, row: usize, sample: u32) -> u64 {
    // splitmix64 of the three, so seeds differ per row and sample and are stable across runs.
    let mut z = base ^ (row as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ u64::from(sample) << 48;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// Mean, p50 and p99 of `ms` (empty when there is nothing to summarise).
fn summary_ms(ms: &[f64]) -> BTreeMap<String, f64> {
    let mut ms = ms.to_vec();
    ms.sort_by(f64::total_cmp);
    let mut out = BTreeMap::new();
    if !ms.is_empty() {
        let at = |q: f64| ms[((ms.len() - 1) as f64 * q).round() as usize];
        out.insert("mean".into(), ms.iter().sum::<f64>() / ms.len() as f64);
        out.insert("p50".into(), at(0.5));
        out.insert("p99".into(), at(0.99));
    }
    out
}

fn f32s(t: Option<&HostTensor>) -> Option<Vec<f32>> {
    match t?.data().ok()? {
        TensorData::F32(v) => Some(v),
        _ => None,
    }
}

fn i32s(t: Option<&HostTensor>) -> Option<Vec<i32>> {
    match t?.data().ok()? {
        TensorData::I32(v) => Some(v),
        _ => None,
    }
}

fn bools(t: Option<&HostTensor>) -> Option<Vec<bool>> {
    match t?.data().ok()? {
        TensorData::Bool(v) => Some(v),
        _ => None,
    }
}

impl Rollout {
    /// Run `rows` (skipping those `out` already holds), writing batches to `out`.
    pub async fn run(
        &self,
        rows: Vec<Row>,
        bad_rows: Vec<BadRow>,
        out: &mut OutputDir,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> anyhow::Result<Stats> {
        let start = Instant::now();
        let mut stats_written = start;
        let o = &self.options;
        anyhow::ensure!(o.n_samples > 0, "--n-samples must be at least 1");
        anyhow::ensure!(o.batch_size > 0, "--batch-size must be at least 1");
        let mut tally = Tally::default();
        tally.stats.rows_in_dataset = rows.len();
        tally.stats.bad_rows = bad_rows;
        let before = rows.len();
        let mut todo: Vec<Row> = rows
            .into_iter()
            .filter(|r| !out.done_rows.contains(&r.index))
            .collect();
        tally.stats.rows_already_done = before - todo.len();
        if let Some(max) = o.max_rows {
            todo.truncate(max);
        }
        tally.stats.rows_run = todo.len();
        let mut p = Progress {
            rows_total: todo.len(),
            ..Progress::default()
        };
        let config = JsonText::from(&o.config);
        let episodes = Arc::new(Semaphore::new(o.max_concurrent.max(1)));
        let (tx, mut rx) = mpsc::unbounded_channel::<GroupResult>();
        let mut staleness = Staleness {
            max_concurrent: (o.max_concurrent / o.n_samples as usize).max(1),
            batch_size: o.batch_size,
            max_head_offpolicyness: o.max_head_offpolicyness,
            ..Staleness::default()
        };
        let mut queue = todo.into_iter().peekable();
        let mut pending: Vec<(usize, Vec<Kept>)> = Vec::new();
        let mut writing: Option<Writing> = None;
        let (mut reward_sum, mut reward_n) = (0.0f64, 0usize);
        loop {
            // Refill first: groups finished while the last result was processed are replaced
            // before any batch work, so the workers are not left without episodes.
            let version = i64::from(self.runtime.services().version());
            while queue.peek().is_some() && staleness.capacity(version) > 0 {
                let Some(row) = queue.next() else { break };
                staleness.running += 1;
                self.spawn_group(row, &config, episodes.clone(), tx.clone());
            }
            if pending.len() >= o.batch_size {
                self.write_batch(std::mem::take(&mut pending), out, &mut tally, &mut writing)
                    .await?;
                // Interim stats at most once a second: computing them sorts every latency so
                // far, which per batch would grow with the square of the run.
                if stats_written.elapsed() >= Duration::from_secs(1) {
                    out.write_stats(&serde_json::to_value(self.finish(&tally, start))?)?;
                    out.sync_dropped()?;
                    stats_written = Instant::now();
                }
            }
            if staleness.running == 0 {
                if queue.peek().is_none() {
                    break;
                }
                anyhow::bail!(
                    "the staleness limit is reached at policy version {version} (max_head_offpolicyness {:?}, {} groups accepted); raise the version (rollbox serve: POST /v1/version) or drop --max-head-offpolicyness",
                    o.max_head_offpolicyness,
                    staleness.accepted
                );
            }
            let Some(g) = rx.recv().await else { break };
            staleness.running -= 1;
            let row = g.row.index;
            p.rows_done += 1;
            match self.process(g, &mut tally, &mut p) {
                Ok(kept) => {
                    for k in &kept {
                        reward_sum += k.raw_rewards.iter().map(|&x| f64::from(x)).sum::<f64>();
                        reward_n += k.raw_rewards.len();
                    }
                    p.reward_mean = if reward_n > 0 {
                        reward_sum / reward_n as f64
                    } else {
                        0.0
                    };
                    staleness.accepted += 1;
                    tally.stats.groups_kept += 1;
                    pending.push((row, kept));
                }
                Err(reason) => {
                    staleness.rejected += 1;
                    *tally
                        .stats
                        .groups_dropped
                        .entry(reason.clone())
                        .or_insert(0) += 1;
                    out.record_dropped(row, &reason)?;
                }
            }
            p.elapsed_s = start.elapsed().as_secs_f64();
            progress(&p);
        }
        if !pending.is_empty() {
            self.write_batch(pending, out, &mut tally, &mut writing)
                .await?;
        }
        Self::commit(writing.take(), out, &mut tally).await?;
        let stats = self.finish(&tally, start);
        out.write_stats(&serde_json::to_value(&stats)?)?;
        out.sync_dropped()?;
        Ok(stats)
    }

    fn spawn_group(
        &self,
        row: Row,
        config: &JsonText,
        episodes: Arc<Semaphore>,
        tx: mpsc::UnboundedSender<GroupResult>,
    ) {
        let runtime = self.runtime.clone();
        let workflow = self.workflow.clone();
        let (n_samples, seed, limits) = (
            self.options.n_samples,
            self.options.seed,
            self.options.limits.clone(),
        );
        let config = config.clone();
        // The group counts as in flight from here (the controller's staleness accounting).
        let admitted = Instant::now();
        tokio::spawn(async move {
            let mut handles = Vec::with_capacity(n_samples as usize);
            for s in 0..n_samples {
                let Ok(permit) = episodes.clone().acquire_owned().await else {
                    return;
                };
                let request = EpisodeRequest {
                    id: format!("r{}-s{s}", row.index),
                    data: row.data.clone(),
                    config: config.clone(),
                    sample_index: s,
                    seed: episode_seed(seed, row.index, s),
                };
                let (runtime, workflow, limits) =
                    (runtime.clone(), workflow.clone(), limits.clone());
                handles.push(tokio::spawn(async move {
                    let report = runtime.run_episode(&workflow, request, limits).await;
                    drop(permit);
                    (report, admitted.elapsed())
                }));
            }
            let mut reports = Vec::with_capacity(handles.len());
            let mut admitted = Vec::with_capacity(handles.len());
            for h in handles {
                match h.await {
                    Ok((r, a)) => {
                        reports.push(r);
                        admitted.push(a);
                    }
                    Err(e) => tracing::error!("episode task of row {} failed: {e}", row.index),
                }
            }
            let _ = tx.send(GroupResult {
                row,
                reports,
                admitted,
            });
        });
    }

    /// Account a finished group; `Ok` with its kept episodes or `Err(reason)` when dropped.
    fn process(
        &self,
        mut g: GroupResult,
        tally: &mut Tally,
        p: &mut Progress,
    ) -> Result<Vec<Kept>, String> {
        let o = &self.options;
        let mut accepted: Vec<(u32, &EpisodeReport, &Trajectory)> = Vec::new();
        for (s, r) in g.reports.iter().enumerate() {
            p.episodes += 1;
            *tally
                .stats
                .episodes
                .entry(r.outcome.kind().to_string())
                .or_insert(0) += 1;
            tally.stats.generated_tokens += r.generated_tokens;
            tally.episode_ms.push(r.wall.as_secs_f64() * 1e3);
            if let Some(a) = g.admitted.get(s) {
                tally.admitted_ms.push(a.as_secs_f64() * 1e3);
            }
            let reward_us: u64 = r.reward_calls.iter().map(|c| c.wall_us).sum();
            tally.reward_ms.push(reward_us as f64 / 1e3);
            tally.stats.reward_timeouts += r.reward_calls.iter().filter(|c| c.timed_out).count();
            match &r.outcome {
                EpisodeOutcome::Accepted(t) => {
                    p.accepted += 1;
                    accepted.push((s as u32, r, t));
                }
                EpisodeOutcome::Rejected => p.rejected_or_failed += 1,
                EpisodeOutcome::Failed(f) => {
                    p.rejected_or_failed += 1;
                    tracing::warn!(episode = %r.id, kind = f.kind(), "episode failed: {f}");
                }
            }
        }
        if accepted.is_empty() {
            return Err("no_accepted_episodes".into());
        }
        if o.drop_incomplete_groups && accepted.len() < o.n_samples as usize {
            return Err("incomplete".into());
        }
        // Every kept episode must carry the batch's key set, each key with the batch's dtype
        // and rank (AReaL's concat requires it): a group that cannot be assembled is dropped
        // here, with its reason, instead of failing the batch.
        for (_, r, t) in &accepted {
            let mut schema: Vec<(String, rollbox_tensor::DType, usize)> = t
                .tensors
                .iter()
                .map(|(k, x)| (k.clone(), x.dtype(), x.rank()))
                .collect();
            schema.sort_by(|a, b| a.0.cmp(&b.0));
            match &tally.schema {
                None => tally.schema = Some(schema),
                Some(k) if *k != schema => {
                    let same_keys =
                        k.len() == schema.len() && k.iter().zip(&schema).all(|(a, b)| a.0 == b.0);
                    tracing::warn!(episode = %r.id, "returned {schema:?}, the batch has {k:?}; group dropped");
                    return Err(if same_keys {
                        "schema_mismatch".into()
                    } else {
                        "key_mismatch".into()
                    });
                }
                Some(_) => {}
            }
        }
        // References for normalisation and filtering: rollout_reward if present, else reward.
        let mut references = Vec::with_capacity(accepted.len());
        let mut raw: Vec<Vec<f32>> = Vec::with_capacity(accepted.len());
        for (_, _, t) in &accepted {
            let rewards = f32s(t.get("rewards"));
            let reference = f32s(t.get("rollout_reward"))
                .and_then(|v| v.first().copied())
                .or_else(|| rewards.as_ref().and_then(|v| v.first().copied()));
            match (rewards, reference) {
                (Some(r), Some(x)) => {
                    raw.push(r);
                    references.push(x);
                }
                _ if o.normalize || o.filter.is_some() => return Err("missing_rewards".into()),
                _ => {
                    raw.push(Vec::new());
                    references.push(f32::NAN);
                }
            }
        }
        if let Some(f) = o.filter
            && !f.accepts(&references)
        {
            return Err("filtered".into());
        }
        let sha = self.workflow.info().sha256.clone();
        // Everything but the tensors first (it reads the episodes); then the tensors are
        // moved out of the reports, not copied.
        let mut kept = Vec::with_capacity(accepted.len());
        for ((s, r, t), raw_rewards) in accepted.iter().zip(raw) {
            let (rewards, normalized) = if o.normalize {
                let z = group::normalize(&raw_rewards, &references, 1e-6);
                (z.clone(), Some(z))
            } else {
                (raw_rewards.clone(), None)
            };
            let lines = self.lines(
                g.row.index,
                *s,
                r,
                t,
                &rewards,
                &raw_rewards,
                accepted.len(),
                &sha,
            );
            let truncated = bools(t.get("is_truncated")).unwrap_or_default();
            kept.push((*s, normalized, lines, raw_rewards, truncated));
        }
        drop(accepted);
        let mut out = Vec::with_capacity(kept.len());
        for (s, normalized, lines, raw_rewards, truncated) in kept {
            let EpisodeOutcome::Accepted(t) = &mut g.reports[s as usize].outcome else {
                continue;
            };
            let mut tensors = std::mem::take(&mut t.tensors);
            if let Some(z) = normalized {
                let rows = z.len();
                let set = |key: &str, v: Vec<f32>, tensors: &mut Vec<(String, HostTensor)>| {
                    let tensor = HostTensor::new(TensorData::F32(v), vec![rows])
                        .map_err(|e| e.to_string())?;
                    match tensors.iter_mut().find(|(k, _)| k == key) {
                        Some((_, x)) => *x = tensor,
                        None => tensors.push((key.to_string(), tensor)),
                    }
                    Ok::<_, String>(())
                };
                set("rewards", z, &mut tensors)?;
                set("original_rewards", raw_rewards.clone(), &mut tensors)?;
            }
            out.push(Kept {
                tensors,
                lines,
                raw_rewards,
                truncated,
            });
        }
        Ok(out)
    }

    /// One `trajectories.jsonl` line per row of an accepted episode.
    #[allow(clippy::too_many_arguments)]
    fn lines(
        &self,
        row: usize,
        sample: u32,
        r: &EpisodeReport,
        t: &Trajectory,
        rewards: &[f32],
        raw: &[f32],
        accepted_in_group: usize,
        sha: &str,
    ) -> Vec<String> {
        let ids = i32s(t.get("input_ids")).unwrap_or_default();
        let mask = i32s(t.get("loss_mask")).unwrap_or_default();
        let attn = bools(t.get("attention_mask")).unwrap_or_default();
        let versions = i32s(t.get("versions")).unwrap_or_default();
        let truncated = bools(t.get("is_truncated")).unwrap_or_default();
        let b = t
            .get("input_ids")
            .and_then(|x| x.shape().first().copied())
            .unwrap_or(rewards.len().max(1));
        let l = ids.len().checked_div(b).unwrap_or(0);
        // Checked to be one compact JSON object at the episode boundary.
        let empty: &serde_json::value::RawValue = serde_json::from_str("{}").expect("`{}` is JSON");
        let metadata = serde_json::from_str(t.metadata_json.as_str()).unwrap_or(empty);
        (0..b)
            .map(|i| {
                let span = i * l..(i + 1) * l;
                let (mut prompt, mut completion, mut vs) = (Vec::new(), Vec::new(), Vec::new());
                for j in span.clone() {
                    if attn.get(j) == Some(&false) {
                        continue;
                    }
                    let Some(&id) = ids.get(j) else { continue };
                    if mask.get(j) == Some(&1) {
                        completion.push(id as u32);
                        if let Some(&v) = versions.get(j) {
                            vs.push(v);
                        }
                    } else {
                        prompt.push(id as u32);
                    }
                }
                let text = |ids: &[u32]| {
                    self.tokenizer
                        .as_ref()
                        .and_then(|tok| tok.decode(ids, false).ok())
                };
                let line = Line {
                    row,
                    sample,
                    episode: &r.id,
                    group_size: self.options.n_samples,
                    accepted_in_group,
                    reward: rewards.get(i).map(|&x| f64::from(x)),
                    raw_reward: raw.get(i).map(|&x| f64::from(x)),
                    stop_reason: match truncated.get(i) {
                        Some(true) => "length",
                        Some(false) => "stop",
                        None => "unknown",
                    },
                    version_head: vs.iter().min().copied(),
                    version_tail: vs.iter().max().copied(),
                    prompt_tokens: prompt.len(),
                    completion_tokens: completion.len(),
                    prompt: text(&prompt),
                    completion: text(&completion),
                    episode_ms: r.wall.as_secs_f64() * 1e3,
                    reward_ms: r.reward_calls.iter().map(|c| c.wall_us).sum::<u64>() as f64 / 1e3,
                    generate_calls: r.generate_calls,
                    generated_tokens: r.generated_tokens,
                    reward_calls: &r.reward_calls,
                    workflow_sha256: sha,
                    metadata,
                };
                serde_json::to_string(&line).unwrap_or_default()
            })
            .collect()
    }

    /// Assemble a batch and start writing it on the blocking pool; the batch before it (still
    /// being written) is committed first, so batches reach the disk in order while the
    /// controller goes on with episodes instead of waiting for each write.
    ///
    /// A batch that cannot be assembled or written as one file (its padded tensors over
    /// [`MAX_BATCH_TENSOR_BYTES`], its safetensors header over the format's cap) is split in
    /// halves; a single group that still fails is dropped with its reason recorded, and the run
    /// goes on.
    async fn write_batch(
        &self,
        groups: Vec<(usize, Vec<Kept>)>,
        out: &mut OutputDir,
        tally: &mut Tally,
        writing: &mut Option<Writing>,
    ) -> anyhow::Result<()> {
        // Parts still to write, the next one last.
        let mut parts = vec![groups];
        while let Some(part) = parts.pop() {
            match self.prepare_batch(&part, out) {
                Ok((files, account)) => {
                    // The batch before this one is on disk first: a batch's write appends its
                    // lines to `trajectories.jsonl`, which must follow the batch order (two
                    // writes in flight at once appended them out of order).
                    Self::commit(writing.take(), out, tally).await?;
                    *writing = Some(Writing {
                        // The writes and fsyncs block: tokio's blocking pool runs them.
                        handle: tokio::task::spawn_blocking(move || files.write().map(|()| files)),
                        account,
                    });
                }
                Err(e) if part.len() > 1 => {
                    tracing::warn!(
                        "batch {} of {} groups: {e:#}; writing it in two parts",
                        out.next_batch,
                        part.len()
                    );
                    let mut first = part;
                    let second = first.split_off(first.len() / 2);
                    parts.push(second);
                    parts.push(first);
                }
                Err(e) => {
                    let reason = match e.downcast_ref::<rollbox_tensor::TensorError>() {
                        Some(rollbox_tensor::TensorError::TooLarge { .. }) => "too_large",
                        _ => "assembly_failed",
                    };
                    for (row, _) in &part {
                        tracing::warn!(
                            "row {row}: its group cannot be written ({e:#}); dropped as {reason}"
                        );
                        tally.stats.groups_kept = tally.stats.groups_kept.saturating_sub(1);
                        *tally.stats.groups_dropped.entry(reason.into()).or_insert(0) += 1;
                        out.record_dropped(*row, reason)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// The files of one batch, in memory, and what to account once they are written.
    fn prepare_batch(
        &self,
        groups: &[(usize, Vec<Kept>)],
        out: &mut OutputDir,
    ) -> anyhow::Result<(BatchFiles, BatchAccount)> {
        let rows: Vec<usize> = groups.iter().map(|(r, _)| *r).collect();
        let kept: Vec<&Kept> = groups.iter().flat_map(|(_, k)| k.iter()).collect();
        let dicts: Vec<Vec<(String, &HostTensor)>> = kept
            .iter()
            .map(|k| k.tensors.iter().map(|(n, t)| (n.clone(), t)).collect())
            .collect();
        let tensors = rollbox_tensor::concat_padded_within(&dicts, 0.0, MAX_BATCH_TENSOR_BYTES)?;
        let lines: Vec<&str> = kept
            .iter()
            .flat_map(|k| k.lines.iter().map(String::as_str))
            .collect();
        let mut meta = self.provenance.clone();
        meta.insert(
            "group_sizes".into(),
            serde_json::to_string(
                &groups
                    .iter()
                    .map(|(_, k)| k.iter().map(|x| x.raw_rewards.len().max(1)).sum::<usize>())
                    .collect::<Vec<_>>(),
            )?,
        );
        let files = out.prepare_batch(&tensors, meta, &rows, &lines)?;
        let account = BatchAccount {
            rewards: kept
                .iter()
                .flat_map(|k| k.raw_rewards.iter().map(|&x| f64::from(x)))
                .collect(),
            truncated: kept
                .iter()
                .map(|k| k.truncated.iter().filter(|&&x| x).count())
                .sum(),
            trajectories: lines.len(),
        };
        Ok((files, account))
    }

    /// Wait for a batch's write and record it (rows done, trajectories, rewards).
    async fn commit(
        writing: Option<Writing>,
        out: &mut OutputDir,
        tally: &mut Tally,
    ) -> anyhow::Result<()> {
        let Some(w) = writing else {
            return Ok(());
        };
        let files = w
            .handle
            .await
            .map_err(|e| anyhow::anyhow!("the batch writer thread failed: {e}"))??;
        let path = out.committed(files);
        tracing::info!(
            "wrote {} ({} trajectories)",
            path.display(),
            w.account.trajectories
        );
        tally.rewards.extend(w.account.rewards);
        tally.truncated += w.account.truncated;
        tally.stats.trajectories += w.account.trajectories;
        tally.stats.batches += 1;
        Ok(())
    }

    fn finish(&self, tally: &Tally, start: Instant) -> Stats {
        let mut s = tally.stats.clone();
        let n = tally.rewards.len();
        if n > 0 {
            s.reward_mean = tally.rewards.iter().sum::<f64>() / n as f64;
            s.reward_std = (tally
                .rewards
                .iter()
                .map(|x| (x - s.reward_mean).powi(2))
                .sum::<f64>()
                / n as f64)
                .sqrt();
        }
        if s.trajectories > 0 {
            s.truncation_rate = tally.truncated as f64 / s.trajectories as f64;
        }
        let wall = start.elapsed().max(Duration::from_micros(1)).as_secs_f64();
        s.wall_s = wall;
        let episodes: usize = s.episodes.values().sum();
        s.episodes_per_s = episodes as f64 / wall;
        s.tokens_per_s = s.generated_tokens as f64 / wall;
        s.episode_ms = summary_ms(&tally.episode_ms);
        s.admitted_ms = summary_ms(&tally.admitted_ms);
        if !tally.reward_ms.is_empty() {
            s.reward_ms_per_episode =
                tally.reward_ms.iter().sum::<f64>() / tally.reward_ms.len() as f64;
        }
        s
    }
}
