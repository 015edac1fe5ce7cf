//! What the benchmarks share: component checks, process figures from /proc, percentiles.

use std::path::Path;
use std::time::Duration;

use anyhow::bail;

/// The component or model at `path` must exist; the error says how to build the components.
pub fn require(path: &Path) -> anyhow::Result<()> {
    if !path.is_file() {
        bail!(
            "{} not found; build the benchmark components first (scripts/quickstart.sh, or cargo test):\n  cargo build --target wasm32-wasip2 --profile guest --target-dir target/wasm-guests -p rollbox-test-programs -p rollbox-workflow-echo",
            path.display()
        );
    }
    Ok(())
}

/// Resident set size of this process, bytes.
pub fn rss_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

/// The duration at quantile `q` of `sorted` (ascending, not empty), as `stats.json` computes
/// its percentiles.
pub fn percentile(sorted: &[Duration], q: f64) -> Duration {
    let secs: Vec<f64> = sorted.iter().map(Duration::as_secs_f64).collect();
    Duration::from_secs_f64(rollbox_rollout::stats::percentile(&secs, q))
}

/// User + system CPU seconds of this process so far.
pub fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return 0.0;
    };
    // Fields after the command name (which may hold spaces) start at index 2.
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| f.get(i).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    (ticks(11) + ticks(12)) / 100.0
}

/// Peak resident set size of this process, MiB.
pub fn peak_rss_mib() -> f64 {
    proc_status_mib("VmHWM:")
}

/// Resident set size of this process now, MiB.
pub fn current_rss_mib() -> f64 {
    proc_status_mib("VmRSS:")
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
