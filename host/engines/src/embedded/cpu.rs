//! What the embedded engine's kernels share: run-time CPU feature detection, the output
//! buffer that candle's pool workers fill one cell each, and a vectorised exponential.

use std::sync::atomic::{AtomicU32, Ordering};

/// Whether the CPU has AVX2 and FMA (checked once).
pub(crate) fn has_avx2_fma() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        static FOUND: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
        *FOUND.get_or_init(|| is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma"))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `n` f32 results written concurrently by pool workers, each cell by exactly one of them
/// (relaxed atomics: the pool's barrier orders the writes before [`Cells::into_vec`]).
pub(crate) struct Cells(Vec<AtomicU32>);

impl Cells {
    /// `n` zeros.
    pub(crate) fn new(n: usize) -> Cells {
        Cells((0..n).map(|_| AtomicU32::new(0)).collect())
    }

    /// Write cell `i`.
    pub(crate) fn set(&self, i: usize, v: f32) {
        self.0[i].store(v.to_bits(), Ordering::Relaxed);
    }

    /// The values, once every worker is done.
    pub(crate) fn into_vec(self) -> Vec<f32> {
        self.0
            .into_iter()
            .map(|x| f32::from_bits(x.into_inner()))
            .collect()
    }
}

/// `x[i] = exp(x[i] - max)`: eight values at a time with AVX2 ([`exp8`]), libm for the rest
/// (and everywhere without AVX2).
pub(crate) fn exp_shifted(x: &mut [f32], max: f32) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: AVX2 and FMA were found at run time.
        return unsafe { exp_shifted_avx2(x, max) };
    }
    for v in x {
        *v = (*v - max).exp();
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn exp_shifted_avx2(x: &mut [f32], max: f32) {
    use std::arch::x86_64::*;
    let m = _mm256_set1_ps(max);
    let mut chunks = x.chunks_exact_mut(8);
    for c in &mut chunks {
        // SAFETY: 8 floats, unaligned load and store.
        unsafe {
            let v = _mm256_loadu_ps(c.as_ptr());
            _mm256_storeu_ps(c.as_mut_ptr(), exp8(_mm256_sub_ps(v, m)));
        }
    }
    for v in chunks.into_remainder() {
        *v = (*v - max).exp();
    }
}

/// `e^x` for 8 lanes: `2^n * p(r)` with `n = round(x / ln 2)`, `r = x - n ln 2` (two-part
/// ln 2) and a degree-6 polynomial for `e^r` on `|r| <= ln 2 / 2` (relative error below 2e-7);
/// `x` below -87 gives 0. Meant for `x <= 0` (shifted by a maximum).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
#[inline]
pub(crate) fn exp8(x: std::arch::x86_64::__m256) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let lo = _mm256_set1_ps(-87.0);
    let keep = _mm256_cmp_ps(x, lo, _CMP_GE_OQ);
    let x = _mm256_max_ps(x, lo);
    let n = _mm256_round_ps(
        _mm256_mul_ps(x, _mm256_set1_ps(std::f32::consts::LOG2_E)),
        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC,
    );
    let r = _mm256_fnmadd_ps(
        n,
        _mm256_set1_ps(-2.121_944_4e-4),
        _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693_359_4), x),
    );
    let mut p = _mm256_set1_ps(1.0 / 720.0);
    for c in [1.0 / 120.0, 1.0 / 24.0, 1.0 / 6.0, 0.5, 1.0, 1.0] {
        p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
    }
    let pow2 = _mm256_castsi256_ps(_mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)),
        23,
    ));
    _mm256_and_ps(keep, _mm256_mul_ps(p, pow2))
}

#[cfg(test)]
mod tests {
    #[test]
    fn shifted_exponentials_are_libm_ones_within_3e_7() {
        let mut x: Vec<f32> = (0..1003)
            .map(|i| -((i * 7919 % 10007) as f32) / 97.0)
            .collect();
        x.extend([0.0, -86.9, -87.5, -200.0, -1e-7]);
        let max = 0.25;
        let mut got = x.clone();
        super::exp_shifted(&mut got, max);
        for (&v, &g) in x.iter().zip(&got) {
            let want = f64::from(v - max).exp();
            if v - max < -87.0 {
                assert!(
                    g == 0.0 || (f64::from(g) - want).abs() <= 3e-7 * want,
                    "{v}: {g}"
                );
            } else {
                assert!(
                    (f64::from(g) - want).abs() <= 3e-7 * want,
                    "{v}: {g} vs {want}"
                );
            }
        }
    }
}
