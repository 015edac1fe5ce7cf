//! `rollbox-bench rollout` (throughput, CPU, latency and RSS at several in-flight levels) and
//! `rollbox-bench soak` (many episodes in flight against a slow engine, every row checked).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rollbox_engines::StopReason;
use rollbox_engines::testing::FakeBackend;
use rollbox_host::{ComponentSpec, Host, HostSpec, process};
use rollbox_rollout::OutputDir;
use rollbox_rollout::dataset::Dataset;

use crate::RlvrArgs;
use crate::common::{cpu_seconds, current_rss_mib, peak_rss_mib, require};

/// What `bench rollout` and `bench soak` share: a host with the rlvr workflow, the math reward
/// and an in-process engine answering 64 tokens, and GSM8K-like rows.
pub struct RolloutSetup {
    host: Host,
}

impl RolloutSetup {
    /// `max_instances`: the sandbox pool's slots (`None`: the runtime's default).
    pub fn new(
        args: &RlvrArgs,
        latency: Duration,
        max_instances: Option<u32>,
    ) -> anyhow::Result<Self> {
        let (model, workflow, math) = (Path::new(&args.model), &args.workflow, &args.math);
        require(model)?;
        require(workflow)?;
        require(math)?;
        // As `rollbox rollout` with a remote engine: no model weights in this process.
        process::disable_huge_pages();
        // The answer's tokens, from a tokenizer dropped (and its setup memory returned) before
        // the host loads its own.
        let tokens = {
            let tok = rollbox_tokenizer::HostTokenizer::load(model)?;
            let mut tokens = tok.encode(
                "She sold 48 clips in April and half as many in May, so 48 + 24 = 72 clips. The answer is \\boxed{72}.",
                false,
            )?;
            tokens.resize(63, 198);
            tokens.push(2);
            tokens
        };
        crate::alloc::release_setup_memory();
        let mut spec = HostSpec::new(workflow);
        spec.tokenizer = Some(model.to_path_buf());
        spec.rewards.insert("math".into(), ComponentSpec::new(math));
        spec.max_instances = max_instances;
        let host = spec.build_with_engine(Arc::new(
            FakeBackend::fixed(tokens, vec![-0.25; 64], StopReason::Stop).with_delay(latency),
        ))?;
        crate::alloc::release_setup_memory();
        Ok(RolloutSetup { host })
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
        self.host.rollout(rollbox_rollout::RolloutOptions {
            n_samples: 1,
            max_concurrent: in_flight,
            batch_size: 64,
            ..rollbox_rollout::RolloutOptions::default()
        })
    }
}

pub async fn rollout(setup: &RolloutSetup, rows: usize, in_flight: &[usize]) -> anyhow::Result<()> {
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
        let s =
            tokio::spawn(
                async move { r.run(Dataset::from_rows(rows), &mut out, &mut |_| {}).await },
            )
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
pub async fn soak(
    setup: &RolloutSetup,
    rows: usize,
    in_flight: usize,
    latency: Duration,
) -> anyhow::Result<()> {
    println!(
        "soak: {rows} rows x 1 sample, {in_flight} in flight, engine latency {} ms, rlvr workflow + math reward ({} instance allocation)",
        latency.as_millis(),
        if setup.host.runtime().config().pooling {
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
        tokio::spawn(async move { r.run(Dataset::from_rows(data), &mut out, &mut |_| {}).await })
            .await??;
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
