//! What the embedded engine's kernels share: run-time CPU feature detection, and the output
//! buffer that candle's pool workers fill one cell each.

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
