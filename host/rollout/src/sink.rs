//! Where batches go: the [`BatchSink`] trait, with the disk sink ([`crate::OutputDir`]: atomic
//! files, resume, fsync) and the memory sink ([`MemorySink`]: `rollbox serve` answers from it,
//! with no file written).

use std::collections::BTreeMap;

use rollbox_tensor::HostTensor;

use crate::group::DropReason;
use crate::stats::Stats;

/// An assembled batch on its way to a sink: AReaL's padded tensor dict, the header metadata
/// (provenance, `group_sizes`), the dataset rows it holds and one `trajectories.jsonl` line per
/// trajectory (serialised JSON objects).
#[derive(Debug, Clone)]
pub struct Batch {
    /// The padded tensors.
    pub tensors: Vec<(String, HostTensor)>,
    /// Header metadata; the sink adds `batch`, `rows` and `trajectories`.
    pub metadata: BTreeMap<String, String>,
    /// Dataset rows, in batch order.
    pub rows: Vec<usize>,
    /// Trajectory lines, one per row of the tensors.
    pub lines: Vec<String>,
}

impl Batch {
    /// Add the keys every batch header holds: `batch` (its number), `rows` (a JSON list) and
    /// `trajectories` (the lines as one JSON list).
    pub fn stamp(&mut self, number: usize) -> serde_json::Result<()> {
        self.metadata.insert("batch".into(), number.to_string());
        self.metadata
            .insert("rows".into(), serde_json::to_string(&self.rows)?);
        // The lines are serialised JSON objects: the header holds them as one JSON list.
        self.metadata
            .insert("trajectories".into(), format!("[{}]", self.lines.join(",")));
        Ok(())
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

/// A request's batches joined into one: the tensor dict and the header metadata.
pub type Joined = (Vec<(String, HostTensor)>, BTreeMap<String, String>);

/// A sink that keeps batches in memory, for answering a request without files.
#[derive(Debug, Default)]
pub struct MemorySink {
    done: RowSet,
    /// The batches, in order.
    pub batches: Vec<Batch>,
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

    /// The batches joined into one: tensors padded as AReaL's `concat_padded_tensors` pads
    /// (within `max_tensor_bytes`), `rows`, `trajectories` and `group_sizes` concatenated in
    /// order, `multi_modal_offsets` continued across batches, the other metadata of the first
    /// batch. With no batch: no tensors and `metadata`
    /// with an empty `trajectories` list.
    pub fn join(
        mut self,
        mut metadata: BTreeMap<String, String>,
        max_tensor_bytes: usize,
    ) -> anyhow::Result<Joined> {
        match self.batches.len() {
            0 => {
                metadata.insert("trajectories".into(), "[]".into());
                Ok((Vec::new(), metadata))
            }
            1 => {
                let b = self.batches.remove(0);
                Ok((b.tensors, b.metadata))
            }
            _ => {
                let dicts: Vec<Vec<(String, &HostTensor)>> = self
                    .batches
                    .iter()
                    .map(|b| b.tensors.iter().map(|(k, t)| (k.clone(), t)).collect())
                    .collect();
                let tensors = rollbox_tensor::concat_padded_within(&dicts, 0.0, max_tensor_bytes)?;
                let mut meta = self.batches[0].metadata.clone();
                for key in ["rows", "trajectories", "group_sizes"] {
                    let mut all = Vec::new();
                    for b in &self.batches {
                        if let Some(text) = b.metadata.get(key) {
                            let list: Vec<&serde_json::value::RawValue> =
                                serde_json::from_str(text)?;
                            all.extend(list);
                        }
                    }
                    meta.insert(key.into(), serde_json::to_string(&all)?);
                }
                if let Some(offsets) = join_offsets(&self.batches)? {
                    meta.insert("multi_modal_offsets".into(), offsets);
                }
                Ok((tensors, meta))
            }
        }
    }
}

/// The batches' `multi_modal_offsets` as one list per key: each batch's offsets shifted by the
/// rows the batches before it hold.
fn join_offsets(batches: &[Batch]) -> anyhow::Result<Option<String>> {
    let mut joined: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for b in batches {
        let Some(text) = b.metadata.get("multi_modal_offsets") else {
            continue;
        };
        let part: BTreeMap<String, Vec<u64>> = serde_json::from_str(text)?;
        for (key, offsets) in part {
            let list = joined.entry(key).or_insert_with(|| vec![0]);
            let base = *list.last().unwrap_or(&0);
            list.extend(offsets.iter().skip(1).map(|o| base + o));
        }
    }
    Ok(if joined.is_empty() {
        None
    } else {
        Some(serde_json::to_string(&joined)?)
    })
}

impl BatchSink for MemorySink {
    fn done_rows(&self) -> &RowSet {
        &self.done
    }

    fn next_batch(&self) -> usize {
        self.batches.len()
    }

    fn prepare(&mut self, mut batch: Batch) -> anyhow::Result<Option<WriteJob>> {
        batch.stamp(self.batches.len())?;
        self.batches.push(batch);
        Ok(None)
    }

    fn committed(&mut self) {}

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
mod tests {
    use super::*;
    use rollbox_tensor::TensorData;

    fn batch(row: usize, ids: Vec<i32>, len: usize) -> Batch {
        let n = ids.len() / len;
        Batch {
            tensors: vec![(
                "input_ids".into(),
                HostTensor::new(TensorData::I32(ids), vec![n, len]).expect("shape"),
            )],
            metadata: BTreeMap::from([
                ("group_sizes".to_string(), "[1]".to_string()),
                ("rollbox_version".to_string(), "test".to_string()),
            ]),
            rows: vec![row],
            lines: vec![format!("{{\"row\":{row}}}")],
        }
    }

    #[test]
    fn row_sets_hold_rows_in_words() {
        let mut s: RowSet = [3usize, 64, 65, 3, usize::MAX].into_iter().collect();
        assert_eq!(s.len(), 4);
        assert!(s.contains(3) && s.contains(64) && s.contains(usize::MAX));
        assert!(!s.contains(4) && !s.contains(63) && !s.contains(128));
        assert!(!s.insert(65));
        assert!(s.insert(0));
        assert_eq!(s.iter().collect::<Vec<_>>(), [0, 3, 64, 65, usize::MAX]);
        assert!(!s.is_empty() && RowSet::new().is_empty());
    }

    /// Batches the controller split are joined back into one answer, padded as AReaL pads,
    /// with rows, trajectories and group sizes concatenated in order.
    #[test]
    fn split_batches_are_joined_into_one_answer() {
        let mut sink = MemorySink::new();
        for b in [batch(3, vec![1, 2, 3], 3), batch(5, vec![4, 5], 2)] {
            assert!(sink.prepare(b).expect("prepared").is_none());
        }
        let (tensors, meta) = sink.join(BTreeMap::new(), 1 << 20).expect("joined");
        assert_eq!(tensors[0].1.shape(), &[2, 3]);
        assert_eq!(
            tensors[0].1.data().expect("data"),
            TensorData::I32(vec![1, 2, 3, 4, 5, 0])
        );
        assert_eq!(meta["rows"], "[3,5]");
        assert_eq!(meta["trajectories"], r#"[{"row":3},{"row":5}]"#);
        assert_eq!(meta["group_sizes"], "[1,1]");
        assert_eq!(meta["rollbox_version"], "test");
        assert_eq!(meta["batch"], "0");
        let mut one = MemorySink::new();
        one.prepare(batch(7, vec![1], 1)).expect("prepared");
        let (t, meta) = one.join(BTreeMap::new(), 1 << 20).expect("one batch");
        assert_eq!(
            (t[0].1.shape(), meta["rows"].as_str()),
            (&[1, 1][..], "[7]")
        );
        let (t, meta) = MemorySink::new()
            .join(BTreeMap::from([("k".into(), "v".into())]), 1 << 20)
            .expect("no batch");
        assert!(t.is_empty());
        assert_eq!(meta["trajectories"], "[]");
    }

    /// Multi-modal offsets go on across the joined batches.
    #[test]
    fn multi_modal_offsets_continue_across_joined_batches() {
        let mut sink = MemorySink::new();
        for (row, offsets) in [
            (1, r#"{"m.x":[0,4,6],"m.g":[0,1,2]}"#),
            (2, r#"{"m.x":[0,3],"m.g":[0,2]}"#),
        ] {
            let mut b = batch(row, vec![1, 2], 2);
            b.metadata
                .insert("multi_modal_offsets".into(), offsets.into());
            sink.prepare(b).expect("prepared");
        }
        let (_, meta) = sink.join(BTreeMap::new(), 1 << 20).expect("joined");
        let got: serde_json::Value =
            serde_json::from_str(&meta["multi_modal_offsets"]).expect("JSON");
        assert_eq!(
            got,
            serde_json::json!({"m.x": [0, 4, 6, 9], "m.g": [0, 1, 2, 4]})
        );
    }
}
