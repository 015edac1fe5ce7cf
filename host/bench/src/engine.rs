//! `rollbox-bench engine`: the embedded engine's prefill and decode tokens/s at several thread
//! counts, one sequence and 8 concurrent sequences, next to llama.cpp on the same file.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::bail;
use rollbox_engines::{GenerateRequest, InferenceBackend};

use crate::common::require;

/// Runs `engine-one` per (weights, threads) in a child process, then the baseline.
pub fn run(
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
                .args(["engine-one", "--model", model, "--weights", w])
                .env("CANDLE_NUM_THREADS", t.to_string())
                .env("RAYON_NUM_THREADS", t.to_string())
                .status()?;
            if !status.success() {
                bail!("engine-one ({w}, {t} threads) failed: {status}");
            }
        }
    }
    if !Path::new(python).exists() {
        println!(
            "baseline skipped: {python} not found (see scripts/fixtures/record_embedded_fixture.py)"
        );
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

pub async fn one(model: &str, weights: &str) -> anyhow::Result<()> {
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
