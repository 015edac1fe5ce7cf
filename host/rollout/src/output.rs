//! The output directory: numbered safetensors batches, `trajectories.jsonl`, `stats.json`.
//!
//! A batch is committed when `batch-NNNNNN.safetensors` appears (written to a temporary file,
//! fsynced, renamed). Its header metadata lists the rows it holds (`rows`) and one JSON line
//! per trajectory (`trajectories`); rows whose groups were dropped are appended to
//! `dropped-rows.jsonl`. On start, [`OutputDir::open`] reads every committed batch's header and
//! `dropped-rows.jsonl`: those rows are done, temporary files of a killed run are removed, and
//! `trajectories.jsonl` is rebuilt from the headers, so a run killed at any moment loses no
//! committed batch and duplicates no row. [`OutputDir`] is the disk [`BatchSink`].

use std::collections::{BTreeMap, VecDeque};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::group::DropReason;
use crate::sink::{Batch, BatchSink, RowSet, WriteJob};
use crate::stats::Stats;

/// The output directory of a run.
#[derive(Debug)]
pub struct OutputDir {
    dir: PathBuf,
    /// Rows already written (or consumed and dropped) by committed batches.
    pub done_rows: RowSet,
    /// The number the next prepared batch gets.
    pub next_batch: usize,
    /// Trajectory lines already committed.
    pub committed_trajectories: usize,
    /// The number the next committed batch must have (batches commit in order).
    next_commit: usize,
    /// `dropped-rows.jsonl`, open for appending once a row was dropped.
    dropped: Option<std::fs::File>,
    /// Rows and trajectory counts of the batches prepared and not yet committed, oldest first.
    pending: VecDeque<(usize, Vec<usize>, usize)>,
}

fn batch_name(n: usize) -> String {
    format!("batch-{n:06}.safetensors")
}

fn json_list(
    meta: &BTreeMap<String, String>,
    key: &str,
    path: &Path,
) -> anyhow::Result<Vec<serde_json::Value>> {
    match meta.get(key) {
        None => Ok(Vec::new()),
        Some(s) => match serde_json::from_str::<serde_json::Value>(s)? {
            serde_json::Value::Array(v) => Ok(v),
            _ => anyhow::bail!("{}: metadata `{key}` is not a JSON list", path.display()),
        },
    }
}

/// One committed batch on resume: its rows into `done`, its trajectory lines, exactly as
/// written (raw JSON text: parsing and printing them again could change a float's last digit,
/// and a resume must not change the file), to `w`. Returns how many lines.
fn committed_batch(path: &Path, done: &mut RowSet, w: &mut dyn Write) -> anyhow::Result<usize> {
    let meta = rollbox_tensor::read_safetensors_metadata(path).map_err(|e| {
        anyhow::anyhow!(
            "reading {}: {e}; delete it to re-run its rows",
            path.display()
        )
    })?;
    for v in json_list(&meta, "rows", path)? {
        if let Some(r) = v.as_u64() {
            done.insert(r as usize);
        }
    }
    let mut n = 0;
    if let Some(text) = meta.get("trajectories") {
        let raw: Vec<&serde_json::value::RawValue> = serde_json::from_str(text).map_err(|e| {
            anyhow::anyhow!(
                "{}: metadata `trajectories` is not a JSON list ({e})",
                path.display()
            )
        })?;
        for t in raw {
            w.write_all(t.get().as_bytes())?;
            w.write_all(b"\n")?;
            n += 1;
        }
    }
    Ok(n)
}

impl OutputDir {
    /// Open (or create) `dir` and read what earlier runs committed there.
    pub fn open(dir: &Path) -> anyhow::Result<OutputDir> {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("creating the output directory {}: {e}", dir.display()))?;
        let mut batches = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            let entry = entry?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') && name.contains(".tmp-") {
                // A write a killed run did not finish.
                let _ = std::fs::remove_file(entry.path());
                continue;
            }
            if let Some(n) = name
                .strip_prefix("batch-")
                .and_then(|s| s.strip_suffix(".safetensors"))
                .and_then(|s| s.parse::<usize>().ok())
            {
                batches.push((n, entry.path()));
            }
        }
        batches.sort();
        let mut done_rows = RowSet::new();
        let mut committed_trajectories = 0;
        // `trajectories.jsonl` is rebuilt from the headers, a batch at a time straight to a
        // temporary file: a run of millions of trajectories is not held in memory.
        let jsonl = dir.join("trajectories.jsonl");
        let mut failed = None;
        rollbox_tensor::write_atomic_with(&jsonl, |w| {
            for (_, path) in &batches {
                match committed_batch(path, &mut done_rows, w) {
                    Ok(n) => committed_trajectories += n,
                    Err(e) => {
                        failed = Some(e);
                        return Err(std::io::Error::other("a committed batch cannot be read"));
                    }
                }
            }
            Ok(())
        })
        .map_err(|e| match failed.take() {
            Some(f) => f,
            None => anyhow::anyhow!("rebuilding {}: {e}", jsonl.display()),
        })?;
        // Dropped rows; a line cut short by a kill is ignored (that row runs again).
        if let Ok(f) = std::fs::File::open(dir.join("dropped-rows.jsonl")) {
            for line in std::io::BufRead::lines(std::io::BufReader::new(f)) {
                let Ok(line) = line else { break };
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(&line)
                    && let Some(r) = v["row"].as_u64()
                {
                    done_rows.insert(r as usize);
                }
            }
        }
        let out = OutputDir {
            dir: dir.to_path_buf(),
            done_rows,
            next_batch: batches.last().map_or(0, |(n, _)| n + 1),
            next_commit: batches.last().map_or(0, |(n, _)| n + 1),
            committed_trajectories,
            dropped: None,
            pending: VecDeque::new(),
        };
        Ok(out)
    }

    /// `DIR/trajectories.jsonl`.
    pub fn trajectories_path(&self) -> PathBuf {
        self.dir.join("trajectories.jsonl")
    }

    /// `DIR/stats.json`.
    pub fn stats_path(&self) -> PathBuf {
        self.dir.join("stats.json")
    }

    /// A row whose group was dropped: one line appended to `dropped-rows.jsonl`, not
    /// synced (a killed process loses no written line; [`OutputDir::sync_dropped`] makes them
    /// durable). A sync per line bounded a filter that drops most groups to the disk's sync
    /// rate; a line lost to a power cut only means its row runs again.
    fn append_dropped(
        &mut self,
        row: usize,
        reason: DropReason,
        error: Option<&str>,
    ) -> anyhow::Result<()> {
        let f = match &mut self.dropped {
            Some(f) => f,
            None => self.dropped.insert(
                std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(self.dir.join("dropped-rows.jsonl"))?,
            ),
        };
        let mut line = serde_json::json!({"row": row, "reason": reason.as_str()});
        if let Some(e) = error {
            // At most 1 KiB of it: the line stays a line whatever the guest said.
            let cut = (0..=e.len().min(1024))
                .rev()
                .find(|&i| e.is_char_boundary(i))
                .unwrap_or(0);
            line["error"] = e[..cut].into();
        }
        let line = line.to_string() + "\n";
        f.write_all(line.as_bytes())?;
        self.done_rows.insert(row);
        Ok(())
    }

    /// Sync `dropped-rows.jsonl` to disk (with the interim stats, about once a second, and at
    /// the end of a run).
    fn sync_dropped(&self) -> anyhow::Result<()> {
        if let Some(f) = &self.dropped {
            f.sync_data()?;
        }
        Ok(())
    }

    /// Write `stats.json` atomically.
    pub fn write_stats(&self, stats: &serde_json::Value) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(stats)?;
        rollbox_tensor::write_atomic(&self.stats_path(), text.as_bytes())?;
        Ok(())
    }
}

impl BatchSink for OutputDir {
    fn done_rows(&self) -> &RowSet {
        &self.done_rows
    }

    fn next_batch(&self) -> usize {
        self.next_batch
    }

    /// Serialise the batch (safetensors bytes and its `trajectories.jsonl` lines); the job
    /// writes the safetensors file atomically (temp + fsync + rename), then appends the lines
    /// to `trajectories.jsonl` and syncs it.
    fn prepare(&mut self, mut batch: Batch) -> anyhow::Result<Option<WriteJob>> {
        let n = self.next_batch;
        batch.number = Some(n);
        let safetensors = rollbox_tensor::to_safetensors_bytes(&batch.tensors, &batch.header()?)?;
        // Numbered only once it can be written: a batch refused here is split or dropped by
        // the controller and leaves no gap.
        self.next_batch += 1;
        let mut lines = String::with_capacity(batch.lines.iter().map(|t| t.len() + 1).sum());
        for t in &batch.lines {
            lines.push_str(t);
            lines.push('\n');
        }
        self.pending.push_back((n, batch.rows, batch.lines.len()));
        let path = self.dir.join(batch_name(n));
        let jsonl = self.trajectories_path();
        Ok(Some(Box::new(move || {
            rollbox_tensor::write_atomic(&path, &safetensors)
                .map_err(|e| anyhow::anyhow!("writing {}: {e}", path.display()))?;
            let mut f = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&jsonl)?;
            f.write_all(lines.as_bytes())?;
            f.sync_data()?;
            tracing::info!("wrote {}", path.display());
            Ok(())
        })))
    }

    fn committed(&mut self) {
        let Some((n, rows, trajectories)) = self.pending.pop_front() else {
            debug_assert!(false, "a commit without a prepared batch");
            return;
        };
        debug_assert_eq!(n, self.next_commit, "batches commit in order");
        self.next_commit += 1;
        self.done_rows.extend(rows);
        self.committed_trajectories += trajectories;
    }

    fn record_dropped(
        &mut self,
        row: usize,
        reason: DropReason,
        error: Option<&str>,
    ) -> anyhow::Result<()> {
        self.append_dropped(row, reason, error)
    }

    fn checkpoint(&mut self, stats: &Stats, _last: bool) -> anyhow::Result<()> {
        self.write_stats(&serde_json::to_value(stats)?)?;
        self.sync_dropped()
    }
}
