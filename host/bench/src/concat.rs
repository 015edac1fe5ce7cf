//! `rollbox-bench concat`: concat-padded of 512 RLVR-shaped dicts, next to AReaL's
//! `concat_padded_tensors` on the same shapes when torch is there.

use std::path::Path;
use std::time::Instant;

use crate::common::percentile;

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
pub fn run(runs: usize, python: &str, baseline: &Path) -> anyhow::Result<()> {
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
            "baseline skipped: {python} not found (set it up as scripts/fixtures/record_concat_fixture.py says)"
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
