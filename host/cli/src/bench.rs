//! `rollbox bench`: programs that print figures (never timed assertions).

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Subcommand;
use rollbox_engines::{
    EngineError, GenerateRequest, GenerateResponse, InferenceBackend, StopReason,
};
use rollbox_runtime::{EpisodeOutcome, EpisodeRequest, Limits, Runtime, RuntimeConfig, Services};

/// Available benchmarks.
#[derive(Subcommand)]
pub enum Bench {
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
        #[arg(long, default_value = "scripts/reward_baseline.py")]
        baseline: PathBuf,
    },
    /// concat-padded of 512 RLVR-shaped dicts (lengths 100..2000, 7 per-token keys), median of
    /// 20 runs, next to AReaL's `concat_padded_tensors` on the same shapes when torch is there.
    Concat {
        /// Timed runs.
        #[arg(long, default_value_t = 20)]
        runs: usize,
        /// Python with torch for the baseline (see scripts/record_concat_fixture.py for the
        /// venv); skipped when it is missing.
        #[arg(long, default_value_t = default_torch_python())]
        python: String,
        /// The baseline script.
        #[arg(long, default_value = "scripts/concat_baseline.py")]
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
        #[arg(long, default_value = "scripts/llamacpp_baseline.py")]
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
        #[arg(long, default_value = "scripts/tokenizer_baseline.py")]
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

/// `~/.cache/rollbox/areal-venv/bin/python`, the venv `scripts/record_concat_fixture.py` uses.
fn default_torch_python() -> String {
    format!(
        "{}/.cache/rollbox/areal-venv/bin/python",
        std::env::var("HOME").unwrap_or_default()
    )
}

/// `~/.cache/rollbox/llamacpp-venv/bin/python` (see scripts/record_embedded_fixture.py).
fn default_llamacpp_python() -> String {
    format!(
        "{}/.cache/rollbox/llamacpp-venv/bin/python",
        std::env::var("HOME").unwrap_or_default()
    )
}

pub async fn run(which: Bench) -> anyhow::Result<()> {
    match which {
        Bench::Engine {
            model,
            weights,
            threads,
            python,
            baseline,
        } => engine(&model, &weights, &threads, &python, &baseline),
        Bench::EngineOne { model, weights } => engine_one(&model, &weights).await,
        Bench::Rollout {
            rows,
            in_flight,
            setup,
        } => {
            let setup = RolloutSetup::new(&setup, Duration::ZERO, RuntimeConfig::default())?;
            rollout(&setup, rows, &in_flight).await
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
            let config = RuntimeConfig {
                max_instances: max_instances
                    .unwrap_or_else(|| u32::try_from(in_flight + 256).unwrap_or(u32::MAX)),
                ..RuntimeConfig::default()
            };
            let setup = RolloutSetup::new(&setup, latency, config)?;
            soak(&setup, rows, in_flight, latency).await
        }
        Bench::Concat {
            runs,
            python,
            baseline,
        } => concat(runs, &python, &baseline),
        Bench::Sandbox {
            iterations,
            idle,
            trivial,
            echo,
        } => sandbox(iterations, idle, &trivial, &echo).await,
        Bench::Tokenizer {
            model,
            iterations,
            baseline,
        } => tokenizer(Path::new(&model), iterations, &baseline),
        Bench::Rewards {
            iterations,
            concurrency,
            math,
            python,
            baseline,
        } => {
            let runtime = Arc::new(Runtime::new(RuntimeConfig::default(), Services::new())?);
            println!(
                "reward bench: each call = fresh instance + score + teardown (on the reaper thread for instances past 4 MiB), 15 s / 256 MiB limits"
            );
            rewards(
                runtime.clone(),
                &math,
                "rust math reward",
                iterations,
                concurrency,
            )
            .await?;
            rewards(
                runtime,
                &python,
                "python reward (componentize-py)",
                iterations,
                concurrency,
            )
            .await?;
            match std::process::Command::new("python3")
                .arg(&baseline)
                .arg(iterations.to_string())
                .status()
            {
                Ok(s) if s.success() => {}
                Ok(s) => bail!("{} failed: {s}", baseline.display()),
                Err(e) => println!("baseline skipped: python3 not runnable ({e})"),
            }
            // AReaL's own path (its wrapper, its math-verify GSM8K reward), when its venv is set up.
            let areal = default_torch_python();
            let script = Path::new("scripts/areal_reward_baseline.py");
            if Path::new(&areal).exists() && script.is_file() {
                match std::process::Command::new(&areal)
                    .arg(script)
                    .arg(iterations.to_string())
                    .stderr(std::process::Stdio::null())
                    .status()
                {
                    Ok(s) if s.success() => {}
                    Ok(_) | Err(_) => println!(
                        "AReaL baseline skipped: {} {} failed (see the script for its setup)",
                        areal,
                        script.display()
                    ),
                }
            } else {
                println!(
                    "AReaL baseline skipped: {areal} not found (see scripts/areal_reward_baseline.py)"
                );
            }
            Ok(())
        }
    }
}

fn require(path: &Path) -> anyhow::Result<()> {
    if !path.is_file() {
        bail!(
            "{} not found; build the benchmark components first:\n  cargo build --target wasm32-wasip2 --profile guest --target-dir target/wasm-guests -p rollbox-test-programs -p rollbox-workflow-echo",
            path.display()
        );
    }
    Ok(())
}

fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

async fn sandbox(
    iterations: usize,
    idle: usize,
    trivial: &Path,
    echo: &Path,
) -> anyhow::Result<()> {
    require(trivial)?;
    require(echo)?;
    let gate = Arc::new(GateBackend {
        open: tokio::sync::Semaphore::new(0),
        waiting: AtomicUsize::new(0),
    });
    let runtime = Arc::new(Runtime::new(
        RuntimeConfig::default(),
        Services::new().with_backend(gate.clone()),
    )?);
    let limits = Arc::new(Limits::default());
    let trivial_c = runtime.load_workflow(trivial)?;
    let echo_c = runtime.load_workflow(echo)?;
    println!(
        "sandbox bench: wasmtime 48, pooling allocator {}, epoch tick {:?}",
        if runtime.is_pooled() {
            "on"
        } else {
            "off (fallback)"
        },
        rollbox_runtime::EPOCH_TICK
    );

    // Latency: new store + deny-all WASI + instantiate + run-episode + drop, one at a time.
    let data = serde_json::json!({});
    for _ in 0..200 {
        runtime
            .run_episode(
                &trivial_c,
                EpisodeRequest::new("warm", data.clone()),
                limits.clone(),
            )
            .await;
    }
    let mut times = Vec::with_capacity(iterations);
    let start = Instant::now();
    for i in 0..iterations {
        let t = Instant::now();
        let r = runtime
            .run_episode(
                &trivial_c,
                EpisodeRequest::new(format!("b{i}"), data.clone()),
                limits.clone(),
            )
            .await;
        times.push(t.elapsed());
        if !matches!(r.outcome, EpisodeOutcome::Rejected) {
            bail!(
                "the trivial workflow should reject; got {}",
                r.outcome.kind()
            );
        }
    }
    let total = start.elapsed();
    times.sort_unstable();
    println!(
        "instantiate+call trivial workflow: n={iterations} p50={:.1} µs p99={:.1} µs mean={:.1} µs ({:.0} episodes/s on one task)",
        percentile(&times, 0.5).as_secs_f64() * 1e6,
        percentile(&times, 0.99).as_secs_f64() * 1e6,
        total.as_secs_f64() * 1e6 / iterations as f64,
        iterations as f64 / total.as_secs_f64()
    );

    // Memory: `idle` episodes parked inside a generate call.
    let before = rss_bytes().context("reading /proc/self/statm")?;
    let mut tasks = Vec::with_capacity(idle);
    for i in 0..idle {
        let rt = runtime.clone();
        let c = echo_c.clone();
        let l = limits.clone();
        tasks.push(tokio::spawn(async move {
            rt.run_episode(
                &c,
                EpisodeRequest::new(
                    format!("idle{i}"),
                    serde_json::json!({"input_ids": [1, 2, 3]}),
                ),
                l,
            )
            .await
        }));
    }
    let wait_start = Instant::now();
    while gate.waiting.load(Ordering::Acquire) < idle {
        if wait_start.elapsed() > Duration::from_secs(60) {
            bail!(
                "only {} of {idle} episodes reached generate",
                gate.waiting.load(Ordering::Acquire)
            );
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let during = rss_bytes().context("reading /proc/self/statm")?;
    gate.open.add_permits(idle);
    let mut accepted = 0;
    for t in tasks {
        if matches!(t.await?.outcome, EpisodeOutcome::Accepted(_)) {
            accepted += 1;
        }
    }
    println!(
        "idle in-flight instances: n={idle} host RSS {:.1} MiB -> {:.1} MiB, {:.1} KiB per instance ({accepted} accepted after release)",
        before as f64 / 1048576.0,
        during as f64 / 1048576.0,
        (during.saturating_sub(before)) as f64 / 1024.0 / idle as f64
    );
    Ok(())
}

/// A backend whose requests wait until the bench opens the gate.
struct GateBackend {
    open: tokio::sync::Semaphore,
    waiting: AtomicUsize,
}

#[async_trait::async_trait]
impl InferenceBackend for GateBackend {
    fn name(&self) -> &'static str {
        "gate"
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateResponse, EngineError> {
        {
            self.waiting.fetch_add(1, Ordering::AcqRel);
            let permit = self
                .open
                .acquire()
                .await
                .map_err(|e| EngineError::Unavailable {
                    backend: "gate",
                    message: e.to_string(),
                })?;
            permit.forget();
            let n = request.sampling.max_new_tokens.min(4) as usize;
            Ok(GenerateResponse {
                output_tokens: vec![7; n],
                output_logprobs: vec![-0.5; n],
                output_versions: None,
                stop_reason: StopReason::Length,
                ttft: None,
            })
        }
    }
}

/// GSM8K-like reward inputs for the reward benchmark.
fn reward_calls() -> Vec<rollbox_runtime::RewardCall> {
    let rows = [
        (
            "Natalia sold 48/2 = 24 clips in May, 48 + 24 = 72 in total. \\boxed{72}",
            "Natalia sold 48+24 = 72 clips.\n#### 72",
        ),
        (
            "Weng earns 12/60 = $0.2 per minute, so 0.2 * 50 = 10. The answer is 10.",
            "#### 10",
        ),
        ("She needs 100 - 50 - 30 = 20 more. #### 5", "#### 5"),
        ("\\boxed{\\frac{3}{4}}", "0.75"),
    ];
    rows.iter()
        .map(|(c, a)| rollbox_runtime::RewardCall {
            prompt: "Question: ... Please put your final answer within \\boxed{}.".into(),
            completion: (*c).into(),
            prompt_ids: (0..43).collect(),
            completion_ids: (0..64).collect(),
            data: serde_json::json!({"question": "...", "answer": a}),
        })
        .collect()
}

pub async fn rewards(
    runtime: Arc<Runtime>,
    path: &Path,
    label: &str,
    iterations: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    require(path)?;
    let t = Instant::now();
    let reward = runtime.load_reward(path)?;
    let load = t.elapsed();
    let limits = Arc::new(Limits::untrusted_call());
    let calls = reward_calls();
    for call in calls.iter().take(4) {
        runtime
            .call_reward(&reward, call.clone(), limits.clone())
            .await
            .result?;
    }
    let mut times = Vec::with_capacity(iterations);
    for i in 0..iterations {
        let call = calls[i % calls.len()].clone();
        let t = Instant::now();
        runtime
            .call_reward(&reward, call, limits.clone())
            .await
            .result?;
        times.push(t.elapsed());
    }
    times.sort_unstable();
    let total = iterations.max(concurrency * 8);
    let start = Instant::now();
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..concurrency {
        let (rt, reward, limits, calls, next) = (
            runtime.clone(),
            reward.clone(),
            limits.clone(),
            calls.clone(),
            next.clone(),
        );
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= total {
                    return Ok::<(), anyhow::Error>(());
                }
                rt.call_reward(&reward, calls[i % calls.len()].clone(), limits.clone())
                    .await
                    .result?;
            }
        }));
    }
    for w in workers {
        w.await??;
    }
    let elapsed = start.elapsed();
    println!(
        "{label}: load {:.0} ms; sequential n={iterations} p50={:.1} µs p99={:.1} µs; {concurrency} concurrent: {:.0} calls/s",
        load.as_secs_f64() * 1e3,
        percentile(&times, 0.5).as_secs_f64() * 1e6,
        percentile(&times, 0.99).as_secs_f64() * 1e6,
        total as f64 / elapsed.as_secs_f64()
    );
    Ok(())
}

/// Encode throughput and chat-template latency of the host tokenizer.
pub fn tokenizer(model: &Path, iterations: usize, baseline: &Path) -> anyhow::Result<()> {
    require(model)?;
    let t = Instant::now();
    let tok = rollbox_tokenizer::HostTokenizer::load(model)?;
    println!(
        "tokenizer bench: {} (loaded in {:.0} ms)",
        model.display(),
        t.elapsed().as_secs_f64() * 1e3
    );
    let corpus: Vec<String> = (0..64)
        .map(|i| {
            format!(
                "Question {i}: Natalia sold clips to {} of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May? Let's think step by step: {} + {} = {}.",
                48 + i,
                48 + i,
                (48 + i) / 2,
                48 + i + (48 + i) / 2
            )
        })
        .collect();
    let start = Instant::now();
    let mut tokens = 0usize;
    for _ in 0..(iterations / 64).max(1) {
        for text in &corpus {
            tokens += tok.encode(text, false)?.len();
        }
    }
    let encode_s = start.elapsed().as_secs_f64();
    let messages = serde_json::json!([
        {"role": "system", "content": "You are a careful math tutor. Put the final answer in \\boxed{}."},
        {"role": "user", "content": "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?"}
    ]);
    let options = rollbox_tokenizer::ChatOptions::default();
    for _ in 0..100 {
        tok.apply_chat_template(&messages, &options)?;
    }
    let mut times = Vec::with_capacity(iterations);
    for _ in 0..iterations {
        let t = Instant::now();
        std::hint::black_box(tok.apply_chat_template(&messages, &options)?);
        times.push(t.elapsed());
    }
    times.sort_unstable();
    println!(
        "rollbox: encode {:.0} tokens/s ({tokens} tokens); chat template + encode (2 messages) p50={:.1} µs p99={:.1} µs",
        tokens as f64 / encode_s,
        percentile(&times, 0.5).as_secs_f64() * 1e6,
        percentile(&times, 0.99).as_secs_f64() * 1e6
    );
    match std::process::Command::new("python3")
        .arg(baseline)
        .arg(iterations.to_string())
        .status()
    {
        Ok(s) if s.success() => {}
        Ok(s) => println!(
            "baseline {} failed ({s}); install transformers and gguf to compare",
            baseline.display()
        ),
        Err(e) => println!("baseline skipped: python3 not runnable ({e})"),
    }
    Ok(())
}

/// The benchmark's dicts: dict i has length `100 + (i * 7919) % 1901`, the formula the
/// baseline script uses.
fn concat_dicts() -> anyhow::Result<Vec<Vec<(String, rollbox_tensor::HostTensor)>>> {
    use rollbox_tensor::{HostTensor, TensorData};
    (0..512usize)
        .map(|i| {
            let l = 100 + (i * 7919) % 1901;
            let prompt = l / 4;
            let tok = |f: fn(usize, usize) -> i32| (0..l).map(|j| f(j, prompt)).collect::<Vec<_>>();
            let per_token = [
                (
                    "input_ids",
                    TensorData::I32(tok(|j, _| (j * 31 % 49152) as i32)),
                ),
                ("attention_mask", TensorData::Bool(vec![true; l])),
                ("loss_mask", TensorData::I32(tok(|j, p| i32::from(j >= p)))),
                (
                    "logprobs",
                    TensorData::F32((0..l).map(|j| -(j as f32) / 1000.0).collect()),
                ),
                (
                    "versions",
                    TensorData::I32(tok(|j, p| if j >= p { 3 } else { -1 })),
                ),
                (
                    "turn_ids",
                    TensorData::I32(tok(|j, p| if j >= p { 0 } else { -1 })),
                ),
                (
                    "prox_logprobs",
                    TensorData::F32((0..l).map(|j| -(j as f32) / 999.0).collect()),
                ),
            ];
            let mut dict = Vec::with_capacity(9);
            for (k, data) in per_token {
                dict.push((k.to_string(), HostTensor::new(data, vec![1, l])?));
            }
            dict.push((
                "rewards".into(),
                HostTensor::new(TensorData::F32(vec![1.0]), vec![1])?,
            ));
            dict.push((
                "is_truncated".into(),
                HostTensor::new(TensorData::Bool(vec![false]), vec![1])?,
            ));
            Ok(dict)
        })
        .collect()
}

/// concat-padded figure, then the torch baseline when available.
pub fn concat(runs: usize, python: &str, baseline: &Path) -> anyhow::Result<()> {
    let dicts = concat_dicts()?;
    let views: Vec<Vec<(String, &rollbox_tensor::HostTensor)>> = dicts
        .iter()
        .map(|d| d.iter().map(|(k, t)| (k.clone(), t)).collect())
        .collect();
    let tokens: usize = dicts.iter().map(|d| d[0].1.shape()[1]).sum();
    for _ in 0..3 {
        std::hint::black_box(rollbox_tensor::concat_padded(&views, 0.0)?);
    }
    let mut times = Vec::with_capacity(runs);
    let mut out_bytes = 0;
    for _ in 0..runs.max(1) {
        let t = Instant::now();
        let out = rollbox_tensor::concat_padded(&views, 0.0)?;
        times.push(t.elapsed());
        out_bytes = out.iter().map(|(_, t)| t.size_in_bytes()).sum::<usize>();
        drop(std::hint::black_box(out));
    }
    times.sort_unstable();
    println!(
        "concat bench: 512 dicts, {tokens} tokens, 9 keys, output {:.1} MiB, device {:?}",
        out_bytes as f64 / (1 << 20) as f64,
        rollbox_tensor::default_device().location()
    );
    println!(
        "rollbox concat_padded: median {:.2} ms, p90 {:.2} ms over {} runs",
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        percentile(&times, 0.9).as_secs_f64() * 1e3,
        times.len()
    );
    if !Path::new(python).exists() {
        println!(
            "baseline skipped: {python} not found (set it up as scripts/record_concat_fixture.py says)"
        );
        return Ok(());
    }
    match std::process::Command::new(python)
        .arg(baseline)
        .env("OMP_NUM_THREADS", "2")
        .status()
    {
        Ok(s) if s.success() => {}
        Ok(s) => println!("baseline {} failed ({s})", baseline.display()),
        Err(e) => println!("baseline skipped: {python} not runnable ({e})"),
    }
    Ok(())
}

/// Runs `bench engine-one` per (weights, threads) in a child process, then the baseline.
fn engine(
    model: &str,
    weights: &[String],
    threads: &[usize],
    python: &str,
    baseline: &Path,
) -> anyhow::Result<()> {
    require(Path::new(model))?;
    let exe = std::env::current_exe()?;
    println!(
        "engine bench: {model}; 200-token prompt, 128 greedy tokens; 8 sequences of 45-token prompts x 128 tokens"
    );
    for w in weights {
        for &t in threads {
            let status = std::process::Command::new(&exe)
                .args(["bench", "engine-one", "--model", model, "--weights", w])
                .env("CANDLE_NUM_THREADS", t.to_string())
                .env("RAYON_NUM_THREADS", t.to_string())
                .status()?;
            if !status.success() {
                bail!("bench engine-one ({w}, {t} threads) failed: {status}");
            }
        }
    }
    if !Path::new(python).exists() {
        println!("baseline skipped: {python} not found (see scripts/record_embedded_fixture.py)");
        return Ok(());
    }
    for &t in threads {
        let status = std::process::Command::new(python)
            .arg(baseline)
            .arg(model)
            .arg(t.to_string())
            .status()?;
        if !status.success() {
            println!("baseline {} failed ({status})", baseline.display());
        }
    }
    Ok(())
}

async fn engine_one(model: &str, weights: &str) -> anyhow::Result<()> {
    use rollbox_engines::SamplingParams;
    use rollbox_engines::embedded::{EmbeddedBackend, EmbeddedOptions};
    let format = weights.parse().map_err(|e: String| anyhow::anyhow!(e))?;
    let backend = Arc::new(EmbeddedBackend::load(EmbeddedOptions {
        model: PathBuf::from(model),
        weights: format,
        ..EmbeddedOptions::default()
    })?);
    let tok = backend.tokenizer();
    let text = "Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May? ";
    let mut long = Vec::new();
    while long.len() < 200 {
        long.extend(tok.encode(text, false)?);
    }
    long.truncate(200);
    let sampling = SamplingParams {
        greedy: true,
        max_new_tokens: 128,
        ignore_eos: true,
        ..SamplingParams::default()
    };
    let req = |ids: Vec<u32>| GenerateRequest {
        sampling: sampling.clone(),
        ..GenerateRequest::new(ids)
    };
    // Warm up (first-use allocations, thread pool start).
    backend.generate(req(long[..32].to_vec())).await?;
    let t = Instant::now();
    let r = backend.generate(req(long.clone())).await?;
    let total = t.elapsed().as_secs_f64();
    let ttft = r.ttft.unwrap_or(0.0);
    let decode_tps = (r.output_tokens.len() - 1) as f64 / (total - ttft);
    let prefill_tps = long.len() as f64 / ttft;
    let threads = std::env::var("CANDLE_NUM_THREADS").unwrap_or_else(|_| "default".into());
    // 8 concurrent sequences with different 45-token prompts.
    let prompts: Vec<Vec<u32>> = (0..8u32)
        .map(|i| {
            let mut p = long[..45].to_vec();
            p[0] = 100 + i;
            p
        })
        .collect();
    // Time 8 concurrent requests of `max_new` tokens each; returns (seconds, tokens).
    let run8 = |max_new: u32| {
        let (backend, prompts) = (backend.clone(), prompts.clone());
        let sampling = SamplingParams {
            max_new_tokens: max_new,
            ..sampling.clone()
        };
        async move {
            let t = Instant::now();
            let handles: Vec<_> = prompts
                .into_iter()
                .map(|p| {
                    let b = backend.clone();
                    let r = GenerateRequest {
                        sampling: sampling.clone(),
                        ..GenerateRequest::new(p)
                    };
                    tokio::spawn(async move { b.generate(r).await })
                })
                .collect();
            let mut tokens = 0usize;
            for h in handles {
                tokens += h.await??.output_tokens.len();
            }
            anyhow::Ok((t.elapsed().as_secs_f64(), tokens))
        }
    };
    // Prefill + first token of all 8, then the full run: the difference is the decode phase
    // (as the single-sequence decode figure leaves out its time to first token).
    // The ratio's baseline: one sequence on the same 45-token prompt (same context lengths).
    let t = Instant::now();
    let r = backend.generate(req(prompts[0].clone())).await?;
    let one =
        (r.output_tokens.len() - 1) as f64 / (t.elapsed().as_secs_f64() - r.ttft.unwrap_or(0.0));
    let (first_s, first_tokens) = run8(1).await?;
    let (all_s, tokens) = run8(128).await?;
    let agg = tokens as f64 / all_s;
    let decode_agg = (tokens - first_tokens) as f64 / (all_s - first_s);
    println!(
        "rollbox embedded ({weights}, {threads} threads): prefill {prefill_tps:.0} tok/s, decode {decode_tps:.1} tok/s; 8 sequences of 45-token prompts: decode {decode_agg:.1} tok/s aggregate ({:.2}x one sequence on such a prompt, {one:.1} tok/s), {agg:.1} tok/s with their prefills",
        decode_agg / one
    );
    Ok(())
}

/// Answers every request with the same 64 tokens, after `delay`.
struct Instant64 {
    tokens: Vec<u32>,
    delay: Duration,
}

#[async_trait::async_trait]
impl InferenceBackend for Instant64 {
    fn name(&self) -> &'static str {
        "instant"
    }
    async fn generate(&self, _r: GenerateRequest) -> Result<GenerateResponse, EngineError> {
        if !self.delay.is_zero() {
            tokio::time::sleep(self.delay).await;
        }
        Ok(GenerateResponse {
            output_tokens: self.tokens.clone(),
            output_logprobs: vec![-0.25; self.tokens.len()],
            output_versions: None,
            stop_reason: StopReason::Stop,
            ttft: None,
        })
    }
}

/// User + system CPU seconds of this process so far.
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start at index 2.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

fn peak_rss_mib() -> f64 {
    proc_status_mib("VmHWM:")
}

/// A memory figure of this process from `/proc/self/status` (`VmHWM:`, `VmRSS:`), MiB.
fn proc_status_mib(field: &str) -> f64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with(field))
                .and_then(|l| l.split_whitespace().nth(1)?.parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

/// What `bench rollout` and `bench soak` share: the runtime with the rlvr workflow, the math
/// reward and an in-process engine answering 64 tokens, and GSM8K-like rows.
struct RolloutSetup {
    runtime: Arc<Runtime>,
    workflow: Arc<rollbox_runtime::WorkflowComponent>,
    tokenizer: Arc<rollbox_tokenizer::HostTokenizer>,
}

impl RolloutSetup {
    fn new(args: &RlvrArgs, latency: Duration, config: RuntimeConfig) -> anyhow::Result<Self> {
        let (model, workflow, math) = (Path::new(&args.model), &args.workflow, &args.math);
        require(model)?;
        require(workflow)?;
        require(math)?;
        // As `rollbox rollout` with a remote engine: no model weights in this process.
        crate::disable_huge_pages();
        let tok = Arc::new(rollbox_tokenizer::HostTokenizer::load(model)?);
        let mut tokens = tok.encode(
            "She sold 48 clips in April and half as many in May, so 48 + 24 = 72 clips. The answer is \\boxed{72}.",
            false,
        )?;
        tokens.resize(63, 198);
        tokens.push(2);
        let services = Services::new()
            .with_tokenizer(tok.clone())
            .with_backend(Arc::new(Instant64 {
                tokens,
                delay: latency,
            }));
        let runtime = Arc::new(Runtime::new(config, services)?);
        runtime.register_reward("math", math, rollbox_runtime::CallPolicy::default())?;
        let workflow = Arc::new(runtime.load_workflow(workflow)?);
        crate::release_setup_memory();
        Ok(RolloutSetup {
            runtime,
            workflow,
            tokenizer: tok,
        })
    }

    fn rows(&self, rows: usize) -> Vec<rollbox_rollout::dataset::Row> {
        (0..rows)
            .map(|i| rollbox_rollout::dataset::Row {
                index: i,
                data: serde_json::json!({
                    "messages": [{"role": "user", "content": format!(
                        "Natalia sold clips to {} of her friends in April, and then she sold half as many clips in May. How many clips did Natalia sell altogether in April and May?",
                        40 + i % 60
                    )}],
                    "answer": (3 * (40 + i % 60) / 2).to_string(),
                })
                .into(),
            })
            .collect()
    }

    fn rollout(&self, in_flight: usize) -> rollbox_rollout::Rollout {
        rollbox_rollout::Rollout {
            runtime: self.runtime.clone(),
            workflow: self.workflow.clone(),
            tokenizer: Some(self.tokenizer.clone()),
            options: rollbox_rollout::RolloutOptions {
                n_samples: 1,
                max_concurrent: in_flight,
                batch_size: 64,
                ..rollbox_rollout::RolloutOptions::default()
            },
            provenance: Default::default(),
        }
    }
}

async fn rollout(setup: &RolloutSetup, rows: usize, in_flight: &[usize]) -> anyhow::Result<()> {
    use rollbox_rollout::output::OutputDir;
    let data = setup.rows(rows);
    println!(
        "rollout bench: {rows} rows x 1 sample, rlvr workflow + math reward (sandboxed), instant engine answering 64 tokens, batches of 64 written as safetensors"
    );
    for &level in in_flight {
        let dir = tempfile::tempdir()?;
        let mut out = OutputDir::open(dir.path())?;
        let r = setup.rollout(level);
        let cpu0 = cpu_seconds();
        let rows = data.clone();
        // As `rollbox rollout` runs it: the controller as a task on the runtime's workers.
        let s = tokio::spawn(async move { r.run(rows, Vec::new(), &mut out, &mut |_| {}).await })
            .await??;
        let cpu = cpu_seconds() - cpu0;
        let episodes: usize = s.episodes.values().sum();
        println!(
            "in flight {level:>4}: {:>8.0} episodes/s, CPU {:.0} µs/episode, latency p50 {:.2} ms p99 {:.2} ms (from admission: p50 {:.2} ms p99 {:.2} ms), accepted {}, peak RSS {:.0} MiB",
            s.episodes_per_s,
            cpu / episodes.max(1) as f64 * 1e6,
            s.episode_ms.get("p50").copied().unwrap_or(0.0),
            s.episode_ms.get("p99").copied().unwrap_or(0.0),
            s.admitted_ms.get("p50").copied().unwrap_or(0.0),
            s.admitted_ms.get("p99").copied().unwrap_or(0.0),
            s.episodes.get("accepted").copied().unwrap_or(0),
            peak_rss_mib()
        );
    }
    Ok(())
}

/// `bench soak`: `rows` episodes, `in_flight` at once, against an engine answering after
/// `latency`; then every row is checked to be in `trajectories.jsonl` and the batches exactly
/// once.
async fn soak(
    setup: &RolloutSetup,
    rows: usize,
    in_flight: usize,
    latency: Duration,
) -> anyhow::Result<()> {
    use rollbox_rollout::output::OutputDir;
    println!(
        "soak: {rows} rows x 1 sample, {in_flight} in flight, engine latency {} ms, rlvr workflow + math reward ({} instance allocation)",
        latency.as_millis(),
        if setup.runtime.is_pooled() {
            "pooled"
        } else {
            "on-demand"
        }
    );
    let dir = tempfile::tempdir()?;
    let mut out = OutputDir::open(dir.path())?;
    let r = setup.rollout(in_flight);
    let data = setup.rows(rows);
    let rss_before = current_rss_mib();
    let cpu0 = cpu_seconds();
    let start = std::time::Instant::now();
    // A sampler of RSS while it runs (peak RSS of the process is also reported).
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let sampling = sampling.clone();
        tokio::spawn(async move {
            let mut max = 0.0f64;
            while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                max = max.max(current_rss_mib());
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            max
        })
    };
    let s =
        tokio::spawn(async move { r.run(data, Vec::new(), &mut out, &mut |_| {}).await }).await??;
    sampling.store(false, std::sync::atomic::Ordering::Relaxed);
    let max_rss = sampler.await?;
    let wall = start.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(dir.path().join("trajectories.jsonl"))?;
    let mut seen = vec![0u32; rows];
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line)?;
        let row = v["row"].as_u64().unwrap_or(u64::MAX) as usize;
        anyhow::ensure!(row < rows, "a trajectory of an unknown row: {line}");
        seen[row] += 1;
    }
    let lost = seen.iter().filter(|&&n| n == 0).count();
    let duplicated = seen.iter().filter(|&&n| n > 1).count();
    let mut batch_rows = 0usize;
    for entry in std::fs::read_dir(dir.path())? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            let f = rollbox_tensor::read_safetensors(&path, &rollbox_tensor::Device::Cpu)?;
            let r: Vec<usize> = serde_json::from_str(&f.metadata["rows"])?;
            batch_rows += r.len();
        }
    }
    println!(
        "{} episodes in {wall:.1} s ({:.0}/s; the engine alone bounds it at {:.0}/s), CPU {:.0} µs/episode, accepted {}, latency p50 {:.0} ms p99 {:.0} ms",
        s.episodes.values().sum::<usize>(),
        s.episodes_per_s,
        in_flight as f64 / latency.as_secs_f64().max(1e-9),
        (cpu_seconds() - cpu0) / rows.max(1) as f64 * 1e6,
        s.episodes.get("accepted").copied().unwrap_or(0),
        s.episode_ms.get("p50").copied().unwrap_or(0.0),
        s.episode_ms.get("p99").copied().unwrap_or(0.0),
    );
    println!(
        "rows: {rows}, in trajectories.jsonl: {}, lost: {lost}, duplicated: {duplicated}, rows in batches: {batch_rows}; RSS before {rss_before:.0} MiB, max while running {max_rss:.0} MiB, process peak {:.0} MiB",
        rows - lost,
        peak_rss_mib()
    );
    anyhow::ensure!(
        lost == 0 && duplicated == 0 && batch_rows == rows,
        "soak failed: {lost} rows lost, {duplicated} duplicated, {batch_rows} rows in batches of {rows}"
    );
    println!("soak passed: no row lost or duplicated");
    Ok(())
}

fn current_rss_mib() -> f64 {
    proc_status_mib("VmRSS:")
}
