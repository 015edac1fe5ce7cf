//! Token sampling with the logprob of the distribution sampled from.
//!
//! Order of operations, as SGLang applies them: frequency penalty on the raw logits, stop ids
//! masked until `min_new_tokens`, temperature, then top-k and top-p truncation. The reported
//! logprob is the log-softmax of the penalised, temperature-scaled logits at the chosen token
//! (before truncation), which is what SGLang returns and AReaL trains against. Greedy decoding
//! (or temperature 0) takes the argmax and reports the log-softmax of the penalised logits.

use std::collections::HashMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use crate::SamplingParams;

/// Per-sequence sampling state.
pub struct Sampler {
    greedy: bool,
    temperature: f32,
    top_p: f32,
    top_k: usize,
    frequency_penalty: f32,
    min_new_tokens: usize,
    /// Ids that end generation; masked out until `min_new_tokens` tokens exist.
    stop_ids: Vec<u32>,
    counts: HashMap<u32, u32>,
    rng: StdRng,
}

impl Sampler {
    /// A sampler for one request; `stop_ids` are the ids that end it.
    pub fn new(p: &SamplingParams, stop_ids: Vec<u32>) -> Sampler {
        Sampler {
            greedy: p.greedy || p.temperature <= 0.0,
            temperature: p.temperature,
            top_p: p.top_p,
            top_k: p.top_k as usize,
            frequency_penalty: p.frequency_penalty,
            min_new_tokens: p.min_new_tokens as usize,
            stop_ids,
            counts: HashMap::new(),
            rng: match p.seed {
                Some(seed) => StdRng::seed_from_u64(seed),
                None => StdRng::from_os_rng(),
            },
        }
    }

    /// Choose the next token from `logits` (modified in place) given `generated` tokens so far;
    /// returns the token and its logprob.
    pub fn next(&mut self, logits: &mut [f32], generated: usize) -> (u32, f32) {
        let tok = self.choose(logits, generated);
        (tok, log_softmax_at(logits, tok as usize))
    }

    /// [`Sampler::next`] without the logprob: the token, with `logits` left as the
    /// distribution it was drawn from, so `log_softmax_at(logits, tok)` is its logprob.
    pub fn choose(&mut self, logits: &mut [f32], generated: usize) -> u32 {
        if self.frequency_penalty != 0.0 {
            for (&tok, &c) in &self.counts {
                if let Some(l) = logits.get_mut(tok as usize) {
                    *l -= self.frequency_penalty * c as f32;
                }
            }
        }
        if generated < self.min_new_tokens {
            for &id in &self.stop_ids {
                if let Some(l) = logits.get_mut(id as usize) {
                    *l = f32::NEG_INFINITY;
                }
            }
        }
        let tok = if self.greedy {
            super::model::argmax(logits)
        } else {
            let inv_t = 1.0 / self.temperature;
            for l in logits.iter_mut() {
                *l *= inv_t;
            }
            self.draw(logits)
        };
        *self.counts.entry(tok).or_insert(0) += 1;
        tok
    }

    /// Sample from softmax(logits) restricted to top-k and top-p.
    fn draw(&mut self, logits: &[f32]) -> u32 {
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let full = self.top_k >= logits.len() && self.top_p >= 1.0;
        if full {
            let weights: Vec<f32> = logits.iter().map(|&l| (l - max).exp()).collect();
            let total: f32 = weights.iter().sum();
            let mut u = self.rng.random::<f32>() * total;
            for (i, w) in weights.iter().enumerate() {
                if u < *w {
                    return i as u32;
                }
                u -= w;
            }
            return super::model::argmax(logits);
        }
        let mut idx: Vec<u32> = (0..logits.len() as u32).collect();
        let k = self.top_k.clamp(1, logits.len());
        if k < idx.len() {
            idx.select_nth_unstable_by(k - 1, |&a, &b| {
                logits[b as usize].total_cmp(&logits[a as usize])
            });
            idx.truncate(k);
        }
        idx.sort_unstable_by(|&a, &b| logits[b as usize].total_cmp(&logits[a as usize]));
        let probs: Vec<f32> = idx
            .iter()
            .map(|&i| (logits[i as usize] - max).exp())
            .collect();
        let total: f32 = probs.iter().sum();
        // Keep the smallest prefix whose mass reaches top_p (at least one token).
        let mut keep = probs.len();
        if self.top_p < 1.0 {
            let mut acc = 0.0;
            for (n, p) in probs.iter().enumerate() {
                acc += p / total;
                if acc >= self.top_p {
                    keep = n + 1;
                    break;
                }
            }
        }
        let kept: f32 = probs[..keep].iter().sum();
        let mut u = self.rng.random::<f32>() * kept;
        for (i, p) in probs[..keep].iter().enumerate() {
            if u < *p {
                return idx[i];
            }
            u -= p;
        }
        idx[0]
    }
}

/// `log_softmax(logits)[i]`.
pub fn log_softmax_at(logits: &[f32], i: usize) -> f32 {
    let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    (f64::from(logits[i] - max) - exp_sum(logits, max).ln()) as f32
}

/// `sum(exp(l - max))` in f64: f32 exponentials (a few ulp each), added in f64.
fn exp_sum(logits: &[f32], max: f32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    {
        if super::cpu::has_avx2_fma() {
            // SAFETY: AVX2 and FMA were found at run time.
            return unsafe { exp_sum_avx2(logits, max) };
        }
    }
    logits.iter().map(|&l| f64::from((l - max).exp())).sum()
}

/// [`exp_sum`] eight lanes at a time ([`super::cpu::exp8`]); each 8-lane f32 partial sum is
/// widened to f64 every 64 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_sum_avx2(logits: &[f32], max: f32) -> f64 {
    use std::arch::x86_64::*;
    let maxv = _mm256_set1_ps(max);
    let mut total = 0f64;
    let chunks = logits.chunks_exact(64);
    let rest = chunks.remainder();
    for chunk in chunks {
        let mut part = _mm256_setzero_ps();
        for j in 0..8 {
            // SAFETY: 8 floats at j * 8 within the 64-value chunk.
            let l = unsafe { _mm256_loadu_ps(chunk.as_ptr().add(j * 8)) };
            part = _mm256_add_ps(part, super::cpu::exp8(_mm256_sub_ps(l, maxv)));
        }
        let mut lanes = [0f32; 8];
        // SAFETY: 8 floats.
        unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), part) };
        total += lanes.iter().map(|&v| f64::from(v)).sum::<f64>();
    }
    total
        + rest
            .iter()
            .map(|&l| f64::from((l - max).exp()))
            .sum::<f64>()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params() -> SamplingParams {
        SamplingParams {
            seed: Some(7),
            ..SamplingParams::default()
        }
    }

    #[test]
    fn the_simd_exponential_sum_is_the_libm_one() {
        let mut state = 5u32;
        let logits: Vec<f32> = (0..49_159)
            .map(|_| {
                state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                ((state >> 8) % 40_000) as f32 / 1000.0 - 30.0
            })
            .collect();
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let want: f64 = logits.iter().map(|&l| f64::from(l - max).exp()).sum();
        let got = exp_sum(&logits, max);
        assert!((got - want).abs() <= 1e-6 * want, "{got} vs {want}");
        // Far below the max the terms vanish; the max itself contributes exactly 1.
        let spread = [0.0f32, -100.0, -200.0, -87.5, -86.0];
        let got = exp_sum(&spread.repeat(16), 0.0);
        let want: f64 = spread.repeat(16).iter().map(|&l| f64::from(l).exp()).sum();
        assert!((got - want).abs() <= 1e-6 * want, "{got} vs {want}");
    }

    #[test]
    fn greedy_takes_argmax_with_its_logprob() {
        let p = SamplingParams {
            greedy: true,
            ..params()
        };
        let mut s = Sampler::new(&p, vec![]);
        let mut logits = vec![0.0, 2.0, 1.0];
        let (t, lp) = s.next(&mut logits, 0);
        assert_eq!(t, 1);
        let expected = 2.0 - (1f64 + 2f64.exp() + 1f64.exp()).ln();
        assert!((f64::from(lp) - expected).abs() < 1e-6);
    }

    #[test]
    fn seeds_reproduce_and_top_k_one_is_greedy() {
        let logits: Vec<f32> = (0..50).map(|i| (i as f32 * 0.37).sin()).collect();
        let run = |p: &SamplingParams| {
            let mut s = Sampler::new(p, vec![]);
            (0..20)
                .map(|n| s.next(&mut logits.clone(), n).0)
                .collect::<Vec<_>>()
        };
        assert_eq!(run(&params()), run(&params()));
        let other = SamplingParams {
            seed: Some(8),
            ..params()
        };
        assert_ne!(run(&params()), run(&other));
        let k1 = SamplingParams {
            top_k: 1,
            ..params()
        };
        assert!(
            run(&k1)
                .iter()
                .all(|&t| t == super::super::model::argmax(&logits))
        );
    }

    #[test]
    fn min_new_tokens_masks_stop_ids_and_penalty_discourages_repeats() {
        let p = SamplingParams {
            greedy: true,
            min_new_tokens: 2,
            ..params()
        };
        let mut s = Sampler::new(&p, vec![0]);
        let (t, _) = s.next(&mut [5.0, 1.0, 0.5], 0);
        assert_eq!(t, 1, "stop id 0 is masked before min_new_tokens");
        let (t, _) = s.next(&mut [5.0, 1.0, 0.5], 2);
        assert_eq!(t, 0);
        let p = SamplingParams {
            greedy: true,
            frequency_penalty: 1.0,
            ..params()
        };
        let mut s = Sampler::new(&p, vec![]);
        let picks: Vec<u32> = (0..3).map(|n| s.next(&mut [2.0, 1.5, 0.0], n).0).collect();
        assert_eq!(picks, vec![0, 1, 0]);
    }

    #[test]
    fn top_p_keeps_the_nucleus() {
        let p = SamplingParams {
            top_p: 0.5,
            ..params()
        };
        let mut s = Sampler::new(&p, vec![]);
        // Token 0 holds > 50 % of the mass, so it is the whole nucleus.
        for n in 0..20 {
            assert_eq!(s.next(&mut [3.0, 1.0, 1.0, 0.0], n).0, 0);
        }
    }
}
