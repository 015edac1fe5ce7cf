//! The output directory: numbered safetensors batches, `trajectories.jsonl`, `stats.json`.
//!
//! A batch is committed when `batch-NNNNNN.safetensors` appears (written to a temporary file,
//! fsynced, renamed). Its header metadata lists the rows it holds (`rows`), the rows consumed
//! since the previous batch whose groups were dropped (`dropped_rows`), and one JSON line per
//! trajectory (`trajectories`). On start, [`OutputDir::open`] reads every committed batch's
//! header: those rows are done, temporary files of a killed run are removed, and
//! `trajectories.jsonl` is rebuilt from the headers, so a run killed at any moment loses no
//! committed batch and duplicates no row.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::{Path, PathBuf};

use rollbox_tensor::HostTensor;

/// The output directory of a run.
#[derive(Debug)]
pub struct OutputDir {
    dir: PathBuf,
    /// Rows already written (or consumed and dropped) by committed batches.
    pub done_rows: BTreeSet<usize>,
    /// The number the next prepared batch gets.
    pub next_batch: usize,
    /// Trajectory lines already committed.
    pub committed_trajectories: usize,
    /// The number the next committed batch must have (batches commit in order).
    next_commit: usize,
    /// `dropped-rows.jsonl`, open for appending once a row was dropped.
    dropped: Option<std::fs::File>,
}

fn batch_name(n: usize) -> String {
    format!("batch-{n:06}.safetensors")
}

/// The header metadata of a safetensors file, without reading its tensors.
pub fn read_header_metadata(path: &Path) -> anyhow::Result<BTreeMap<String, String>> {
    use std::io::Read;
    let mut f = std::fs::File::open(path)?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len)?;
    let n = u64::from_le_bytes(len);
    anyhow::ensure!(
        n < 100 << 20,
        "{}: header of {n} bytes is implausible",
        path.display()
    );
    let mut header = vec![0u8; 8 + n as usize];
    header[..8].copy_from_slice(&len);
    f.read_exact(&mut header[8..])?;
    let json: serde_json::Value = serde_json::from_slice(&header[8..])?;
    let meta = json
        .get("__metadata__")
        .and_then(|m| m.as_object())
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default();
    Ok(meta)
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

impl OutputDir {
    /// Open (or create) `dir` and read what earlier runs committed there.
    pub fn open(dir: &Path) -> anyhow::Result<OutputDir> {
        std::fs::create_dir_all(dir)
            .map_err(|e| anyhow::anyhow!("creating --out {}: {e}", dir.display()))?;
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
        let mut done_rows = BTreeSet::new();
        let mut lines = String::new();
        let mut committed_trajectories = 0;
        for (_, path) in &batches {
            let meta = read_header_metadata(path).map_err(|e| {
                anyhow::anyhow!(
                    "reading {}: {e}; delete it to re-run its rows",
                    path.display()
                )
            })?;
            for v in json_list(&meta, "rows", path)? {
                if let Some(r) = v.as_u64() {
                    done_rows.insert(r as usize);
                }
            }
            // The lines exactly as written (raw JSON text): parsing and printing them again
            // could change a float's last digit, and a resume must not change the file.
            if let Some(text) = meta.get("trajectories") {
                let raw: Vec<&serde_json::value::RawValue> =
                    serde_json::from_str(text).map_err(|e| {
                        anyhow::anyhow!(
                            "{}: metadata `trajectories` is not a JSON list ({e})",
                            path.display()
                        )
                    })?;
                for t in raw {
                    lines.push_str(t.get());
                    lines.push('\n');
                    committed_trajectories += 1;
                }
            }
        }
        // Dropped rows; a line cut short by a kill is ignored (that row runs again).
        if let Ok(text) = std::fs::read_to_string(dir.join("dropped-rows.jsonl")) {
            for line in text.lines() {
                if let Ok(v) = serde_json::from_str::<serde_json::Value>(line)
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
        };
        rollbox_tensor::write_atomic(&out.trajectories_path(), lines.as_bytes())?;
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

    /// The bytes of the next batch's files: the tensors, with `metadata` plus the row list and
    /// the trajectory lines (`trajectories`, serialized JSON objects) in the header, and the
    /// lines for `trajectories.jsonl`; the batch takes the next number. CPU work only: write
    /// them with [`BatchFiles::write`] (blocking file I/O, which an async caller runs off its
    /// workers), then record them with [`OutputDir::committed`]. Batches must be written and
    /// committed in the order they were prepared.
    pub fn prepare_batch(
        &mut self,
        tensors: &[(String, HostTensor)],
        mut metadata: BTreeMap<String, String>,
        rows: &[usize],
        trajectories: &[&str],
    ) -> anyhow::Result<BatchFiles> {
        let n = self.next_batch;
        metadata.insert("batch".into(), n.to_string());
        metadata.insert("rows".into(), serde_json::to_string(rows)?);
        // `trajectories` are serialized JSON objects: the header holds them as one JSON list.
        metadata.insert(
            "trajectories".into(),
            format!("[{}]", trajectories.join(",")),
        );
        let safetensors = rollbox_tensor::to_safetensors_bytes(tensors, &metadata)?;
        // Numbered only once it can be written: a batch refused here is split or dropped by
        // the controller and leaves no gap.
        self.next_batch += 1;
        let mut lines = String::with_capacity(trajectories.iter().map(|t| t.len() + 1).sum());
        for t in trajectories {
            lines.push_str(t);
            lines.push('\n');
        }
        Ok(BatchFiles {
            number: n,
            path: self.dir.join(batch_name(n)),
            safetensors,
            jsonl: self.trajectories_path(),
            lines,
            rows: rows.to_vec(),
            trajectories: trajectories.len(),
        })
    }

    /// Record a batch that [`BatchFiles::write`] wrote; returns its path.
    pub fn committed(&mut self, files: BatchFiles) -> PathBuf {
        debug_assert_eq!(files.number, self.next_commit, "batches commit in order");
        self.next_commit += 1;
        self.done_rows.extend(files.rows.iter().copied());
        self.committed_trajectories += files.trajectories;
        files.path
    }

    /// Record a row whose group was dropped: one line appended to `dropped-rows.jsonl`, not
    /// synced (a killed process loses no written line; [`OutputDir::sync_dropped`] makes them
    /// durable). A sync per line bounded a filter that drops most groups to the disk's sync
    /// rate; a line lost to a power cut only means its row runs again.
    pub fn record_dropped(&mut self, row: usize, reason: &str) -> anyhow::Result<()> {
        let f = match &mut self.dropped {
            Some(f) => f,
            None => self.dropped.insert(
                std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(self.dir.join("dropped-rows.jsonl"))?,
            ),
        };
        let line = serde_json::json!({"row": row, "reason": reason}).to_string() + "\n";
        f.write_all(line.as_bytes())?;
        self.done_rows.insert(row);
        Ok(())
    }

    /// Sync `dropped-rows.jsonl` to disk (the controller does so with its interim stats, about
    /// once a second, and at the end of a run).
    pub fn sync_dropped(&self) -> anyhow::Result<()> {
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

/// One batch's files, ready to write (see [`OutputDir::prepare_batch`]).
pub struct BatchFiles {
    number: usize,
    path: PathBuf,
    safetensors: Vec<u8>,
    jsonl: PathBuf,
    lines: String,
    rows: Vec<usize>,
    trajectories: usize,
}

impl BatchFiles {
    /// Write the safetensors file atomically (temp + fsync + rename), then append the lines
    /// to `trajectories.jsonl` and sync it. Blocking file I/O.
    pub fn write(&self) -> anyhow::Result<()> {
        rollbox_tensor::write_atomic(&self.path, &self.safetensors)
            .map_err(|e| anyhow::anyhow!("writing {}: {e}", self.path.display()))?;
        let mut f = std::fs::OpenOptions::new()
            .append(true)
            .create(true)
            .open(&self.jsonl)?;
        f.write_all(self.lines.as_bytes())?;
        f.sync_data()?;
        Ok(())
    }
}
