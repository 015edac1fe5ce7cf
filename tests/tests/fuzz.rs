//! Fuzzes the host-call boundary with the `fuzz_ops` guest, which runs a program of host calls
//! (every interface; handles valid, stale, dropped twice and forged; shapes and dtypes at the
//! edges; huge strings) given as hex in its row.
//!
//! The seed corpus (`tests/fixtures/fuzz/corpus/*.hex`, written by `scripts/fixtures/fuzz_corpus.py`)
//! runs first, then random and mutated programs from a seeded RNG for `ROLLBOX_FUZZ_SECS`
//! seconds (default 15, 60 in CI: `ROLLBOX_LONG_TESTS=1`; `scripts/stress/fuzz.sh HOURS` runs for
//! hours). `ROLLBOX_FUZZ_SEED` repeats a
//! run (default: from the clock, printed). Any episode outcome is fine; a host panic, or an
//! episode still running [`HANG_GRACE`] past its deadline, fails the run and leaves the
//! program in `target/fuzz-crashes/<seed>-<n>.hex` (copy it into the corpus to replay it).
//! The program in flight is always in `target/fuzz-crashes/in-flight-<test>.hex`, for a crash
//! that kills the process.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use rollbox_runtime::{
    CallPolicy, EpisodeOutcome, EpisodeRequest, Limits, RewardComponent, Runtime, RuntimeConfig,
    Scope, Services, ToolComponent, WorkflowComponent,
};
use rollbox_tensor::TensorData;
use rollbox_tests::components as c;
use rollbox_tests::test_cache_dir;
use rollbox_tokenizer::HostTokenizer;
use serde_json::json;

/// Wall-clock limit of one fuzz episode.
const EPISODE_TIMEOUT: Duration = Duration::from_secs(2);
/// How long past its deadline an episode may run before the host counts as hung: every host
/// call must end (or be interrupted) within this.
const HANG_GRACE: Duration = Duration::from_secs(5);
/// Seconds of random programs when `ROLLBOX_FUZZ_SECS` is unset (what CI runs).
/// A normal episode must still be accepted after every this many programs.
const ECHO_EVERY: u64 = 50;
/// How often a long run prints its progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(60);
/// Largest generated program, bytes.
const MAX_PROGRAM_BYTES: usize = 16 << 10;
/// Bytes the interpreter's readers treat specially (edges of its tables, the RETURN opcode).
const SPECIAL_BYTES: [u8; 10] = [0, 1, 2, 3, 0x1F, 0x7F, 0x80, 0xF7, 0xFE, 0xFF];

/// Limits of the fuzz episodes: tight, so limits are reached often.
fn fuzz_limits() -> Limits {
    Limits {
        timeout: EPISODE_TIMEOUT,
        max_memory: 64 << 20,
        max_boundary_bytes: 32 << 20,
        max_handles: 1000,
        max_tensor_bytes: 64 << 20,
        max_generate_calls: 256,
        max_episode_tokens: 4096,
        max_log_lines: 200,
        ..Limits::default()
    }
}

/// A corpus file: `#` comment lines, then the program as hex (whitespace ignored).
fn parse_program(text: &str) -> Result<Vec<u8>, String> {
    let digits: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(str::chars)
        .filter(|ch| !ch.is_whitespace())
        .collect();
    hex::decode(&digits).map_err(|e| format!("not a hex program: {e}"))
}

/// The seed corpus, sorted by file name.
fn load_corpus() -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/fuzz/corpus");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("reading tests/fixtures/fuzz/corpus")
        .map(|e| e.expect("corpus entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "hex"))
        .collect();
    files.sort();
    let mut corpus = Vec::with_capacity(files.len());
    for path in files {
        let text = std::fs::read_to_string(&path).expect("reading a corpus file");
        let program = match parse_program(&text) {
            Ok(p) => p,
            Err(e) => panic!("{}: {e}", path.display()),
        };
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("utf-8 corpus file name")
            .to_string();
        corpus.push((name, program));
    }
    corpus
}

/// A byte biased toward what the interpreter treats specially.
fn edge_byte(rng: &mut StdRng) -> u8 {
    match rng.random_range(0..10) {
        0..=3 => rng.random(),
        4 | 5 => rng.random_range(0..9),
        6 | 7 => 0xF0 | rng.random_range(0..16),
        _ => SPECIAL_BYTES[rng.random_range(0..SPECIAL_BYTES.len())],
    }
}

/// A fresh program: ops (RETURN mostly last) with a few biased argument bytes each.
fn fresh_program(rng: &mut StdRng) -> Vec<u8> {
    let ops = rng.random_range(1..=48);
    let mut p = Vec::new();
    for i in 0..ops {
        let last = i + 1 == ops;
        let op = if last && rng.random_bool(0.7) {
            31
        } else {
            rng.random_range(0..31)
        };
        p.push(op);
        for _ in 0..rng.random_range(0..=12) {
            p.push(edge_byte(rng));
        }
    }
    p
}

/// `base` with up to eight mutations: byte and bit changes, insertions, deletions, repeats of
/// a stretch, and splices with another corpus program.
fn mutate(rng: &mut StdRng, base: &[u8], corpus: &[Vec<u8>]) -> Vec<u8> {
    let mut p = base.to_vec();
    for _ in 0..rng.random_range(1..=8) {
        let len = p.len();
        match rng.random_range(0..6) {
            0 if len > 0 => {
                let i = rng.random_range(0..len);
                p[i] = edge_byte(rng);
            }
            1 if len > 0 => {
                let i = rng.random_range(0..len);
                p[i] ^= 1u8 << rng.random_range(0..8u32);
            }
            2 => {
                let at = rng.random_range(0..=len);
                let n = rng.random_range(1..=16);
                let tail = p.split_off(at);
                p.extend((0..n).map(|_| edge_byte(rng)));
                p.extend(tail);
            }
            3 if len > 0 => {
                let from = rng.random_range(0..len);
                let to = rng.random_range(from..=len.min(from + 64));
                let tail = p.split_off(to);
                p.truncate(from);
                p.extend(tail);
            }
            4 if len > 0 => {
                let from = rng.random_range(0..len);
                let to = rng.random_range(from..=len.min(from + 64));
                let stretch = p[from..to].to_vec();
                let at = rng.random_range(0..=len);
                let tail = p.split_off(at);
                p.extend(stretch);
                p.extend(tail);
            }
            _ if !corpus.is_empty() => {
                let other = &corpus[rng.random_range(0..corpus.len())];
                let cut = rng.random_range(0..=len);
                let from = rng.random_range(0..=other.len());
                p.truncate(cut);
                p.extend_from_slice(&other[from..]);
            }
            _ => {}
        }
    }
    p.truncate(MAX_PROGRAM_BYTES);
    p
}

/// How one program went, as far as the host is concerned.
enum Verdict {
    /// The episode ended (accepted, rejected or failed); its outcome kind.
    Ended(&'static str),
    /// The host panicked.
    Panicked(String),
    /// The episode was still running [`HANG_GRACE`] past its deadline.
    Hung,
}

fn panic_message(e: tokio::task::JoinError) -> String {
    match e.try_into_panic() {
        Ok(payload) => payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "a panic without a message".to_string()),
        Err(e) => format!("the episode task failed: {e}"),
    }
}

/// Counts for the summary.
struct Stats {
    start: Instant,
    programs: u64,
    outcomes: BTreeMap<&'static str, u64>,
}

impl Stats {
    fn new() -> Self {
        Stats {
            start: Instant::now(),
            programs: 0,
            outcomes: BTreeMap::new(),
        }
    }

    fn summary(&self, crashes: u32) -> String {
        let secs = self.start.elapsed().as_secs_f64();
        let kinds: Vec<String> = self
            .outcomes
            .iter()
            .map(|(kind, n)| format!("{kind} {n}"))
            .collect();
        format!(
            "fuzz: {} programs in {secs:.1} s ({:.1}/s); outcomes: {}; crashes: {crashes}",
            self.programs,
            self.programs as f64 / secs.max(1e-3),
            kinds.join(", ")
        )
    }
}

/// The runtime, the components and the limits every program runs with.
struct Harness {
    rt: Arc<Runtime>,
    fuzz: WorkflowComponent,
    echo: WorkflowComponent,
    limits: Arc<Limits>,
    crash_dir: PathBuf,
    in_flight: PathBuf,
}

impl Harness {
    /// A host with the fixed engine, the model's tokenizer when it is there, and reward
    /// (`faulty`, `const`, `spin`) and tool (`echo`) components registered with short limits.
    fn new(test: &str) -> Self {
        let mut services = Services::new();
        // The model is always there (scripts/test.sh fetches it): tokenizer calls are fuzzed
        // against the real tokenizer, never answered `unsupported` for want of one.
        let tokenizer =
            HostTokenizer::load(&rollbox_tests::model_path()).expect("the model's tokenizer loads");
        services = services.with_tokenizer(Arc::new(tokenizer));
        let services =
            services.with_backend(Arc::new(rollbox_tests::fixed_backend(Duration::ZERO)));
        let config = RuntimeConfig {
            cache_dir: Some(test_cache_dir()),
            max_instances: 64,
            ..RuntimeConfig::default()
        };
        let rt = Runtime::new(config, services).expect("runtime starts");
        let policy = CallPolicy {
            limits: Arc::new(Limits {
                timeout: Duration::from_millis(200),
                ..Limits::untrusted_call()
            }),
            retries: 1,
        };
        for (name, path) in [
            ("faulty", c::REWARD_FAULTY),
            ("const", c::REWARD_CONST),
            ("spin", c::REWARD_SPIN),
        ] {
            rt.register::<RewardComponent>(name, Path::new(path), policy.clone())
                .expect("reward registers");
        }
        rt.register::<ToolComponent>("echo", Path::new(c::TOOL_ECHO), policy)
            .expect("tool registers");
        let fuzz = rt
            .load::<WorkflowComponent>(Path::new(c::FUZZ_OPS))
            .expect("fuzz_ops loads");
        let echo = rt
            .load::<WorkflowComponent>(Path::new(c::WORKFLOW_ECHO))
            .expect("echo loads");
        let crash_dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("workspace root")
            .join("target/fuzz-crashes");
        std::fs::create_dir_all(&crash_dir).expect("creating target/fuzz-crashes");
        Harness {
            rt: Arc::new(rt),
            fuzz,
            echo,
            limits: Arc::new(fuzz_limits()),
            in_flight: crash_dir.join(format!("in-flight-{test}.hex")),
            crash_dir,
        }
    }

    /// Run one program in its own task, so a host panic is caught as the task's.
    async fn run(&self, id: &str, program: &[u8]) -> Verdict {
        let hex = hex::encode(program);
        std::fs::write(&self.in_flight, format!("# {id}\n{hex}\n"))
            .expect("writing the program in flight");
        let (rt, fuzz, limits) = (self.rt.clone(), self.fuzz.clone(), self.limits.clone());
        let request = EpisodeRequest::new(id, json!({"program": hex}));
        let mut task = tokio::spawn(async move {
            let report = rt
                .run_episode(&Scope::default(), &fuzz, request, limits)
                .await;
            report.outcome.kind()
        });
        match tokio::time::timeout(EPISODE_TIMEOUT + HANG_GRACE, &mut task).await {
            Ok(Ok(kind)) => Verdict::Ended(kind),
            Ok(Err(e)) => Verdict::Panicked(panic_message(e)),
            Err(_) => {
                task.abort();
                Verdict::Hung
            }
        }
    }

    /// Run one program; on a host panic or hang, write it to the crash directory and fail.
    async fn check(&self, id: &str, program: &[u8], stats: &mut Stats) -> &'static str {
        let (why, hung) = match self.run(id, program).await {
            Verdict::Ended(kind) => {
                stats.programs += 1;
                *stats.outcomes.entry(kind).or_default() += 1;
                return kind;
            }
            Verdict::Panicked(message) => (format!("the host panicked: {message}"), false),
            Verdict::Hung => {
                let why = format!(
                    "the episode was still running {} s past its {} s deadline",
                    HANG_GRACE.as_secs(),
                    EPISODE_TIMEOUT.as_secs()
                );
                (why, true)
            }
        };
        let path = self.crash_dir.join(format!("{id}.hex"));
        let mut text = String::new();
        for line in why.lines() {
            text.push_str("# ");
            text.push_str(line);
            text.push('\n');
        }
        text.push_str(&hex::encode(program));
        text.push('\n');
        std::fs::write(&path, text).expect("writing the crash file");
        println!("{}", stats.summary(1));
        let message = format!(
            "program {id} broke the host ({why}); written to {}",
            path.display()
        );
        if hung {
            // A host call blocking a worker thread would block the runtime's shutdown, and so
            // this test, for good: report and end the process.
            eprintln!("{message}");
            std::process::exit(1);
        }
        panic!("{message}");
    }

    /// The host still runs a normal episode to completion.
    async fn assert_serves_next(&self) {
        let r = self
            .rt
            .run_episode(
                &Scope::default(),
                &self.echo,
                EpisodeRequest::new("echo", json!({"input_ids": [1, 2, 3]})),
                Arc::new(Limits::default()),
            )
            .await;
        match &r.outcome {
            EpisodeOutcome::Accepted(t) => assert_eq!(
                t.get("input_ids")
                    .expect("input_ids")
                    .data()
                    .expect("tensor data"),
                TensorData::I32(vec![1, 2, 3, 7, 8, 2])
            ),
            other => panic!(
                "a normal episode after the fuzz programs should be accepted, got {} ({})",
                other.kind(),
                r.stderr
            ),
        }
    }
}

/// Seconds of random programs: `ROLLBOX_FUZZ_SECS`, else 60 under `ROLLBOX_LONG_TESTS=1`
/// (CI), else 15.
fn fuzz_secs() -> f64 {
    rollbox_tests::soak_budget("ROLLBOX_FUZZ_SECS", 15.0, 60.0)
}

/// `ROLLBOX_FUZZ_SEED`, or one from the clock.

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn corpus_replays_without_breaking_the_host() {
    let h = Harness::new("corpus");
    let corpus = load_corpus();
    assert!(
        corpus.len() >= 20,
        "the seed corpus is missing; write it with scripts/fixtures/fuzz_corpus.py"
    );
    let mut stats = Stats::new();
    let mut kinds = BTreeMap::new();
    for (name, program) in &corpus {
        let id = format!("corpus-{name}");
        let kind = h.check(&id, program, &mut stats).await;
        println!("{name}: {kind}");
        kinds.insert(name.as_str(), kind);
    }
    println!("{}", stats.summary(0));
    h.assert_serves_next().await;
    // The interpreter really runs the programs: seeds with a known ending end that way.
    for (name, expected) in [
        ("24-valid-accepted", "accepted"),
        ("32-huge-error", "guest_error"),
        ("30-invalid-metadata", "invalid_output"),
        ("31-metadata-nan", "invalid_output"),
        ("05-metadata-key-returned", "invalid_output"),
        ("07-stale-handle-use", "trap"),
        ("08-double-drop", "trap"),
    ] {
        assert_eq!(kinds.get(name).copied(), Some(expected), "seed {name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn random_programs_never_break_the_host() {
    let secs = fuzz_secs();
    let seed = rollbox_tests::fuzz_seed();
    println!("fuzz: seed {seed} (ROLLBOX_FUZZ_SEED={seed} repeats this run), {secs} s");
    let h = Harness::new("random");
    let mut stats = Stats::new();
    let mut corpus = Vec::new();
    for (name, program) in load_corpus() {
        let id = format!("corpus-{name}");
        h.check(&id, &program, &mut stats).await;
        corpus.push(program);
    }
    h.assert_serves_next().await;
    let mut rng = StdRng::seed_from_u64(seed);
    let random_start = Instant::now();
    let mut last_report = Instant::now();
    let mut n: u64 = 0;
    while random_start.elapsed().as_secs_f64() < secs {
        let program = if !corpus.is_empty() && rng.random_bool(0.4) {
            let base = &corpus[rng.random_range(0..corpus.len())];
            mutate(&mut rng, base, &corpus)
        } else {
            fresh_program(&mut rng)
        };
        n += 1;
        let id = format!("{seed}-{n}");
        h.check(&id, &program, &mut stats).await;
        if n.is_multiple_of(ECHO_EVERY) {
            h.assert_serves_next().await;
        }
        if last_report.elapsed() >= PROGRESS_EVERY {
            println!("{}", stats.summary(0));
            last_report = Instant::now();
        }
    }
    h.assert_serves_next().await;
    println!("{}", stats.summary(0));
}
