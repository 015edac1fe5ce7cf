//! Where batches go: the [`BatchSink`] trait, with the disk sink ([`crate::OutputDir`]: atomic
//! files, resume, fsync) and the memory sink ([`MemorySink`]: `rollbox serve` answers from it,
//! with no file written).

use std::collections::BTreeMap;
use std::sync::Arc;

use rollbox_runtime::{HostMemory, Reservation};
use rollbox_tensor::HostTensor;

use crate::group::DropReason;
use crate::stats::Stats;

/// An assembled batch on its way to a sink: AReaL's padded tensor dict and what the header
/// says about it, as typed fields; JSON text only in [`Batch::header`], when the safetensors
/// header is written.
#[derive(Debug, Clone, Default)]
pub struct Batch {
    /// The padded tensors.
    pub tensors: Vec<(String, HostTensor)>,
    /// Provenance (rollbox's version, the engine, component sha256s): header keys as they are.
    pub provenance: BTreeMap<String, String>,
    /// Trajectories per kept group, in batch order (`group_sizes`).
    pub group_sizes: Vec<usize>,
    /// Where each trajectory's rows of each multi-modal key start (`offsets[i]` to
    /// `offsets[i + 1]` are trajectory `i`'s); empty without multi-modal keys.
    pub multi_modal_offsets: BTreeMap<String, Vec<u64>>,
    /// Dataset rows, in batch order.
    pub rows: Vec<usize>,
    /// Trajectory lines (serialised JSON objects), one per row of the tensors.
    pub lines: Vec<String>,
    /// Its number in the run, once a sink has taken it.
    pub number: Option<usize>,
}

impl Batch {
    /// The safetensors header metadata: the provenance, `batch` (its number), `rows`,
    /// `group_sizes`, `trajectories` (the lines as one JSON list) and, with multi-modal keys,
    /// `multi_modal_offsets`.
    pub fn header(&self) -> serde_json::Result<BTreeMap<String, String>> {
        let mut h = self.provenance.clone();
        if let Some(n) = self.number {
            h.insert("batch".into(), n.to_string());
        }
        h.insert("rows".into(), serde_json::to_string(&self.rows)?);
        h.insert(
            "group_sizes".into(),
            serde_json::to_string(&self.group_sizes)?,
        );
        // The lines are serialised JSON objects: the header holds them as one JSON list.
        h.insert("trajectories".into(), format!("[{}]", self.lines.join(",")));
        if !self.multi_modal_offsets.is_empty() {
            h.insert(
                "multi_modal_offsets".into(),
                serde_json::to_string(&self.multi_modal_offsets)?,
            );
        }
        Ok(h)
    }

    /// `batches` as one: tensors padded as AReaL's `concat_padded_tensors` pads (within
    /// `max_tensor_bytes`), rows, lines and group sizes concatenated in order, multi-modal
    /// offsets continued across batches, the first batch's number and provenance. No batch:
    /// an empty one with `provenance`.
    pub fn join(
        mut batches: Vec<Batch>,
        provenance: BTreeMap<String, String>,
        max_tensor_bytes: usize,
    ) -> anyhow::Result<Batch> {
        match batches.len() {
            0 => Ok(Batch {
                provenance,
                ..Batch::default()
            }),
            1 => Ok(batches.remove(0)),
            _ => {
                let dicts: Vec<Vec<(String, &HostTensor)>> = batches
                    .iter()
                    .map(|b| b.tensors.iter().map(|(k, t)| (k.clone(), t)).collect())
                    .collect();
                let tensors = rollbox_tensor::concat_padded_within(&dicts, 0.0, max_tensor_bytes)?;
                let mut joined = Batch {
                    tensors,
                    provenance: batches[0].provenance.clone(),
                    number: batches[0].number,
                    ..Batch::default()
                };
                for b in batches {
                    for (key, offsets) in b.multi_modal_offsets {
                        let list = joined
                            .multi_modal_offsets
                            .entry(key)
                            .or_insert_with(|| vec![0]);
                        let base = *list.last().unwrap_or(&0);
                        list.extend(offsets.iter().skip(1).map(|o| base + o));
                    }
                    joined.rows.extend(b.rows);
                    joined.lines.extend(b.lines);
                    joined.group_sizes.extend(b.group_sizes);
                }
                Ok(joined)
            }
        }
    }
}

/// Blocking work that makes a prepared batch durable. The controller runs it on tokio's
/// blocking pool, one at a time and in the order the batches were prepared.
pub type WriteJob = Box<dyn FnOnce() -> anyhow::Result<()> + Send>;

/// A destination for a run's batches and bookkeeping.
pub trait BatchSink: Send {
    /// Rows an earlier run finished (written or dropped); this run skips them.
    fn done_rows(&self) -> &RowSet;

    /// The number the next prepared batch gets.
    fn next_batch(&self) -> usize;

    /// Take the next batch. CPU work only. An error (the batch cannot be encoded, e.g. its
    /// header is over the safetensors cap) takes no number: the controller splits the batch or
    /// drops its groups. `Ok(Some(job))`: run `job`, then call [`BatchSink::committed`].
    fn prepare(&mut self, batch: Batch) -> anyhow::Result<Option<WriteJob>>;

    /// The oldest prepared batch's write finished.
    fn committed(&mut self);

    /// The host memory its episodes reserved, once the batch is committed: a sink that keeps
    /// batches in memory ([`MemorySink`]) holds it for as long as it keeps the batch (the
    /// batch is a padded copy of their tensors, about as large); others give it back.
    fn keep_memory(&mut self, memory: Vec<Arc<Reservation>>) {
        drop(memory);
    }

    /// A row whose group was dropped, and the first error behind it when there was one (an
    /// episode's failure, such as a row without a prompt; why its batch could not be written).
    fn record_dropped(
        &mut self,
        row: usize,
        reason: DropReason,
        error: Option<&str>,
    ) -> anyhow::Result<()>;

    /// The run's stats so far (about once a second) and at the end (`last`).
    fn checkpoint(&mut self, stats: &Stats, last: bool) -> anyhow::Result<()>;
}

/// A set of row numbers, 64 to a word: a million done rows take about 0.6 MiB (a
/// `BTreeSet<usize>` took ~30 MiB), and a stray huge number costs one word, not a bitmap up to
/// it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RowSet {
    words: BTreeMap<usize, u64>,
    len: usize,
}

impl RowSet {
    /// An empty set.
    pub fn new() -> Self {
        RowSet::default()
    }

    /// Whether `row` is in the set.
    pub fn contains(&self, row: usize) -> bool {
        self.words
            .get(&(row / 64))
            .is_some_and(|w| w & (1 << (row % 64)) != 0)
    }

    /// Add `row`; whether it was new.
    pub fn insert(&mut self, row: usize) -> bool {
        let w = self.words.entry(row / 64).or_insert(0);
        let bit = 1u64 << (row % 64);
        let new = *w & bit == 0;
        *w |= bit;
        self.len += usize::from(new);
        new
    }

    /// Rows in the set.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the set is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The rows, ascending.
    pub fn iter(&self) -> impl Iterator<Item = usize> + '_ {
        self.words.iter().flat_map(|(&k, &w)| {
            (0..64)
                .filter(move |b| w & (1u64 << b) != 0)
                .map(move |b| k * 64 + b)
        })
    }
}

impl Extend<usize> for RowSet {
    fn extend<I: IntoIterator<Item = usize>>(&mut self, rows: I) {
        for r in rows {
            self.insert(r);
        }
    }
}

impl FromIterator<usize> for RowSet {
    fn from_iter<I: IntoIterator<Item = usize>>(rows: I) -> Self {
        let mut s = RowSet::new();
        s.extend(rows);
        s
    }
}

/// A sink that keeps batches in memory, for answering a request without files.
#[derive(Debug, Default)]
pub struct MemorySink {
    done: RowSet,
    /// The batches, in order.
    pub batches: Vec<Batch>,
    /// The host memory the batches' episodes reserved, held while the batches are.
    pub memory: Vec<Arc<Reservation>>,
    /// Dropped rows and why.
    pub dropped: Vec<(usize, DropReason)>,
    /// The last stats checkpointed.
    pub stats: Option<Stats>,
}

impl MemorySink {
    /// An empty sink.
    pub fn new() -> Self {
        MemorySink::default()
    }

    /// The batches joined into one ([`Batch::join`]).
    pub fn join(
        self,
        provenance: BTreeMap<String, String>,
        max_tensor_bytes: usize,
    ) -> anyhow::Result<Batch> {
        Batch::join(self.batches, provenance, max_tensor_bytes)
    }

    /// The batches joined into one ([`Batch::join`]) with the host memory they hold: a join of
    /// several makes a copy, reserved from the host budget before it is made (while the parts
    /// are still held), and refused with [`OverBudget`] when it does not fit.
    pub fn into_batch(
        self,
        provenance: BTreeMap<String, String>,
        max_tensor_bytes: usize,
        host: &Arc<HostMemory>,
    ) -> anyhow::Result<(Batch, Vec<Arc<Reservation>>)> {
        let copy = if self.batches.len() > 1 {
            let bytes: usize = self
                .batches
                .iter()
                .flat_map(|b| b.tensors.iter().map(|(_, t)| t.size_in_bytes()))
                .sum();
            Some(
                host.try_reserve_bulk(bytes)
                    .ok_or_else(|| OverBudget(host.exhausted("joining the batches", bytes)))?,
            )
        } else {
            None
        };
        let batch = Batch::join(self.batches, provenance, max_tensor_bytes)?;
        // The parts are gone: their episodes' reservations now stand for the joined copy.
        drop(copy);
        Ok((batch, self.memory))
    }
}

/// The host memory budget cannot hold what was asked (its message names `max_host_memory`): a
/// refusal the caller may retry later, unlike a batch that cannot be encoded.
#[derive(Debug)]
pub struct OverBudget(pub String);

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for OverBudget {}

impl BatchSink for MemorySink {
    fn done_rows(&self) -> &RowSet {
        &self.done
    }

    fn next_batch(&self) -> usize {
        self.batches.len()
    }

    fn prepare(&mut self, mut batch: Batch) -> anyhow::Result<Option<WriteJob>> {
        batch.number = Some(self.batches.len());
        self.batches.push(batch);
        Ok(None)
    }

    fn committed(&mut self) {}

    fn keep_memory(&mut self, memory: Vec<Arc<Reservation>>) {
        self.memory.extend(memory);
    }

    fn record_dropped(
        &mut self,
        row: usize,
        reason: DropReason,
        _error: Option<&str>,
    ) -> anyhow::Result<()> {
        self.dropped.push((row, reason));
        Ok(())
    }

    fn checkpoint(&mut self, stats: &Stats, _last: bool) -> anyhow::Result<()> {
        self.stats = Some(stats.clone());
        Ok(())
    }
}

#[cfg(test)]
mod tests;
