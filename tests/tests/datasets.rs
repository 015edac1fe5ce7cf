//! Datasets as they ship: Parquet files written by pyarrow in verl's RL layout and as a
//! Hugging Face `datasets` export read back as pyarrow reads them; and a million rows (200,000
//! outside CI's soak budget, `ROLLBOX_LONG_TESTS=1`) streamed through the rollout controller in
//! bounded memory, killed with SIGKILL and resumed exactly.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollbox_rollout::dataset::{Dataset, OnBadRow, Row};
use rollbox_rollout::{OutputDir, Rollout, RolloutOptions};
use rollbox_runtime::WorkflowComponent;
use rollbox_tests::components as c;
use serde_json::Value;

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/datasets")
}

fn rows(path: &Path) -> Vec<Row> {
    let mut d = Dataset::open(path, OnBadRow::Fatal).expect("opens");
    let mut rows = Vec::new();
    while let Some(e) = d.next_entry().expect("reads") {
        rows.push(e.expect("a row"));
    }
    rows
}

/// Each file's rows are, value for value, what pyarrow reads from it
/// (`scripts/fixtures/make_dataset_fixtures.py` wrote both): nested lists and structs become JSON lists
/// and objects, with their field order.
#[test]
fn parquet_and_json_exports_read_as_pyarrow_reads_them() {
    for (file, expected) in [
        ("verl-gsm8k.parquet", "verl-gsm8k.expected.jsonl"),
        ("hf-gsm8k.parquet", "hf-gsm8k.expected.jsonl"),
        ("hf-gsm8k.json", "hf-gsm8k.expected.jsonl"),
    ] {
        let want: Vec<Value> = std::fs::read_to_string(fixtures().join(expected))
            .expect("expected rows")
            .lines()
            .map(|l| serde_json::from_str(l).expect("JSON"))
            .collect();
        let got = rows(&fixtures().join(file));
        assert_eq!(got.len(), want.len(), "{file}");
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g.index, i, "{file}");
            // Same text: the same keys in the same order, the same values.
            assert_eq!(g.data.as_str(), w.to_string(), "{file} row {i}");
        }
    }
    let d = Dataset::open(&fixtures().join("verl-gsm8k.parquet"), OnBadRow::Skip).expect("opens");
    assert_eq!(d.rows_hint(), Some(3));
    assert_eq!(
        d.place(3),
        format!(
            "{}: row 3 (row group 1)",
            fixtures().join("verl-gsm8k.parquet").display()
        )
    );

    // A truncated Parquet file is refused with the file named.
    let tmp = tempfile::tempdir().expect("tmp");
    let bytes = std::fs::read(fixtures().join("verl-gsm8k.parquet")).expect("read");
    let cut = tmp.path().join("cut.parquet");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).expect("write");
    let e = Dataset::open(&cut, OnBadRow::Skip)
        .err()
        .expect("refused")
        .to_string();
    assert!(e.contains("cut.parquet"), "{e}");
}

/// Rows of the stream: `ROLLBOX_STREAM_ROWS`, else a million in CI, else 200,000 (every
/// 100,000th line is not a row).
fn stream_rows() -> usize {
    rollbox_tests::soak_budget("ROLLBOX_STREAM_ROWS", 200_000, 1_000_000)
}

const CHILD: &str = "ROLLBOX_STREAM_CHILD";

/// The run itself, in a child process (`CHILD=DATASET,OUT`): the scripted workflow over the
/// dataset with an instant engine, batches of 1,000 rows; prints its peak RSS.
#[test]
fn streaming_child() {
    let Ok(arg) = std::env::var(CHILD) else {
        return;
    };
    let (dataset, out) = arg.split_once(',').expect("DATASET,OUT");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio");
    let stats = rt.block_on(async {
        let runtime = Arc::new(rollbox_tests::runtime());
        let workflow = Arc::new(
            runtime
                .load::<WorkflowComponent>(Path::new(c::SCRIPTED))
                .expect("loads"),
        );
        let rollout = Rollout {
            runtime,
            workflow,
            tokenizer: None,
            config: serde_json::json!({}),
            limits: Default::default(),
            options: RolloutOptions {
                n_samples: 1,
                max_concurrent: 64,
                batch_size: 1000,
                ..RolloutOptions::default()
            },
            provenance: BTreeMap::new(),
        };
        let dataset = Dataset::open(Path::new(dataset), OnBadRow::Skip).expect("dataset");
        let mut out = OutputDir::open(Path::new(out)).expect("out");
        tokio::spawn(async move { rollout.run(dataset, &mut out, &mut |_| {}).await })
            .await
            .expect("task")
            .expect("run")
    });
    let status = std::fs::read_to_string("/proc/self/status").expect("status");
    let hwm_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmHWM");
    println!(
        "STREAM {} {} {} {} {:.1}",
        stats.rows_already_done,
        stats.rows_run,
        stats.bad_rows_total,
        hwm_kib / 1024,
        stats.episodes_per_s
    );
}

fn child(dataset: &Path, out: &Path) -> std::process::Child {
    std::process::Command::new(std::env::current_exe().expect("test binary"))
        .args([
            "streaming_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD, format!("{},{}", dataset.display(), out.display()))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("child starts")
}

fn batches(out: &Path) -> usize {
    std::fs::read_dir(out)
        .map(|d| {
            d.filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().ends_with(".safetensors"))
            })
            .count()
        })
        .unwrap_or(0)
}

/// A million rows (200,000 outside CI) and bad lines among them run in bounded memory: the run is killed with
/// SIGKILL after some batches, resumed, and then every good row has exactly one trajectory,
/// with the reward its row asked for, and the resumed run's peak RSS stays under 150 MiB.
#[test]
fn a_million_rows_stream_in_bounded_memory_and_resume_exactly() {
    let n_rows = stream_rows();
    let tmp = tempfile::tempdir().expect("tmp");
    let dataset = tmp.path().join("rows.jsonl");
    {
        let mut f = std::io::BufWriter::new(std::fs::File::create(&dataset).expect("create"));
        for i in 0..n_rows {
            if i % 100_000 == 99_999 {
                writeln!(f, "not a row {i}").expect("write");
            } else {
                writeln!(f, "{{\"rewards\": [{}]}}", i % 7).expect("write");
            }
        }
    }
    let out = tmp.path().join("out");
    // The first run, killed once it has written some batches.
    let mut first = child(&dataset, &out);
    let start = Instant::now();
    while batches(&out) < 50 {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "no batches written"
        );
        if let Ok(Some(status)) = first.try_wait() {
            panic!("the run ended before it was killed: {status}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    first.kill().expect("SIGKILL");
    first.wait().expect("reaped");
    let done_at_kill = batches(&out);

    let resumed = child(&dataset, &out)
        .wait_with_output()
        .expect("resumed run");
    let text = String::from_utf8_lossy(&resumed.stdout);
    let line = text
        .lines()
        .find_map(|l| l.split_once("STREAM ").map(|(_, figures)| figures))
        .unwrap_or_else(|| panic!("no STREAM line: {text}"));
    let f: Vec<f64> = line
        .split_whitespace()
        .take(5)
        .map(|x| x.parse().expect("number"))
        .collect();
    let (already, run, bad, peak_mib) = (f[0] as usize, f[1] as usize, f[2] as usize, f[3]);
    eprintln!(
        "{n_rows} rows: {done_at_kill} batches before the kill, resumed with {already} rows done, {run} run at {:.0} episodes/s, peak RSS {peak_mib} MiB",
        f[4]
    );
    let good = n_rows - n_rows / 100_000;
    assert_eq!((already + run, bad), (good, n_rows / 100_000));
    assert!(already >= 50 * 1000, "{already}");
    assert!(peak_mib < 150.0, "peak RSS {peak_mib} MiB");

    // Every good row once in trajectories.jsonl, with its reward; in the batches too.
    let jsonl = std::io::BufReader::new(
        std::fs::File::open(out.join("trajectories.jsonl")).expect("trajectories.jsonl"),
    );
    let mut seen = vec![0u8; n_rows];
    for l in std::io::BufRead::lines(jsonl) {
        let v: Value = serde_json::from_str(&l.expect("line")).expect("JSON line");
        let row = v["row"].as_u64().expect("row") as usize;
        assert_eq!(v["reward"].as_f64(), Some((row % 7) as f64), "row {row}");
        seen[row] += 1;
    }
    let mut in_batches = vec![0u8; n_rows];
    for e in std::fs::read_dir(&out).expect("out") {
        let path = e.expect("entry").path();
        if path.extension().is_some_and(|x| x == "safetensors") {
            let meta = rollbox_tensor::read_safetensors_metadata(&path).expect("header");
            let rows: Vec<usize> = serde_json::from_str(&meta["rows"]).expect("rows");
            for r in rows {
                in_batches[r] += 1;
            }
        }
    }
    for (i, (&s, &b)) in seen.iter().zip(&in_batches).enumerate() {
        let want = u8::from(i % 100_000 != 99_999);
        assert_eq!((s, b), (want, want), "row {i}");
    }
}
