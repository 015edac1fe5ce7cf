//! Fuzzes the dataset readers (JSONL, JSON array, Parquet) with hostile files (issue 32).
//!
//! The seed corpus (`tests/fixtures/fuzz/datasets/`, written by `scripts/fixtures/dataset_corpus.py`)
//! holds valid files of each format and the attacks that used to end or swell the process: a
//! Parquet schema nested 10,000 deep, a footer claiming 2 billion children, gzip and LZ4-frame
//! pages that inflate to 256 MiB behind a 1 KB declared size, a snappy page declaring 2 GB, JSON
//! nested 100,000 deep, a row of 200,000 values, 150,000 tiny array elements. Each must read as
//! rows, bad rows or an error naming the file, never a panic, abort or hang; the seeds' outcomes
//! are checked one by one. Then a JSON array of `ROLLBOX_BIG_ARRAY` (default 2 million) empty
//! objects is streamed. Then mutated seeds (bytes flipped, inserted, cut, spliced; Parquet
//! footers mutated more often) run for `ROLLBOX_FUZZ_SECS` (default 8, 30 in CI: `ROLLBOX_LONG_TESTS=1`;
//! `ROLLBOX_FUZZ_SEED` repeats a run). Every input runs under a watchdog (an input still being read after
//! [`HANG`] fails the run), and the process's peak resident memory must stay under
//! [`PEAK_LIMIT`] through the seeds (below what any bomb inflates to) and under
//! [`FUZZ_PEAK_LIMIT`] (what the page caps allow) through the mutations. The input being read is always in
//! `target/fuzz-crashes/in-flight-dataset`, for a crash that kills the process.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rollbox_rollout::dataset::{Dataset, OnBadRow};

/// Longest one input may take to read.
const HANG: Duration = Duration::from_secs(30);
/// Peak resident memory of this test process over the seeds and the large array; the bombs
/// inflate to 256 MiB each.
const PEAK_LIMIT: u64 = 200 << 20;
/// Peak resident memory once mutated files run: a valid page may be 64 MiB inflated, and the
/// `parquet` crate can hold a dictionary page, a data page and its buffers at once.
const FUZZ_PEAK_LIMIT: u64 = 768 << 20;
/// Entries read from one input at most (a mutated file may hold many small rows).
const MAX_ENTRIES: usize = 1 << 20;
const SPECIAL_BYTES: [u8; 12] = [
    0, 1, 0x0f, 0x15, 0x19, 0x7f, 0x80, 0xf0, 0xff, b'[', b'{', b'"',
];

/// How reading one input ended.
#[derive(Debug, Default, Clone, PartialEq)]
struct Outcome {
    rows: usize,
    bad: usize,
    /// The error that stopped reading, if any.
    error: Option<String>,
}

fn read_all(path: &Path) -> Outcome {
    let mut out = Outcome::default();
    let mut d = match Dataset::open(path, OnBadRow::Skip) {
        Ok(d) => d,
        Err(e) => {
            out.error = Some(format!("{e:#}"));
            return out;
        }
    };
    while out.rows + out.bad < MAX_ENTRIES {
        match d.next_entry() {
            Ok(Some(Ok(_))) => out.rows += 1,
            Ok(Some(Err(_))) => out.bad += 1,
            Ok(None) => break,
            Err(e) => {
                out.error = Some(format!("{e:#}"));
                break;
            }
        }
    }
    out
}

fn corpus() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fuzz/datasets");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("reading tests/fixtures/fuzz/datasets")
        .map(|e| e.expect("entry").path())
        .collect();
    files.sort();
    files
        .into_iter()
        .map(|p| {
            let name = p.file_name().expect("name").to_string_lossy().into_owned();
            (name, std::fs::read(&p).expect("corpus file"))
        })
        .collect()
}

/// What each seed must give: rows, bad rows, and a piece of the stopping error.
fn expected(name: &str) -> Option<(usize, usize, Option<&'static str>)> {
    Some(match name {
        "valid.jsonl" | "valid_array.json" => (3, 0, None),
        "valid_snappy.parquet"
        | "valid_gzip.parquet"
        | "valid_zstd.parquet"
        | "valid_uncompressed.parquet" => (4, 0, None),
        "hand_valid_gzip.parquet" => (1, 0, None),
        "parquet_deep_schema.parquet" => (0, 0, Some("a schema of 10001 elements")),
        "parquet_2b_children.parquet" => (0, 0, Some("claims 2000000000 children")),
        "parquet_gzip_bomb.parquet" | "parquet_lz4_bomb.parquet" => {
            (0, 0, Some("inflates past its declared"))
        }
        "parquet_snappy_huge_declared.parquet" => (0, 0, Some("a page may be 0 to 64 MiB")),
        "parquet_footer_huge_len.parquet" => (0, 0, Some("footer claims")),
        "json_deep.jsonl" | "json_deep_object.jsonl" => (0, 1, None),
        "json_array_many_small.json" => (150_000, 0, None),
        "json_array_deep_element.json" => (2, 1, None),
        "jsonl_many_values_row.jsonl" => (1, 0, None),
        _ => return None,
    })
}

/// Runs `read_all` on inputs under a watchdog that fails the run when one hangs.
struct Reader {
    file: PathBuf,
    started: Arc<AtomicU64>,
    epoch: Instant,
}

impl Reader {
    fn new() -> Reader {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/fuzz-crashes");
        std::fs::create_dir_all(&dir).expect("crash folder");
        let started = Arc::new(AtomicU64::new(0));
        let epoch = Instant::now();
        let watched = started.clone();
        std::thread::spawn(move || {
            loop {
                std::thread::sleep(Duration::from_secs(1));
                let s = watched.load(Ordering::Relaxed);
                let now = epoch.elapsed().as_millis() as u64;
                if s != 0 && now.saturating_sub(s) > HANG.as_millis() as u64 {
                    eprintln!(
                        "an input was still being read after {HANG:?}: target/fuzz-crashes/in-flight-dataset"
                    );
                    std::process::abort();
                }
            }
        });
        Reader {
            file: dir.join("in-flight-dataset"),
            started,
            epoch,
        }
    }

    fn run(&self, bytes: &[u8]) -> Outcome {
        std::fs::write(&self.file, bytes).expect("in-flight file");
        self.started.store(
            self.epoch.elapsed().as_millis() as u64 + 1,
            Ordering::Relaxed,
        );
        let out = read_all(&self.file);
        self.started.store(0, Ordering::Relaxed);
        out
    }
}

fn mutate(rng: &mut StdRng, base: &[u8], corpus: &[(String, Vec<u8>)]) -> Vec<u8> {
    let mut v = base.to_vec();
    let is_parquet = v.starts_with(b"PAR1") && v.len() > 12;
    for _ in 0..rng.random_range(1..=4) {
        if v.is_empty() {
            v.push(b'[');
        }
        // Parquet: the footer is where the reader trusts the file most.
        let footer_from = if is_parquet && rng.random_bool(0.6) && v.len() > 12 {
            let n = v.len();
            let len = u32::from_le_bytes([v[n - 8], v[n - 7], v[n - 6], v[n - 5]]) as usize;
            n.saturating_sub(8 + len.min(n))
        } else {
            0
        };
        let at = rng.random_range(footer_from..v.len());
        match rng.random_range(0..6) {
            0 => v[at] ^= 1 << rng.random_range(0..8),
            1 => v[at] = SPECIAL_BYTES[rng.random_range(0..SPECIAL_BYTES.len())],
            2 => v.insert(at, SPECIAL_BYTES[rng.random_range(0..SPECIAL_BYTES.len())]),
            3 => {
                let end = (at + rng.random_range(1..64)).min(v.len());
                v.drain(at..end);
            }
            4 => {
                let end = (at + rng.random_range(1..256)).min(v.len());
                let copy = v[at..end].to_vec();
                let to = rng.random_range(0..=v.len());
                v.splice(to..to, copy);
            }
            _ => {
                let other = &corpus[rng.random_range(0..corpus.len())].1;
                if !other.is_empty() {
                    let from = rng.random_range(0..other.len());
                    let end = (from + rng.random_range(1..512)).min(other.len());
                    v.splice(at..at, other[from..end].iter().copied());
                }
            }
        }
    }
    v
}

#[test]
fn dataset_readers_survive_hostile_files() {
    let reader = Reader::new();
    let corpus = corpus();
    assert!(corpus.len() >= 20, "the seed corpus is missing");
    for (name, bytes) in &corpus {
        let start = Instant::now();
        let got = reader.run(bytes);
        eprintln!(
            "{name}: {} rows, {} bad, {:?} in {:.0} ms",
            got.rows,
            got.bad,
            got.error,
            start.elapsed().as_secs_f64() * 1e3
        );
        if let Some((rows, bad, error)) = expected(name) {
            assert_eq!((got.rows, got.bad), (rows, bad), "{name}: {got:?}");
            match (error, &got.error) {
                (None, None) => {}
                (Some(want), Some(e)) => assert!(e.contains(want), "{name}: {e}"),
                (want, e) => panic!("{name}: expected error {want:?}, got {e:?}"),
            }
        } else {
            // Truncated and unterminated files: whatever they read as, they are not all rows.
            assert!(got.error.is_some() || got.bad > 0, "{name}: {got:?}");
        }
    }
    let peak = rollbox_tests::peak_rss(std::process::id());
    eprintln!("seed corpus: peak RSS {} MiB", peak >> 20);
    assert!(peak < PEAK_LIMIT, "peak RSS {} MiB", peak >> 20);

    // A JSON array of many tiny objects, streamed (it used to be held whole, then parsed).
    let n: usize = std::env::var("ROLLBOX_BIG_ARRAY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(2_000_000);
    let tmp = tempfile::tempdir().expect("tmp");
    let big = tmp.path().join("big.json");
    {
        use std::io::Write as _;
        let mut w = std::io::BufWriter::new(std::fs::File::create(&big).expect("big"));
        w.write_all(b"[").expect("write");
        for i in 0..n {
            w.write_all(if i + 1 < n { b"{}," } else { b"{}]" })
                .expect("write");
        }
    }
    let start = Instant::now();
    let mut d = Dataset::open(&big, OnBadRow::Skip).expect("open");
    assert_eq!(d.rows_hint(), Some(n));
    let mut rows = 0usize;
    while let Some(e) = d.next_entry().expect("entry") {
        e.expect("a row");
        rows += 1;
    }
    let peak = rollbox_tests::peak_rss(std::process::id());
    eprintln!(
        "a JSON array of {n} objects ({} MB): {rows} rows in {:.1} s, peak RSS {} MiB",
        3 * n / 1_000_000,
        start.elapsed().as_secs_f64(),
        peak >> 20
    );
    assert_eq!(rows, n);
    assert!(peak < PEAK_LIMIT, "peak RSS {} MiB", peak >> 20);

    // Mutated seeds.
    let secs: f64 = rollbox_tests::soak_budget("ROLLBOX_FUZZ_SECS", 8.0, 30.0);
    let seed = rollbox_tests::fuzz_seed();
    eprintln!("fuzzing the dataset readers for {secs} s, ROLLBOX_FUZZ_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let (mut execs, mut errors, mut failed_reader) = (0u64, 0u64, 0u64);
    let start = Instant::now();
    while start.elapsed().as_secs_f64() < secs {
        let base = &corpus[rng.random_range(0..corpus.len())].1;
        let input = mutate(&mut rng, base, &corpus);
        let got = reader.run(&input);
        execs += 1;
        if let Some(e) = &got.error {
            errors += 1;
            if e.contains("the Parquet reader failed") {
                failed_reader += 1;
            }
        }
    }
    let peak = rollbox_tests::peak_rss(std::process::id());
    eprintln!(
        "{execs} inputs in {:.0} s ({:.0}/s): {errors} stopped with an error ({failed_reader} a caught Parquet reader panic); peak RSS {} MiB",
        start.elapsed().as_secs_f64(),
        execs as f64 / start.elapsed().as_secs_f64(),
        peak >> 20
    );
    assert!(peak < FUZZ_PEAK_LIMIT, "peak RSS {} MiB", peak >> 20);
}
