//! `rollbox-bench rewards`: reward-call latency (p50/p99) and throughput for the Rust and
//! Python rewards, next to an AReaL-style process-pool call of the same Python scoring, and
//! AReaL's own reward path when its venv is there.

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;

use anyhow::bail;
use rollbox_runtime::{Limits, RewardComponent, Runtime, RuntimeConfig, Services};

use crate::common::{percentile, require, rss_bytes};

/// The reward components measured.
pub struct Components<'a> {
    pub math: &'a Path,
    pub python: &'a Path,
    pub math_verify: &'a Path,
    pub js: &'a Path,
    pub c: &'a Path,
}

/// Every reward, then the baselines.
pub async fn run(
    iterations: usize,
    concurrency: usize,
    components: Components<'_>,
    baseline: &Path,
    corpus: &Path,
) -> anyhow::Result<()> {
    let Components {
        math,
        python,
        math_verify,
        js,
        c,
    } = components;
    let runtime = Arc::new(Runtime::new(RuntimeConfig::default(), Services::new())?);
    println!(
        "reward bench: each call = fresh instance + score + teardown (on the reaper thread for instances past 4 MiB), 15 s / 256 MiB limits"
    );
    let gsm8k = reward_calls();
    one(
        runtime.clone(),
        math,
        "rust math reward, 4 GSM8K-like calls",
        &gsm8k,
        iterations,
        concurrency,
    )
    .await?;
    match corpus_calls(corpus) {
        Ok(mix) => {
            one(
                runtime.clone(),
                math,
                &format!("rust math reward, corpus mix ({} pairs)", mix.len()),
                &mix,
                iterations.max(mix.len()),
                concurrency,
            )
            .await?
        }
        Err(e) => println!("corpus mix skipped: {e:#}"),
    }
    one(
        runtime.clone(),
        python,
        "python reward (componentize-py)",
        &gsm8k,
        iterations,
        concurrency,
    )
    .await?;
    for (label, path) in [
        ("javascript reward (componentize-js)", js),
        ("C reward (zig)", c),
    ] {
        if path.is_file() {
            one(
                runtime.clone(),
                path,
                label,
                &gsm8k,
                iterations,
                concurrency,
            )
            .await?;
        } else {
            println!(
                "{label} skipped: {} not found (built by the tests)",
                path.display()
            );
        }
    }
    // The real math-verify: ~15 ms a call, so fewer calls.
    if math_verify.is_file() {
        one(
            runtime,
            math_verify,
            "math-verify reward (componentize-py, AReaL's gsm8k_reward_fn)",
            &gsm8k,
            (iterations / 10).max(20),
            concurrency.min(8),
        )
        .await?;
    } else {
        println!(
            "math-verify reward skipped: {} not found (scripts/guests/build-math-verify-reward.sh)",
            math_verify.display()
        );
    }
    match std::process::Command::new("python3")
        .arg(baseline)
        .arg(iterations.to_string())
        .status()
    {
        Ok(s) if s.success() => {}
        Ok(s) => bail!("{} failed: {s}", baseline.display()),
        Err(e) => println!("baseline skipped: python3 not runnable ({e})"),
    }
    // AReaL's own path (its wrapper, its math-verify GSM8K reward), when its venv is set up.
    let areal = crate::default_torch_python();
    let script = Path::new("scripts/baselines/areal_reward_baseline.py");
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
            "AReaL baseline skipped: {areal} not found (see scripts/baselines/areal_reward_baseline.py)"
        );
    }
    Ok(())
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

/// Every pair of the recorded parity corpus (`tests/fixtures/rewards/math_corpus.jsonl`) as a
/// reward call: the completion, and the reference as the row's `answer`.
fn corpus_calls(path: &Path) -> anyhow::Result<Vec<rollbox_runtime::RewardCall>> {
    use anyhow::Context as _;
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    text.lines()
        .map(|line| {
            let v: serde_json::Value = serde_json::from_str(line)?;
            Ok(rollbox_runtime::RewardCall {
                prompt: String::new(),
                completion: v["completion"].as_str().unwrap_or_default().to_string(),
                prompt_ids: Vec::new(),
                completion_ids: Vec::new(),
                data: serde_json::json!({"answer": v["answer"]}),
            })
        })
        .collect()
}

async fn one(
    runtime: Arc<Runtime>,
    path: &Path,
    label: &str,
    calls: &[rollbox_runtime::RewardCall],
    iterations: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    require(path)?;
    let t = Instant::now();
    let reward = runtime.load::<RewardComponent>(path)?;
    let load = t.elapsed();
    let limits = Arc::new(Limits::untrusted_call());
    let calls: Arc<Vec<rollbox_runtime::RewardCall>> = Arc::new(calls.to_vec());
    for call in calls.iter().take(4) {
        runtime
            .call_once(&reward, call.clone(), limits.clone())
            .await
            .result?;
    }
    let mut times = Vec::with_capacity(iterations);
    let mut peak = 0;
    for i in 0..iterations {
        let call = calls[i % calls.len()].clone();
        let t = Instant::now();
        let r = runtime.call_once(&reward, call, limits.clone()).await;
        times.push(t.elapsed());
        peak = peak.max(r.peak_memory_bytes);
        r.result?;
    }
    times.sort_unstable();
    // The same sandbox with a row that has no reference: instantiate, read the row, return an
    // error at once. What a call costs before any scoring.
    let mut quick = Vec::with_capacity(iterations.min(500));
    for _ in 0..iterations.min(500) {
        let call = rollbox_runtime::RewardCall {
            completion: "\\boxed{1}".into(),
            ..rollbox_runtime::RewardCall::default()
        };
        let t = Instant::now();
        let _ = runtime.call_once(&reward, call, limits.clone()).await;
        quick.push(t.elapsed());
    }
    quick.sort_unstable();
    let total = iterations.max(concurrency * 8);
    // Host RSS while `concurrency` calls are in flight, sampled every millisecond.
    let rss_before = rss_bytes().unwrap_or(0);
    let rss_peak = Arc::new(std::sync::atomic::AtomicU64::new(rss_before));
    let sampling = Arc::new(std::sync::atomic::AtomicBool::new(true));
    let sampler = {
        let (peak, on) = (rss_peak.clone(), sampling.clone());
        std::thread::spawn(move || {
            while on.load(Ordering::Relaxed) {
                peak.fetch_max(rss_bytes().unwrap_or(0), Ordering::Relaxed);
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        })
    };
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
                rt.call_once(&reward, calls[i % calls.len()].clone(), limits.clone())
                    .await
                    .result?;
            }
        }));
    }
    for w in workers {
        w.await??;
    }
    let elapsed = start.elapsed();
    sampling.store(false, Ordering::Relaxed);
    let _ = sampler.join();
    let rss_per_call =
        rss_peak.load(Ordering::Relaxed).saturating_sub(rss_before) as f64 / concurrency as f64;
    println!(
        "{label}: load {:.0} ms; linear memory {:.1} MiB at most; sequential n={iterations} p50={:.1} µs p99={:.1} µs (instantiate + return at once: p50={:.1} µs); {concurrency} concurrent: {:.0} calls/s, host RSS +{:.1} MiB per call in flight",
        load.as_secs_f64() * 1e3,
        peak as f64 / 1048576.0,
        percentile(&times, 0.5).as_secs_f64() * 1e6,
        percentile(&times, 0.99).as_secs_f64() * 1e6,
        percentile(&quick, 0.5).as_secs_f64() * 1e6,
        total as f64 / elapsed.as_secs_f64(),
        rss_per_call / 1048576.0
    );
    Ok(())
}
