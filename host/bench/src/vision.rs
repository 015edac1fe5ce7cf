//! `rollbox-bench vision`: Qwen2-VL image preprocessing from PNG bytes, one image at a time
//! (p50) and on `threads` threads (images/s), next to transformers' `Qwen2VLImageProcessorFast`
//! and `Qwen2VLImageProcessor` in AReaL's venv on the same files, rounds interleaved.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use rollbox_vision::{Backend, Qwen2VlConfig, decode, process};

use crate::common::percentile;

/// Noisy RGB pixels (xorshift), so PNG compression and resampling do real work.
fn noise(w: u32, h: u32, seed: u64) -> Vec<u8> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..w as usize * h as usize * 3)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 24) as u8
        })
        .collect()
}

fn write_images(dir: &Path, w: u32, h: u32, n: usize) -> anyhow::Result<Vec<PathBuf>> {
    (0..n)
        .map(|i| {
            let path = dir.join(format!("{w}x{h}-{i}.png"));
            image::RgbImage::from_raw(w, h, noise(w, h, i as u64 + 1))
                .context("image buffer")?
                .save(&path)
                .with_context(|| format!("writing {}", path.display()))?;
            Ok(path)
        })
        .collect()
}

fn one(bytes: &[u8], cfg: &Qwen2VlConfig) -> anyhow::Result<usize> {
    let img = decode(bytes)?;
    Ok(process(&img, cfg, Backend::Torchvision)?.rows())
}

/// Sequential per-image times, and the wall time of all of them on `threads` threads. Each
/// worker first processes one image untimed (as a long-lived blocking-pool thread of `rollbox
/// rollout` or `serve` has: its allocator heap warm), then all start together.
fn ours(images: &[Vec<u8>], threads: usize) -> anyhow::Result<(Vec<Duration>, Duration)> {
    anyhow::ensure!(
        !images.is_empty(),
        "no images: --per-round must be at least 1"
    );
    let cfg = Qwen2VlConfig::default();
    let mut times = Vec::with_capacity(images.len());
    for b in images {
        let t = Instant::now();
        one(b, &cfg)?;
        times.push(t.elapsed());
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let ready = std::sync::Barrier::new(threads + 1);
    let wall = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|i| {
                let (next, ready, cfg) = (&next, &ready, &cfg);
                s.spawn(move || -> anyhow::Result<()> {
                    let warm = one(&images[i % images.len()], cfg);
                    ready.wait();
                    warm?;
                    loop {
                        let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let Some(b) = images.get(i) else {
                            return Ok(());
                        };
                        one(b, cfg)?;
                    }
                })
            })
            .collect();
        ready.wait();
        let start = Instant::now();
        for w in workers {
            w.join()
                .map_err(|_| anyhow::anyhow!("a worker panicked"))??;
        }
        anyhow::Ok(start.elapsed())
    })?;
    Ok((times, wall))
}

fn theirs(
    python: &str,
    baseline: &Path,
    threads: usize,
    paths: &[PathBuf],
) -> anyhow::Result<(Vec<Duration>, Vec<Duration>)> {
    let out = Command::new(python)
        .arg(baseline)
        .arg(threads.to_string())
        .args(paths)
        .output()
        .with_context(|| format!("running {python} {}", baseline.display()))?;
    if !out.status.success() {
        bail!(
            "the baseline failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let v: serde_json::Value = serde_json::from_slice(
        out.stdout
            .split(|&b| b == b'\n')
            .rfind(|l| l.starts_with(b"{"))
            .unwrap_or_default(),
    )?;
    let times = |k: &str| -> Vec<Duration> {
        v[k].as_array()
            .map(|a| {
                a.iter()
                    .filter_map(serde_json::Value::as_f64)
                    .map(Duration::from_secs_f64)
                    .collect()
            })
            .unwrap_or_default()
    };
    Ok((times("fast"), times("slow")))
}

fn summary(label: &str, mut times: Vec<Duration>, per_s: f64) -> f64 {
    times.sort_unstable();
    println!(
        "  {label}: p50 {:.2} ms, p99 {:.2} ms, {per_s:.1} images/s",
        percentile(&times, 0.5).as_secs_f64() * 1e3,
        percentile(&times, 0.99).as_secs_f64() * 1e3,
    );
    per_s
}

pub fn run(
    rounds: usize,
    per_round: usize,
    threads: usize,
    python: &str,
    baseline: &Path,
) -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    println!(
        "vision bench: Qwen2-VL defaults, PNG bytes -> pixel_values, {rounds} interleaved rounds of {per_round} images, {threads} threads (rollbox: torchvision backend; baseline: transformers in {python})"
    );
    for (w, h) in [(1024u32, 768u32), (448, 448)] {
        let paths = write_images(dir.path(), w, h, per_round)?;
        let images: Vec<Vec<u8>> = paths.iter().map(std::fs::read).collect::<Result<_, _>>()?;
        let (mut seq, mut par) = (Vec::new(), Duration::ZERO);
        let (mut fast, mut slow) = (Vec::new(), Vec::new());
        for round in 0..rounds {
            let mut mine = || -> anyhow::Result<()> {
                let (t, wall) = ours(&images, threads)?;
                seq.extend(t);
                par += wall;
                Ok(())
            };
            if round % 2 == 0 {
                mine()?;
                let (f, s) = theirs(python, baseline, threads, &paths)?;
                fast.extend(f);
                slow.extend(s);
            } else {
                let (f, s) = theirs(python, baseline, threads, &paths)?;
                fast.extend(f);
                slow.extend(s);
                mine()?;
            }
        }
        println!("{w}x{h}:");
        let n = (rounds * per_round) as f64;
        let rate = |t: &[Duration]| t.len() as f64 / t.iter().sum::<Duration>().as_secs_f64();
        let ours_rate = summary(
            &format!(
                "rollbox, one at a time ({} on {threads} threads)",
                "images/s"
            ),
            seq,
            n / par.as_secs_f64(),
        );
        let fast_rate = rate(&fast);
        let slow_rate = rate(&slow);
        summary("Qwen2VLImageProcessorFast", fast, fast_rate);
        summary("Qwen2VLImageProcessor", slow, slow_rate);
        println!(
            "  rollbox / fast: {:.1}x images/s; rollbox / slow: {:.1}x",
            ours_rate / fast_rate,
            ours_rate / slow_rate
        );
    }
    Ok(())
}
