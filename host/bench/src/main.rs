//! `rollbox-bench`: programs that print figures (never timed assertions), one module per
//! benchmark, apart from the production binary.

mod alloc;
mod common;
mod concat;
mod datasets;
mod engine;
mod rewards;
mod rollout;
mod sandbox;
mod tokenizer;
mod tools;
mod vision;

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// Benchmarks of rollbox that print figures, with baselines measured in the same run.
#[derive(Parser)]
#[command(name = "rollbox-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    which: Bench,
}

/// Available benchmarks.
#[derive(Subcommand)]
enum Bench {
    /// Instantiate + call a trivial workflow (p50/p99), and host RSS per idle in-flight instance.
    Sandbox {
        /// Timed episodes.
        #[arg(long, default_value_t = 10_000)]
        iterations: usize,
        /// Episodes held in flight (blocked in generate) for the RSS figure.
        #[arg(long, default_value_t = 500)]
        idle: usize,
        /// The trivial workflow (returns nothing at once).
        #[arg(
            long,
            default_value = "target/wasm-guests/wasm32-wasip2/guest/trivial.wasm"
        )]
        trivial: PathBuf,
        /// A workflow that calls generate once (held in flight for the RSS figure).
        #[arg(
            long,
            default_value = "target/wasm-guests/wasm32-wasip2/guest/rollbox_workflow_echo.wasm"
        )]
        echo: PathBuf,
    },
    /// Qwen2-VL image preprocessing (PNG bytes to pixel_values): p50 per image and images/s
    /// for 1024x768 and 448x448, next to transformers' fast and slow processors in the same run.
    Vision {
        /// Interleaved rounds.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
        /// Images per size per round.
        #[arg(long, default_value_t = 20)]
        per_round: usize,
        /// Threads for rollbox's images/s and for torch in the baseline.
        #[arg(long, default_value_t = 2)]
        threads: usize,
        /// The Python with transformers, torch and torchvision (AReaL's venv).
        #[arg(long, default_value_t = default_torch_python())]
        python: String,
        /// The baseline script.
        #[arg(long, default_value = "scripts/baselines/vision_baseline.py")]
        baseline: PathBuf,
    },
    /// Tool-call latency: python-exec on a short snippet (fresh instance per call) next to the
    /// same snippet through subprocess.run in the same run, the calculator, and host RSS per
    /// python-exec call in flight.
    Tools {
        /// Interleaved rounds (each: a batch of python-exec calls, a batch of subprocesses).
        #[arg(long, default_value_t = 10)]
        rounds: usize,
        /// Calls per side per round.
        #[arg(long, default_value_t = 50)]
        per_round: usize,
        /// python-exec calls held in flight for the RSS figure.
        #[arg(long, default_value_t = 16)]
        in_flight: usize,
        /// The python-exec tool component (scripts/guests/build-python-exec.sh, or cargo test).
        #[arg(
            long,
            default_value = "target/wasm-guests/python/python_exec_tool.wasm"
        )]
        python_exec: PathBuf,
        /// The calculator tool component.
        #[arg(
            long,
            default_value = "target/wasm-guests/wasm32-wasip2/guest/rollbox_tool_calculator.wasm"
        )]
        calculator: PathBuf,
        /// The process-per-call baseline script.
        #[arg(long, default_value = "scripts/baselines/tool_baseline.py")]
        baseline: PathBuf,
        /// The Python the baseline runs (its `sys.executable` starts each call).
        #[arg(long, default_value = "python3")]
        python: String,
    },
    /// Reward-call latency (p50/p99) and throughput for the Rust and Python rewards, next to an
    /// AReaL-style process-pool call of the same Python scoring measured in the same run.
    Rewards {
        /// Sequential calls timed per reward.
        #[arg(long, default_value_t = 2000)]
        iterations: usize,
        /// Calls in flight for the throughput figure.
        #[arg(long, default_value_t = 64)]
        concurrency: usize,
        /// The Rust math reward component.
        #[arg(
            long,
            default_value = "target/wasm-guests/wasm32-wasip2/guest/rollbox_reward_math.wasm"
        )]
        math: PathBuf,
        /// The Python reward component.
        #[arg(long, default_value = "target/wasm-guests/python/python_reward.wasm")]
        python: PathBuf,
        /// The baseline script (skipped when python3 is missing).
        #[arg(long, default_value = "scripts/baselines/reward_baseline.py")]
        baseline: PathBuf,
        /// The parity corpus, for the Rust reward's figures on its mix of answer forms.
        #[arg(long, default_value = "tests/fixtures/rewards/math_corpus.jsonl")]
        corpus: PathBuf,
        /// The math-verify reward component (scripts/guests/build-math-verify-reward.sh).
        #[arg(
            long,
            default_value = "target/wasm-guests/python/math_verify_reward.wasm"
        )]
        math_verify: PathBuf,
        /// The JavaScript GSM8K reward (componentize-js; built by the tests).
        #[arg(long, default_value = "target/wasm-guests/js/gsm8k_reward_js.wasm")]
        js: PathBuf,
        /// The C GSM8K reward (zig; built by the tests).
        #[arg(long, default_value = "target/wasm-guests/c/gsm8k_reward_c.wasm")]
        c: PathBuf,
    },
    /// Reading a 1,000,000-row dataset as JSONL and as a JSON array: rows/s and RSS through
    /// `Dataset` (rows parsed within their budget, arrays streamed), next to the reader before
    /// issue 32 (unbounded parse, arrays read whole), interleaved.
    Datasets {
        /// Rows in the generated datasets.
        #[arg(long, default_value_t = 1_000_000)]
        rows: usize,
        /// Interleaved rounds.
        #[arg(long, default_value_t = 3)]
        rounds: usize,
    },
    /// concat-padded of 512 RLVR-shaped dicts (lengths 100..2000, 7 per-token keys), median of
    /// 20 runs, next to AReaL's `concat_padded_tensors` on the same shapes when torch is there.
    Concat {
        /// Timed runs.
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Python with torch for the baseline (see scripts/fixtures/record_concat_fixture.py for the
        /// venv); skipped when it is missing.
        #[arg(long, default_value_t = default_torch_python())]
        python: String,
        /// The baseline script.
        #[arg(long, default_value = "scripts/baselines/concat_baseline.py")]
        baseline: PathBuf,
    },
    /// Embedded engine: prefill and decode tokens/s at 1 and 2 threads, one sequence and 8
    /// concurrent sequences, next to llama.cpp on the same file when it is installed.
    Engine {
        /// The GGUF model.
        #[arg(long, default_value_t = default_model())]
        model: String,
        /// Weight formats to measure (q4_1-simd, q8_0, original).
        #[arg(long, value_delimiter = ',', default_value = "q4_1-simd,q8_0")]
        weights: Vec<String>,
        /// Thread counts to measure (each in its own process, CANDLE_NUM_THREADS).
        #[arg(long, value_delimiter = ',', default_value = "1,2")]
        threads: Vec<usize>,
        /// Python with llama-cpp-python for the baseline; skipped when missing.
        #[arg(long, default_value_t = default_llamacpp_python())]
        python: String,
        /// The baseline script.
        #[arg(long, default_value = "scripts/baselines/llamacpp_baseline.py")]
        baseline: PathBuf,
    },
    /// `rollbox rollout` throughput: RLVR episodes/s, CPU per episode, p50/p99 latency (an
    /// episode's start to end, and from its admission, which adds the wait for a worker) and
    /// peak RSS at several in-flight levels, with a zero-latency engine answering 64 tokens
    /// (the shape of the AReaL baseline: GSM8K-like rows, ~43 prompt tokens, math reward).
    Rollout {
        /// Rows per level.
        #[arg(long, default_value_t = 2000)]
        rows: usize,
        /// In-flight levels (--max-concurrent).
        #[arg(long, value_delimiter = ',', default_value = "1,64,512")]
        in_flight: Vec<usize>,
        #[command(flatten)]
        setup: RlvrArgs,
    },
    /// Soak (issue 15): many episodes in flight against a slow engine (1 s per answer by
    /// default): rows, trajectories and batches checked (no row lost or duplicated, no
    /// deadlock), peak RSS reported.
    Soak {
        /// Rows (one episode each).
        #[arg(long, default_value_t = 20_000)]
        rows: usize,
        /// Episodes in flight (--max-concurrent).
        #[arg(long, default_value_t = 10_000)]
        in_flight: usize,
        /// Engine latency per answer, milliseconds.
        #[arg(long, default_value_t = 1000)]
        latency_ms: u64,
        /// Instance pool slots (default: one per episode in flight, plus 256). Fewer than in
        /// flight: the episodes past the pool wait for a slot.
        #[arg(long)]
        max_instances: Option<u32>,
        #[command(flatten)]
        setup: RlvrArgs,
    },
    /// One configuration of `bench engine` (run by it in a child process).
    #[command(hide = true)]
    EngineOne {
        #[arg(long)]
        model: String,
        #[arg(long)]
        weights: String,
    },
    /// Encode throughput and chat-template + encode latency (p50), next to transformers.
    Tokenizer {
        /// The model file (GGUF) or tokenizer.json.
        #[arg(long, default_value_t = default_model())]
        model: String,
        /// Timed chat-template calls.
        #[arg(long, default_value_t = 5000)]
        iterations: usize,
        /// The transformers baseline script.
        #[arg(long, default_value = "scripts/baselines/tokenizer_baseline.py")]
        baseline: PathBuf,
    },
}

/// The default model path as a string, for clap defaults (`embedded::default_model_path`).
/// The tokenizer and components `bench rollout` and `bench soak` run.
#[derive(clap::Args, Debug)]
pub struct RlvrArgs {
    /// The tokenizer (GGUF or tokenizer.json); no model weights are loaded.
    #[arg(long, default_value_t = default_model())]
    model: String,
    /// The rlvr workflow component.
    #[arg(
        long,
        default_value = "target/wasm-guests/wasm32-wasip2/guest/rollbox_workflow_rlvr.wasm"
    )]
    workflow: PathBuf,
    /// The math reward component.
    #[arg(
        long,
        default_value = "target/wasm-guests/wasm32-wasip2/guest/rollbox_reward_math.wasm"
    )]
    math: PathBuf,
}

pub fn default_model() -> String {
    rollbox_engines::embedded::default_model_path()
        .display()
        .to_string()
}

/// `~/.cache/rollbox/areal-venv/bin/python`, the venv `scripts/fixtures/record_concat_fixture.py` uses.
pub fn default_torch_python() -> String {
    format!(
        "{}/.cache/rollbox/areal-venv/bin/python",
        std::env::var("HOME").unwrap_or_default()
    )
}

/// `~/.cache/rollbox/llamacpp-venv/bin/python` (see scripts/fixtures/record_embedded_fixture.py).
fn default_llamacpp_python() -> String {
    format!(
        "{}/.cache/rollbox/llamacpp-venv/bin/python",
        std::env::var("HOME").unwrap_or_default()
    )
}

async fn run(which: Bench) -> anyhow::Result<()> {
    match which {
        Bench::Engine {
            model,
            weights,
            threads,
            python,
            baseline,
        } => engine::run(&model, &weights, &threads, &python, &baseline),
        Bench::EngineOne { model, weights } => engine::one(&model, &weights).await,
        Bench::Rollout {
            rows,
            in_flight,
            setup,
        } => {
            let setup = rollout::RolloutSetup::new(&setup, Duration::ZERO, None)?;
            rollout::rollout(&setup, rows, &in_flight).await
        }
        Bench::Soak {
            rows,
            in_flight,
            latency_ms,
            max_instances,
            setup,
        } => {
            let latency = Duration::from_millis(latency_ms);
            // A pool slot per episode in flight (and the reward calls'), so all of them are
            // instantiated at once rather than queued for a slot.
            let slots =
                max_instances.unwrap_or_else(|| u32::try_from(in_flight + 256).unwrap_or(u32::MAX));
            let setup = rollout::RolloutSetup::new(&setup, latency, Some(slots))?;
            rollout::soak(&setup, rows, in_flight, latency).await
        }
        Bench::Datasets { rows, rounds } => datasets::run(rows, rounds),
        Bench::Concat {
            runs,
            python,
            baseline,
        } => concat::run(runs, &python, &baseline),
        Bench::Sandbox {
            iterations,
            idle,
            trivial,
            echo,
        } => sandbox::run(iterations, idle, &trivial, &echo).await,
        Bench::Tokenizer {
            model,
            iterations,
            baseline,
        } => tokenizer::run(Path::new(&model), iterations, &baseline),
        Bench::Vision {
            rounds,
            per_round,
            threads,
            python,
            baseline,
        } => vision::run(rounds, per_round, threads, &python, &baseline),
        Bench::Tools {
            rounds,
            per_round,
            in_flight,
            python_exec,
            calculator,
            baseline,
            python,
        } => {
            tools::run(
                rounds,
                per_round,
                in_flight,
                tools::Components {
                    python_exec: &python_exec,
                    calculator: &calculator,
                    baseline: &baseline,
                    python: &python,
                },
            )
            .await
        }
        Bench::Rewards {
            iterations,
            concurrency,
            math,
            python,
            baseline,
            corpus,
            math_verify,
            js,
            c,
        } => {
            rewards::run(
                iterations,
                concurrency,
                rewards::Components {
                    math: &math,
                    python: &python,
                    math_verify: &math_verify,
                    js: &js,
                    c: &c,
                },
                &baseline,
                &corpus,
            )
            .await
        }
    }
}

fn main() -> ExitCode {
    // SAFETY: first thing in `main`; no other thread exists yet.
    unsafe { rollbox_host::process::init() };
    let cli = Cli::parse();
    let outcome = rollbox_host::process::tokio_runtime().and_then(|rt| rt.block_on(run(cli.which)));
    outcome.map_or_else(
        |e| {
            eprintln!("Error: {e:?}");
            ExitCode::FAILURE
        },
        |()| ExitCode::SUCCESS,
    )
}
