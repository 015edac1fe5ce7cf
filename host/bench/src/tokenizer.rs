//! `rollbox-bench tokenizer`: encode throughput and chat-template + encode latency (p50), next
//! to transformers.

use std::path::Path;
use std::time::Instant;

use crate::common::{percentile, require};

/// Encode throughput and chat-template latency of the host tokenizer.
pub fn run(model: &Path, iterations: usize, baseline: &Path) -> anyhow::Result<()> {
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
