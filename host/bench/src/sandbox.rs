//! `rollbox-bench sandbox`: instantiate + call a trivial workflow (p50/p99), and host RSS per
//! idle in-flight instance.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rollbox_engines::StopReason;
use rollbox_engines::testing::FakeBackend;
use rollbox_runtime::{
    EpisodeOutcome, EpisodeRequest, Limits, Runtime, RuntimeConfig, Scope, Services,
    WorkflowComponent,
};

use crate::common::{percentile, require, rss_bytes};

pub async fn run(
    iterations: usize,
    idle: usize,
    trivial: &Path,
    echo: &Path,
) -> anyhow::Result<()> {
    require(trivial)?;
    require(echo)?;
    // Answers 4 tokens (cut to max_new_tokens), once the bench lets the requests through.
    let gate = Arc::new(FakeBackend::fixed(vec![7; 4], vec![-0.5; 4], StopReason::Length).gated());
    let runtime = Arc::new(Runtime::new(
        RuntimeConfig::default(),
        Services::new().with_backend(gate.clone()),
    )?);
    let limits = Arc::new(Limits::default());
    let trivial_c = runtime.load::<WorkflowComponent>(trivial)?;
    let echo_c = runtime.load::<WorkflowComponent>(echo)?;
    println!(
        "sandbox bench: wasmtime 48, pooling allocator {}, epoch tick {:?}",
        if runtime.config().pooling {
            "on"
        } else {
            "off (fallback)"
        },
        rollbox_runtime::config::EPOCH_TICK
    );

    // Latency: new store + deny-all WASI + instantiate + run-episode + drop, one at a time.
    let data = serde_json::json!({});
    for _ in 0..200 {
        runtime
            .run_episode(
                &Scope::default(),
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
                &Scope::default(),
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
                &Scope::default(),
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
    while gate.calls() < idle {
        if wait_start.elapsed() > Duration::from_secs(60) {
            bail!("only {} of {idle} episodes reached generate", gate.calls());
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let during = rss_bytes().context("reading /proc/self/statm")?;
    gate.open(idle);
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
