//! The controller: admission (AReaL's staleness capacity), spawning each row's group of
//! episodes, and the loop that hands finished groups to the group stage ([`crate::group`]) and
//! kept ones to the batch stage ([`crate::batch`]).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollbox_runtime::text::escape_control;
use rollbox_runtime::{
    EpisodeOutcome, EpisodeReport, EpisodeRequest, GuestFault, JsonText, Limits, Runtime, Setting,
    Trajectory, WorkflowComponent,
};
use rollbox_tensor::{HostTensor, TensorData};
use rollbox_tokenizer::HostTokenizer;
use tokio::sync::{Semaphore, mpsc};

use crate::batch::{Kept, KeptGroup, Writer};
use crate::dataset::{Dataset, Row};
use crate::group::{self, DropReason, Schema};
use crate::options::{RolloutOptions, RunScope, episode_seed};
use crate::sink::BatchSink;
use crate::staleness::Staleness;
use crate::stats::{Progress, Stats, Tally};
use crate::trajectory_line::{self, LineContext};

/// A run of one workflow over rows.
#[derive(Clone)]
pub struct Rollout {
    /// The runtime (engine, tokenizer, rewards registered).
    pub runtime: Arc<Runtime>,
    /// The workflow component.
    pub workflow: Arc<WorkflowComponent>,
    /// For prompt/completion text in `trajectories.jsonl`.
    pub tokenizer: Option<Arc<HostTokenizer>>,
    /// The workflow's configuration, a JSON object, given to every episode.
    pub config: serde_json::Value,
    /// Each episode's limits.
    pub limits: Arc<Limits>,
    /// Settings of the run: groups, batches, concurrency, seeds.
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

impl Rollout {
    /// Run the dataset's rows (skipping those `out` already holds), writing batches to `out`.
    /// Rows are read as the run has room for them, so memory does not grow with the
    /// dataset; bad lines are counted in the stats as they are read.
    pub async fn run(
        &self,
        dataset: Dataset,
        out: &mut dyn BatchSink,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> anyhow::Result<Stats> {
        self.run_for(&RunScope::default(), dataset, out, progress)
            .await
    }

    /// [`Rollout::run`] for a caller other than the process: its episodes run in `who`'s scope
    /// and draw on the budget it shares with that caller's other runs.
    pub async fn run_for(
        &self,
        who: &RunScope,
        mut dataset: Dataset,
        out: &mut dyn BatchSink,
        progress: &mut (dyn FnMut(&Progress) + Send),
    ) -> anyhow::Result<Stats> {
        let start = Instant::now();
        let mut stats_written = start;
        let o = &self.options;
        anyhow::ensure!(o.n_samples > 0, "n_samples must be at least 1");
        anyhow::ensure!(o.batch_size > 0, "batch_size must be at least 1");
        let mut tally = Tally::default();
        let max_rows = o.max_rows.unwrap_or(usize::MAX);
        let mut p = Progress {
            rows_total: dataset
                .rows_hint()
                .unwrap_or(0)
                .saturating_sub(out.done_rows().len())
                .min(max_rows),
            ..Progress::default()
        };
        let config = JsonText::from(&self.config);
        let episodes = Arc::new(Semaphore::new(o.max_concurrent.max(1)));
        let (tx, mut rx) = mpsc::unbounded_channel::<GroupResult>();
        let mut staleness = Staleness {
            max_concurrent: (o.max_concurrent / o.n_samples as usize).max(1),
            batch_size: o.batch_size,
            max_head_offpolicyness: o.max_head_offpolicyness,
            ..Staleness::default()
        };
        // The next row to run, read ahead by one so the end of the dataset is known.
        let mut next = next_row(&mut dataset, out, &mut tally, max_rows)?;
        // A run stopped early (an error, or its future dropped: a `serve` client that went
        // away) stops its groups' episodes too, rather than leaving them to run out unseen.
        let mut groups = Aborting::default();
        let mut pending: Vec<KeptGroup> = Vec::new();
        let mut writer = Writer::default();
        let mut schema = None;
        let (mut reward_sum, mut reward_n) = (0.0f64, 0usize);
        loop {
            // Refill first: groups finished while the last result was processed are replaced
            // before any batch work, so the workers are not left without episodes.
            let version = i64::from(self.runtime.services().version());
            while next.is_some() && staleness.capacity(version) > 0 {
                let Some(row) = next.take() else { break };
                staleness.running += 1;
                groups.add(self.spawn_group(who, row, &config, episodes.clone(), tx.clone()));
                next = next_row(&mut dataset, out, &mut tally, max_rows)?;
            }
            if pending.len() >= o.batch_size {
                writer
                    .write(
                        std::mem::take(&mut pending),
                        &self.provenance,
                        out,
                        &mut tally,
                    )
                    .await?;
                // Interim stats at most once a second: computing them sorts every latency so
                // far, which per batch would grow with the square of the run.
                if stats_written.elapsed() >= Duration::from_secs(1) {
                    out.checkpoint(
                        &tally.stats(start, self.runtime.services().host_memory()),
                        false,
                    )?;
                    stats_written = Instant::now();
                }
            }
            if staleness.running == 0 {
                if next.is_none() {
                    break;
                }
                anyhow::bail!(
                    "the staleness limit is reached at policy version {version} (max_head_offpolicyness {:?}, {} groups accepted); raise the policy version (rollbox serve: POST /v1/version) or unset max_head_offpolicyness",
                    o.max_head_offpolicyness,
                    staleness.accepted
                );
            }
            let Some(g) = rx.recv().await else { break };
            staleness.running -= 1;
            let row = g.row.index;
            p.rows_done += 1;
            let mut first_error = None;
            for r in &g.reports {
                if let EpisodeOutcome::Failed(f) = &r.outcome {
                    let text = failure(f, o.hint);
                    tracing::warn!(
                        episode = %escape_control(&r.id),
                        kind = f.kind(),
                        "episode failed: {}",
                        escape_control(&text)
                    );
                    first_error.get_or_insert(text);
                }
            }
            match self.process(g, &mut schema, &mut tally, &mut p) {
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
                        .entry(reason.as_str().into())
                        .or_insert(0) += 1;
                    out.record_dropped(row, reason, first_error.as_deref())?;
                }
            }
            p.elapsed_s = start.elapsed().as_secs_f64();
            progress(&p);
        }
        if !pending.is_empty() {
            writer
                .write(pending, &self.provenance, out, &mut tally)
                .await?;
        }
        writer.commit(out, &mut tally).await?;
        let stats = tally.stats(start, self.runtime.services().host_memory());
        out.checkpoint(&stats, true)?;
        Ok(stats)
    }

    fn spawn_group(
        &self,
        who: &RunScope,
        row: Row,
        config: &JsonText,
        episodes: Arc<Semaphore>,
        tx: mpsc::UnboundedSender<GroupResult>,
    ) -> tokio::task::AbortHandle {
        let runtime = self.runtime.clone();
        let workflow = self.workflow.clone();
        let (n_samples, seed, limits) = (
            self.options.n_samples,
            self.options.seed,
            self.limits.clone(),
        );
        let config = config.clone();
        let shared = who.shared.clone();
        let scope = who.scope.clone();
        // The group counts as in flight from here (the controller's staleness accounting).
        let admitted = Instant::now();
        let group = tokio::spawn(async move {
            let mut handles = Vec::with_capacity(n_samples as usize);
            // Aborted with the group.
            let mut running = Aborting::default();
            for s in 0..n_samples {
                let Ok(permit) = episodes.clone().acquire_owned().await else {
                    return;
                };
                // A shared budget's slot, then its time (held while it is spent), counted from
                // the episode's start.
                let shared_permit = match &shared {
                    Some(s) => match s.in_flight.clone().acquire_owned().await {
                        Ok(p) => {
                            s.meter.time_left().await;
                            Some((p, s.meter.start(), s.meter.clone()))
                        }
                        Err(_) => return,
                    },
                    None => None,
                };
                let threads = shared.as_ref().and_then(|s| s.threads.as_ref());
                let request = EpisodeRequest {
                    id: format!("r{}-s{s}", row.index),
                    data: row.data.clone(),
                    config: config.clone(),
                    sample_index: s,
                    seed: episode_seed(seed, row.index, s),
                };
                let (runtime, workflow, limits, scope) = (
                    runtime.clone(),
                    workflow.clone(),
                    limits.clone(),
                    scope.clone(),
                );
                let episode = async move {
                    let id = request.id.clone();
                    let started = Instant::now();
                    let run = runtime.run_episode(&scope, &workflow, request, limits);
                    let report = match &shared_permit {
                        // Stopped once the shared time is spent.
                        Some((_, _, meter)) => tokio::select! {
                            report = run => report,
                            () = meter.spent() => EpisodeReport::stopped(
                                id,
                                GuestFault::LimitExceeded {
                                    message: "its tenant's sandbox time is spent (sandbox_seconds_per_minute): the episode was stopped".into(),
                                    setting: None,
                                },
                                started.elapsed(),
                            ),
                        },
                        None => run.await,
                    };
                    drop(permit);
                    drop(shared_permit);
                    (report, admitted.elapsed())
                };
                let handle = match threads {
                    Some(h) => h.spawn(episode),
                    None => tokio::spawn(episode),
                };
                running.add(handle.abort_handle());
                handles.push(handle);
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
        group.abort_handle()
    }

    /// Account a finished group; its kept episodes, or why it was dropped.
    fn process(
        &self,
        mut g: GroupResult,
        schema: &mut Option<Schema>,
        tally: &mut Tally,
        p: &mut Progress,
    ) -> Result<Vec<Kept>, DropReason> {
        let mut accepted: Vec<(u32, &Trajectory)> = Vec::new();
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
            tally.reward_ms.0 += reward_us as f64 / 1e3;
            tally.reward_ms.1 += 1;
            tally.stats.reward_timeouts += r.reward_calls.iter().filter(|c| c.timed_out).count();
            match &r.outcome {
                EpisodeOutcome::Accepted(t) => {
                    p.accepted += 1;
                    accepted.push((s as u32, t));
                }
                EpisodeOutcome::Rejected => p.rejected_or_failed += 1,
                // The runtime has already logged the failure (once, escaped).
                EpisodeOutcome::Failed(_) => p.rejected_or_failed += 1,
            }
        }
        let scored = group::judge(&accepted, schema, &self.options.group_policy())?;
        let cx = LineContext {
            tokenizer: self.tokenizer.as_deref(),
            group_size: self.options.n_samples,
            workflow_sha256: &self.workflow.info().sha256,
        };
        // Everything but the tensors first (it reads the episodes); then the tensors are moved
        // out of the reports, not copied.
        let mut lines = Vec::with_capacity(scored.len());
        for (s, (_, t)) in scored.iter().zip(&accepted) {
            let r = &g.reports[s.sample as usize];
            let l =
                trajectory_line::lines(&cx, g.row.index, s, r, t, scored.len()).map_err(|e| {
                    tracing::warn!(
                        episode = %escape_control(&r.id),
                        "its trajectory line cannot be written: {e}"
                    );
                    DropReason::AssemblyFailed
                })?;
            lines.push((l, t.bools("is_truncated").unwrap_or_default()));
        }
        drop(accepted);
        let mut out = Vec::with_capacity(scored.len());
        for (s, (lines, truncated)) in scored.into_iter().zip(lines) {
            let EpisodeOutcome::Accepted(t) = &mut g.reports[s.sample as usize].outcome else {
                continue;
            };
            let mut tensors = std::mem::take(&mut t.tensors);
            if s.normalized {
                let rows = s.rewards.len();
                let mut set = |key: &str, v: Vec<f32>| {
                    let tensor = HostTensor::new(TensorData::F32(v), vec![rows]).map_err(|e| {
                        tracing::warn!("row {}: `{key}`: {e}", g.row.index);
                        DropReason::AssemblyFailed
                    })?;
                    match tensors.iter_mut().find(|(k, _)| k == key) {
                        Some((_, x)) => *x = tensor,
                        None => tensors.push((key.to_string(), tensor)),
                    }
                    Ok::<_, DropReason>(())
                };
                set("rewards", s.rewards)?;
                set("original_rewards", s.raw.clone())?;
            }
            out.push(Kept {
                tensors,
                lines,
                raw_rewards: s.raw,
                truncated,
                memory: t.memory.clone(),
            });
        }
        Ok(out)
    }
}

/// The next row to run: rows `out` already holds are counted and passed over, bad lines
/// counted; `None` at the end of the dataset or once `max_rows` rows were started.
fn next_row(
    dataset: &mut Dataset,
    out: &dyn BatchSink,
    tally: &mut Tally,
    max_rows: usize,
) -> anyhow::Result<Option<Row>> {
    while tally.stats.rows_run < max_rows {
        match dataset.next_entry()? {
            None => return Ok(None),
            Some(Err(bad)) => {
                tracing::warn!("{}: {}; skipped", dataset.place(bad.line), bad.error);
                tally.bad_row(bad);
            }
            Some(Ok(row)) => {
                tally.stats.rows_in_dataset += 1;
                if out.done_rows().contains(row.index) {
                    tally.stats.rows_already_done += 1;
                } else {
                    tally.stats.rows_run += 1;
                    return Ok(Some(row));
                }
            }
        }
    }
    Ok(None)
}

/// A failed episode in words: its kind, the fault and the hint to change the setting behind
/// it (phrased by the entry point, `RolloutOptions::hint`).
fn failure(f: &rollbox_runtime::GuestFault, hint: fn(&Setting) -> String) -> String {
    format!("{}: {}", f.kind(), f.explain(hint))
}

/// Tasks aborted when this is dropped (finished ones are let go as more are added).
#[derive(Default)]
struct Aborting {
    tasks: Vec<tokio::task::AbortHandle>,
    /// Past this many, the finished ones are let go (then it doubles from what is left).
    prune_at: usize,
}

impl Aborting {
    fn add(&mut self, task: tokio::task::AbortHandle) {
        if self.tasks.len() >= self.prune_at.max(64) {
            self.tasks.retain(|t| !t.is_finished());
            self.prune_at = self.tasks.len() * 2;
        }
        self.tasks.push(task);
    }
}

impl Drop for Aborting {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
