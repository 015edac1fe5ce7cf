//! The batch stage: kept groups assembled into one padded tensor dict with its header and
//! lines ([AReaL's `concat_padded_tensors`](rollbox_tensor::concat_padded_within)), handed to
//! the [`BatchSink`], and written off the async workers one batch at a time, in order.

use std::collections::BTreeMap;
use std::sync::Arc;

use rollbox_runtime::Reservation;
use rollbox_tensor::{HostTensor, TensorError};

use crate::group::DropReason;
use crate::sink::{Batch, BatchSink};
use crate::stats::Tally;

/// Tensor bytes of one batch at most (after padding). A batch that would be larger is split; a
/// group that alone would be larger is dropped (`too_large`), so no group can make the
/// controller allocate without bound.
pub const MAX_BATCH_TENSOR_BYTES: usize = 4 << 30;

/// An accepted episode of a kept group, ready for the batch.
pub(crate) struct Kept {
    pub(crate) tensors: Vec<(String, HostTensor)>,
    /// Serialised `trajectories.jsonl` lines (JSON objects), one per row.
    pub(crate) lines: Vec<String>,
    pub(crate) raw_rewards: Vec<f32>,
    pub(crate) truncated: Vec<bool>,
    /// The episode's share of the host memory budget: held until its batch is written (the
    /// batch, a padded copy of these tensors, is about as large).
    pub(crate) memory: Arc<Reservation>,
}

/// A kept group: its dataset row and episodes.
pub(crate) type KeptGroup = (usize, Vec<Kept>);

/// What a batch adds to the run's tallies once it is written.
struct BatchAccount {
    rewards: Vec<f64>,
    truncated: usize,
    trajectories: usize,
}

/// A batch handed to the sink, its write (if the sink has one) running on the blocking pool.
struct Writing {
    handle: Option<tokio::task::JoinHandle<anyhow::Result<()>>>,
    account: BatchAccount,
    /// Its episodes' shares of the host memory budget, given back once it is written (or
    /// handed to a sink that keeps the batch, [`BatchSink::keep_memory`]).
    memory: Vec<Arc<Reservation>>,
}

/// Writes batches in order, one in flight at a time.
#[derive(Default)]
pub(crate) struct Writer {
    writing: Option<Writing>,
}

impl Writer {
    /// Assemble a batch and start writing it; the batch before it (still being written) is
    /// committed first, so batches reach the sink in order while the controller goes on with
    /// episodes instead of waiting for each write.
    ///
    /// A batch that cannot be assembled or encoded as one file (its padded tensors over
    /// [`MAX_BATCH_TENSOR_BYTES`], its safetensors header over the format's cap) is split in
    /// halves; a single group that still fails is dropped with its reason recorded, and the run
    /// goes on.
    pub(crate) async fn write(
        &mut self,
        groups: Vec<KeptGroup>,
        provenance: &BTreeMap<String, String>,
        out: &mut dyn BatchSink,
        tally: &mut Tally,
    ) -> anyhow::Result<()> {
        // Parts still to write, the next one last.
        let mut parts = vec![groups];
        while let Some(part) = parts.pop() {
            let prepared = assemble(&part, provenance).and_then(|(batch, account)| {
                let job = out.prepare(batch)?;
                Ok((job, account))
            });
            match prepared {
                Ok((job, account)) => {
                    // The batch before this one is written first: a batch's write appends its
                    // lines to `trajectories.jsonl`, which must follow the batch order.
                    self.commit(out, tally).await?;
                    self.writing = Some(Writing {
                        // The writes and fsyncs block: tokio's blocking pool runs them.
                        handle: job.map(tokio::task::spawn_blocking),
                        account,
                        memory: part
                            .iter()
                            .flat_map(|(_, k)| k.iter().map(|k| k.memory.clone()))
                            .collect(),
                    });
                }
                Err(e) if part.len() > 1 => {
                    tracing::warn!(
                        "batch {} of {} groups: {e:#}; writing it in two parts",
                        out.next_batch(),
                        part.len()
                    );
                    let mut first = part;
                    let second = first.split_off(first.len() / 2);
                    parts.push(second);
                    parts.push(first);
                }
                Err(e) => {
                    let reason = match e.downcast_ref::<TensorError>() {
                        Some(TensorError::TooLarge { .. }) => DropReason::TooLarge,
                        _ => DropReason::AssemblyFailed,
                    };
                    for (row, _) in &part {
                        tracing::warn!(
                            "row {row}: its group cannot be written ({e:#}); dropped as {reason}"
                        );
                        tally.stats.groups_kept = tally.stats.groups_kept.saturating_sub(1);
                        *tally
                            .stats
                            .groups_dropped
                            .entry(reason.as_str().into())
                            .or_insert(0) += 1;
                        out.record_dropped(*row, reason, Some(&format!("{e:#}")))?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Wait for the batch in flight (if any) and account it (rows done, trajectories,
    /// rewards).
    pub(crate) async fn commit(
        &mut self,
        out: &mut dyn BatchSink,
        tally: &mut Tally,
    ) -> anyhow::Result<()> {
        let Some(w) = self.writing.take() else {
            return Ok(());
        };
        if let Some(handle) = w.handle {
            handle
                .await
                .map_err(|e| anyhow::anyhow!("the batch writer thread failed: {e}"))??;
        }
        out.committed();
        out.keep_memory(w.memory);
        tally.add_rewards(&w.account.rewards);
        tally.truncated += w.account.truncated;
        tally.stats.trajectories += w.account.trajectories;
        tally.stats.batches += 1;
        Ok(())
    }
}

/// One batch of `groups`, and what to account once it is written.
fn assemble(
    groups: &[KeptGroup],
    provenance: &BTreeMap<String, String>,
) -> anyhow::Result<(Batch, BatchAccount)> {
    let kept: Vec<&Kept> = groups.iter().flat_map(|(_, k)| k.iter()).collect();
    let dicts: Vec<Vec<(String, &HostTensor)>> = kept
        .iter()
        .map(|k| k.tensors.iter().map(|(n, t)| (n.clone(), t)).collect())
        .collect();
    let tensors = rollbox_tensor::concat_padded_within(&dicts, 0.0, MAX_BATCH_TENSOR_BYTES)?;
    let lines: Vec<String> = kept.iter().flat_map(|k| k.lines.iter().cloned()).collect();
    let group_sizes = groups
        .iter()
        .map(|(_, k)| k.iter().map(|x| x.raw_rewards.len().max(1)).sum::<usize>())
        .collect();
    let multi_modal_offsets = multi_modal_offsets(&dicts);
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
    let batch = Batch {
        tensors,
        provenance: provenance.clone(),
        group_sizes,
        multi_modal_offsets,
        rows: groups.iter().map(|(r, _)| *r).collect(),
        lines,
        number: None,
    };
    Ok((batch, account))
}

/// Where each trajectory's rows of each multi-modal key start in the batch (`offsets[i]` to
/// `offsets[i + 1]` are trajectory `i`'s, AReaL's `multi_modal_input[i]`): `key -> [0, ...,
/// rows]`, empty without multi-modal keys. Episodes with such keys hold one
/// trajectory each (checked at the guest boundary), so trajectory and batch row agree.
fn multi_modal_offsets(dicts: &[Vec<(String, &HostTensor)>]) -> BTreeMap<String, Vec<u64>> {
    let mut out = BTreeMap::new();
    let Some(first) = dicts.first() else {
        return out;
    };
    for (key, _) in first
        .iter()
        .filter(|(k, _)| rollbox_tensor::is_multi_modal_key(k))
    {
        let mut offsets = Vec::with_capacity(dicts.len() + 1);
        let mut at = 0u64;
        offsets.push(at);
        for d in dicts {
            at += d
                .iter()
                .find(|(k, _)| k == key)
                .map_or(0, |(_, t)| t.shape().first().copied().unwrap_or(0) as u64);
            offsets.push(at);
        }
        out.insert(key.clone(), offsets);
    }
    out
}
