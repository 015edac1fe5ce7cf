//! `rollbox-bench tools`: tool-call latency with a fresh instance per call — python-exec on a
//! short snippet next to the same snippet through `subprocess.run([sys.executable, "-c", ...])`
//! (rounds interleaved in one run), the calculator, and host RSS per python-exec call in flight.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rollbox_runtime::{Limits, Runtime, RuntimeConfig, Services, ToolComponent, ToolInput};

use crate::common::{percentile, require, rss_bytes};

/// The snippet both sides run.
const SNIPPET: &str = "print(sum(range(1000)))";

/// The benchmark's components and baseline.
pub struct Components<'a> {
    /// The python-exec tool component.
    pub python_exec: &'a Path,
    /// The calculator tool component.
    pub calculator: &'a Path,
    /// `scripts/baselines/tool_baseline.py`.
    pub baseline: &'a Path,
    /// The Python that runs the baseline.
    pub python: &'a str,
}

async fn call(
    rt: &Runtime,
    tool: &ToolComponent,
    args: &str,
    limits: &Arc<Limits>,
) -> anyhow::Result<(Duration, String)> {
    let t = Instant::now();
    let r = rt
        .call_once(
            tool,
            ToolInput::Call {
                name: "bench".into(),
                args: args.to_string(),
            },
            limits.clone(),
        )
        .await;
    let dt = t.elapsed();
    Ok((dt, r.result.map_err(|f| anyhow::anyhow!("tool call: {f}"))?))
}

/// `n` sequential calls, each timed.
async fn batch(
    rt: &Runtime,
    tool: &ToolComponent,
    args: &str,
    limits: &Arc<Limits>,
    n: usize,
) -> anyhow::Result<Vec<Duration>> {
    let mut v = Vec::with_capacity(n);
    for _ in 0..n {
        v.push(call(rt, tool, args, limits).await?.0);
    }
    Ok(v)
}

fn baseline(c: &Components<'_>, n: usize) -> anyhow::Result<Vec<Duration>> {
    let out = Command::new(c.python)
        .arg(c.baseline)
        .arg(n.to_string())
        .arg(SNIPPET)
        .output()
        .with_context(|| format!("running {} {}", c.python, c.baseline.display()))?;
    if !out.status.success() {
        bail!(
            "the baseline failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| Ok(Duration::from_secs_f64(l.trim().parse()?)))
        .collect()
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

pub async fn run(
    rounds: usize,
    per_round: usize,
    in_flight: usize,
    c: Components<'_>,
) -> anyhow::Result<()> {
    require(c.python_exec)?;
    require(c.calculator)?;
    let rt = Arc::new(Runtime::new(RuntimeConfig::default(), Services::new())?);
    let t = Instant::now();
    let py = rt.load::<ToolComponent>(c.python_exec)?;
    let load = t.elapsed();
    let calc = rt.load::<ToolComponent>(c.calculator)?;
    let limits = Arc::new(Limits::untrusted_tool());
    let args = serde_json::json!({ "code": SNIPPET }).to_string();
    let (_, out) = call(&rt, &py, &args, &limits).await?;
    let out: serde_json::Value = serde_json::from_str(&out)?;
    if out["stdout"] != "499500\n" {
        bail!("python-exec printed {out}");
    }
    for _ in 0..20 {
        call(&rt, &py, &args, &limits).await?;
    }
    println!(
        "tool bench: `{SNIPPET}`, {rounds} interleaved rounds of {per_round} calls each side; python-exec: fresh instance per call, 5 s / 128 MiB limits (load {:.0} ms)",
        ms(load)
    );
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    for round in 0..rounds {
        // Alternate which side goes first, so drift in the machine's load hits both.
        if round % 2 == 0 {
            ours.extend(batch(&rt, &py, &args, &limits, per_round).await?);
            theirs.extend(baseline(&c, per_round)?);
        } else {
            theirs.extend(baseline(&c, per_round)?);
            ours.extend(batch(&rt, &py, &args, &limits, per_round).await?);
        }
    }
    ours.sort_unstable();
    theirs.sort_unstable();
    let (p50, p99) = (percentile(&ours, 0.5), percentile(&ours, 0.99));
    let (b50, b99) = (percentile(&theirs, 0.5), percentile(&theirs, 0.99));
    println!(
        "python-exec (rollbox): n={} p50={:.2} ms p99={:.2} ms",
        ours.len(),
        ms(p50),
        ms(p99)
    );
    println!(
        "subprocess.run([sys.executable, \"-c\", ...]) ({}): n={} p50={:.2} ms p99={:.2} ms",
        c.python,
        theirs.len(),
        ms(b50),
        ms(b99)
    );
    println!(
        "ratio (subprocess / rollbox): p50 {:.1}x, p99 {:.1}x",
        b50.as_secs_f64() / p50.as_secs_f64(),
        b99.as_secs_f64() / p99.as_secs_f64()
    );

    // The same sandbox refusing its arguments at once: instantiate, parse, return an error.
    let mut quick = Vec::new();
    let mut peak_memory = 0;
    for _ in 0..(rounds * per_round) {
        let t = Instant::now();
        let r = rt
            .call_once(
                &py,
                ToolInput::Call {
                    name: "bench".into(),
                    args: "{}".into(),
                },
                limits.clone(),
            )
            .await;
        quick.push(t.elapsed());
        peak_memory = peak_memory.max(r.peak_memory_bytes);
    }
    quick.sort_unstable();
    println!(
        "python-exec instantiate + refuse the arguments + teardown: p50={:.2} ms p99={:.2} ms; linear memory {:.1} MiB",
        ms(percentile(&quick, 0.5)),
        ms(percentile(&quick, 0.99)),
        peak_memory as f64 / 1048576.0
    );

    let calc_args = r#"{"expression": "2 * (3 + 4) ^ 2 - 7 / 2"}"#;
    for _ in 0..100 {
        call(&rt, &calc, calc_args, &limits).await?;
    }
    let mut times = Vec::new();
    for _ in 0..(rounds * per_round * 10).max(2000) {
        times.push(call(&rt, &calc, calc_args, &limits).await?.0);
    }
    times.sort_unstable();
    println!(
        "calculator (rollbox): n={} p50={:.1} µs p99={:.1} µs",
        times.len(),
        percentile(&times, 0.5).as_secs_f64() * 1e6,
        percentile(&times, 0.99).as_secs_f64() * 1e6
    );

    // Host RSS with `in_flight` python-exec calls held in flight (each sleeps in the host).
    let hold = serde_json::json!({ "code": "import time\ntime.sleep(1.0)" }).to_string();
    let before = rss_bytes().unwrap_or(0);
    let peak = Arc::new(AtomicU64::new(before));
    let on = Arc::new(AtomicBool::new(true));
    let sampler = {
        let (peak, on) = (peak.clone(), on.clone());
        std::thread::spawn(move || {
            while on.load(Ordering::Relaxed) {
                peak.fetch_max(rss_bytes().unwrap_or(0), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(2));
            }
        })
    };
    let mut set = tokio::task::JoinSet::new();
    for _ in 0..in_flight {
        let (rt, py, hold, limits) = (rt.clone(), py.clone(), hold.clone(), limits.clone());
        set.spawn(async move { call(&rt, &py, &hold, &limits).await.map(|_| ()) });
    }
    while let Some(r) = set.join_next().await {
        r??;
    }
    on.store(false, Ordering::Relaxed);
    let _ = sampler.join();
    let per = peak.load(Ordering::Relaxed).saturating_sub(before) as f64 / in_flight as f64;
    println!(
        "python-exec: host RSS +{:.1} MiB per call in flight ({in_flight} in flight)",
        per / 1048576.0
    );
    Ok(())
}
