//! `rollbox-bench datasets`: rows/s reading a 1,000,000-row GSM8K-like dataset as JSONL and as
//! a JSON array through `Dataset` (every row parsed within its budget, the array streamed),
//! next to baselines in the same run, interleaved: for the array, the reader before issue 32
//! (read whole, split with `RawValue`, each element parsed into an unbounded `Value`); for
//! JSONL, std's `BufRead::lines` with the unbounded parse (the JSONL line reader itself did
//! not change, so the row parse alone is also timed against the old parse on lines in memory).

use std::io::{BufRead as _, Write as _};
use std::path::Path;
use std::time::Instant;

use rollbox_rollout::dataset::{Dataset, OnBadRow};
use rollbox_runtime::JsonText;

use crate::common::current_rss_mib;

/// Write the datasets: `rows` rows of a GSM8K-like question and answer.
fn write(dir: &Path, rows: usize) -> anyhow::Result<()> {
    let mut jsonl = std::io::BufWriter::new(std::fs::File::create(dir.join("d.jsonl"))?);
    let mut array = std::io::BufWriter::new(std::fs::File::create(dir.join("d.json"))?);
    array.write_all(b"[")?;
    for i in 0..rows {
        let row = serde_json::json!({
            "question": format!("Natalia sold clips to {i} of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?"),
            "answer": format!("Natalia sold {i}/2 = {} clips in May.\n#### {}", i / 2, i + i / 2),
        })
        .to_string();
        writeln!(jsonl, "{row}")?;
        array.write_all(row.as_bytes())?;
        array.write_all(if i + 1 < rows { b",\n" } else { b"]\n" })?;
    }
    jsonl.flush()?;
    array.flush()?;
    Ok(())
}

/// The reader now: rows read through `Dataset`, with the most RSS seen.
fn now(path: &Path) -> anyhow::Result<(usize, f64)> {
    let mut d = Dataset::open(path, OnBadRow::Skip)?;
    let (mut rows, mut rss) = (0usize, 0f64);
    while let Some(e) = d.next_entry()? {
        e.map_err(|b| anyhow::anyhow!("bad row {}: {}", b.line, b.error))?;
        rows += 1;
        if rows.is_multiple_of(100_000) {
            rss = rss.max(current_rss_mib());
        }
    }
    Ok((rows, rss))
}

/// The baselines: JSONL through std's `lines()` parsed into an unbounded `Value`; a JSON array
/// as the reader before issue 32 had it: read whole and split with `RawValue` first.
fn before(path: &Path, array: bool) -> anyhow::Result<(usize, f64)> {
    let to_row = |text: &str| -> anyhow::Result<JsonText> {
        let v: serde_json::Value = serde_json::from_str(text)?;
        anyhow::ensure!(v.is_object(), "not an object");
        Ok(JsonText::from(&v))
    };
    if array {
        let bytes = std::fs::read(path)?;
        let items: Vec<&serde_json::value::RawValue> = serde_json::from_slice(&bytes)?;
        let rows: Vec<JsonText> = items
            .iter()
            .map(|i| to_row(i.get()))
            .collect::<Result<_, _>>()?;
        return Ok((rows.len(), current_rss_mib()));
    }
    let mut rows = 0usize;
    let mut rss = 0f64;
    for line in std::io::BufReader::with_capacity(1 << 16, std::fs::File::open(path)?).lines() {
        let line = line?;
        if line.trim().is_empty() {
            continue;
        }
        std::hint::black_box(to_row(&line)?);
        rows += 1;
        if rows.is_multiple_of(100_000) {
            rss = rss.max(current_rss_mib());
        }
    }
    Ok((rows, rss))
}

/// Run `rounds` interleaved rounds and print rows/s and RSS per reader and format.
pub fn run(rows: usize, rounds: usize) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    write(dir.path(), rows)?;
    let base = current_rss_mib();
    println!(
        "{rows} rows; JSONL {} MB, JSON array {} MB; RSS before reading {base:.0} MiB",
        std::fs::metadata(dir.path().join("d.jsonl"))?.len() / 1_000_000,
        std::fs::metadata(dir.path().join("d.json"))?.len() / 1_000_000
    );
    for (format, file, array) in [("JSONL", "d.jsonl", false), ("JSON array", "d.json", true)] {
        let path = dir.path().join(file);
        let (mut t_now, mut t_before) = (Vec::new(), Vec::new());
        let (mut rss_now, mut rss_before) = (0f64, 0f64);
        for round in 0..rounds {
            let start = Instant::now();
            let (n, rss) = now(&path)?;
            t_now.push(start.elapsed().as_secs_f64());
            anyhow::ensure!(n == rows, "{n} rows");
            // The first round only: later ones follow the old reader, whose freed memory the
            // allocator keeps.
            if round == 0 {
                rss_now = rss;
            }
            let start = Instant::now();
            let (n, rss) = before(&path, array)?;
            t_before.push(start.elapsed().as_secs_f64());
            anyhow::ensure!(n == rows, "{n} rows");
            rss_before = rss_before.max(rss);
        }
        let median = |t: &mut Vec<f64>| {
            t.sort_by(f64::total_cmp);
            t[t.len() / 2]
        };
        let (a, b) = (median(&mut t_now), median(&mut t_before));
        println!(
            "{format:<10}  Dataset: {:>9.0} rows/s, RSS while reading {rss_now:.0} MiB   baseline: {:>9.0} rows/s, RSS {rss_before:.0} MiB   (median of {rounds}; Dataset/baseline {:.2})",
            rows as f64 / a,
            rows as f64 / b,
            b / a
        );
    }
    // The row parse alone, on lines already in memory: `parse_row` against the unbounded
    // `Value` parse.
    let lines: Vec<String> =
        std::io::BufReader::new(std::fs::File::open(dir.path().join("d.jsonl"))?)
            .lines()
            .collect::<Result<_, _>>()?;
    let (mut t_now, mut t_before) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let start = Instant::now();
        for l in &lines {
            std::hint::black_box(
                rollbox_rollout::dataset::parse_row(l).map_err(anyhow::Error::msg)?,
            );
        }
        t_now.push(start.elapsed().as_secs_f64());
        let start = Instant::now();
        for l in &lines {
            let v: serde_json::Value = serde_json::from_str(l)?;
            std::hint::black_box(JsonText::from(&v));
        }
        t_before.push(start.elapsed().as_secs_f64());
    }
    t_now.sort_by(f64::total_cmp);
    t_before.sort_by(f64::total_cmp);
    let (a, b) = (t_now[rounds / 2], t_before[rounds / 2]);
    println!(
        "row parse alone: parse_row {:.0} rows/s, unbounded Value {:.0} rows/s (now/before {:.2})",
        rows as f64 / a,
        rows as f64 / b,
        b / a
    );
    Ok(())
}
