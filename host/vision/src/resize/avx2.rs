//! The int16-weight resize passes with AVX2, where the CPU has it (checked at run time): the
//! SSE2 passes' arithmetic on 256-bit registers. The horizontal pass resamples two rows at once
//! (the same weights, one row per 128-bit half); the vertical pass 32 bytes of a row at once.
//! The integer sums are the same as the scalar passes', so the bytes are too.

use std::arch::x86_64::{
    __m128i, __m256i, _mm_cvtsi32_si128, _mm_cvtsi128_si32, _mm256_add_epi32,
    _mm256_castsi256_si128, _mm256_extracti128_si256, _mm256_loadu_si256, _mm256_madd_epi16,
    _mm256_packs_epi32, _mm256_packus_epi16, _mm256_set_m128i, _mm256_set1_epi32,
    _mm256_setzero_si256, _mm256_sra_epi32, _mm256_storeu_si256, _mm256_unpackhi_epi8,
    _mm256_unpackhi_epi16, _mm256_unpacklo_epi8, _mm256_unpacklo_epi16,
};

use super::Axis;
use super::sse2::{Plan, interleave, put_pixel, resample_row, row_pairs};
use crate::Rgb;

/// Whether this CPU runs the AVX2 passes.
pub(super) fn available() -> bool {
    std::arch::is_x86_feature_detected!("avx2")
}

/// Eight 32-bit sums to bytes, `sum >> precision` clamped to 0..=255 (as `to_u8`): the low
/// four lanes' in the first word, the high four's in the second.
#[target_feature(enable = "avx2")]
fn to_bytes(acc: __m256i, shift: __m128i) -> ([u8; 4], [u8; 4]) {
    let s = _mm256_sra_epi32(acc, shift);
    let w = _mm256_packs_epi32(s, s);
    let b = _mm256_packus_epi16(w, w);
    let word = |v: __m128i| (_mm_cvtsi128_si32(v) as u32).to_le_bytes();
    (
        word(_mm256_castsi256_si128(b)),
        word(_mm256_extracti128_si256::<1>(b)),
    )
}

/// # Safety
///
/// The CPU must have AVX2 ([`available`]).
#[target_feature(enable = "avx2")]
pub(super) fn horizontal(src: &Rgb, axis: &Axis, out_w: usize) -> Rgb {
    let mut data = vec![0u8; src.height * out_w * 3];
    let plan = Plan::new(axis);
    let stride = src.width * 3;
    let mut padded = vec![0u8; stride + 16];
    let (mut taps0, mut taps1) = (plan.taps(src.width), plan.taps(src.width));
    let rows = Rows {
        plan: &plan,
        half: _mm256_set1_epi32(1 << (axis.precision - 1)),
        shift: _mm_cvtsi32_si128(axis.precision as i32),
    };
    let mut ins = src.data.chunks_exact(2 * stride);
    let mut outs = data.chunks_exact_mut(2 * out_w * 3);
    for (two, out) in (&mut ins).zip(&mut outs) {
        let (row0, row1) = two.split_at(stride);
        let (out0, out1) = out.split_at_mut(out_w * 3);
        interleave(row0, &mut padded, &mut taps0);
        interleave(row1, &mut padded, &mut taps1);
        // The common counts as constants, so the tap loop unrolls.
        match plan.pairs {
            1 => rows.resample::<1>(&taps0, &taps1, out0, out1),
            2 => rows.resample::<2>(&taps0, &taps1, out0, out1),
            3 => rows.resample::<3>(&taps0, &taps1, out0, out1),
            4 => rows.resample::<4>(&taps0, &taps1, out0, out1),
            _ => rows.resample::<0>(&taps0, &taps1, out0, out1),
        }
    }
    // An odd last row on its own.
    if !ins.remainder().is_empty() {
        interleave(ins.remainder(), &mut padded, &mut taps0);
        resample_row(&plan, &taps0, axis.precision, outs.into_remainder());
    }
    Rgb {
        width: out_w,
        height: src.height,
        data,
    }
}

/// Two rows of the horizontal pass, resampled with the same weights.
struct Rows<'a> {
    plan: &'a Plan,
    half: __m256i,
    shift: __m128i,
}

impl Rows<'_> {
    /// `P` tap pairs per output pixel (`plan.pairs` when `P` is 0).
    #[target_feature(enable = "avx2")]
    fn resample<const P: usize>(
        &self,
        taps0: &[__m128i],
        taps1: &[__m128i],
        out0: &mut [u8],
        out1: &mut [u8],
    ) {
        let pairs = if P == 0 { self.plan.pairs } else { P };
        for (x, (&start, ws)) in self
            .plan
            .starts
            .iter()
            .zip(self.plan.packed.chunks_exact(pairs))
            .enumerate()
        {
            let (t0, t1) = (
                &taps0[start..start + 2 * pairs - 1],
                &taps1[start..start + 2 * pairs - 1],
            );
            let mut acc = self.half;
            for (j, &w) in ws.iter().enumerate() {
                let t = _mm256_set_m128i(t1[2 * j], t0[2 * j]);
                acc = _mm256_add_epi32(acc, _mm256_madd_epi16(t, _mm256_set1_epi32(w)));
            }
            let (px0, px1) = to_bytes(acc, self.shift);
            put_pixel(out0, x, px0);
            put_pixel(out1, x, px1);
        }
    }
}

/// Thirty-two bytes of `row` from `at`, zero past its end.
#[target_feature(enable = "avx2")]
fn thirty_two(row: &[u8], at: usize) -> __m256i {
    match row.get(at..at + 32) {
        // SAFETY: the slice holds the 32 bytes read; `loadu` has no alignment requirement.
        Some(b) => unsafe { _mm256_loadu_si256(b.as_ptr().cast()) },
        None => {
            let mut b = [0u8; 32];
            let end = row.len().min(at + 32);
            b[..end - at].copy_from_slice(&row[at..end]);
            // SAFETY: as above, on the local copy.
            unsafe { _mm256_loadu_si256(b.as_ptr().cast()) }
        }
    }
}

/// # Safety
///
/// The CPU must have AVX2 ([`available`]).
#[target_feature(enable = "avx2")]
pub(super) fn vertical(src: &Rgb, axis: &Axis, out_h: usize) -> Rgb {
    let stride = src.width * 3;
    let mut data = vec![0u8; out_h * stride];
    let shift = _mm_cvtsi32_si128(axis.precision as i32);
    let half = _mm256_set1_epi32(1 << (axis.precision - 1));
    let zero = _mm256_setzero_si256();
    let row = |y: usize| &src.data[y * stride..(y + 1) * stride];
    let mut taps: Vec<(__m256i, &[u8], &[u8])> = Vec::with_capacity(axis.ksize.div_ceil(2));
    for ((&(ymin, n), k), out) in axis
        .bounds
        .iter()
        .zip(axis.weights.chunks_exact(axis.ksize))
        .zip(data.chunks_exact_mut(stride))
    {
        taps.clear();
        taps.extend(
            row_pairs(k, ymin, n, src.height)
                .map(|(w, a, b)| (_mm256_set1_epi32(w), row(a), row(b))),
        );
        // Thirty-two output bytes at a time. The unpacks and packs work within each 128-bit
        // half, so the packs put the bytes back in their order.
        for (i, out) in out.chunks_mut(32).enumerate() {
            let at = i * 32;
            let mut acc = [half; 4];
            for &(w, a, b) in &taps {
                let (a, b) = (thirty_two(a, at), thirty_two(b, at));
                let (a_lo, a_hi) = (_mm256_unpacklo_epi8(a, zero), _mm256_unpackhi_epi8(a, zero));
                let (b_lo, b_hi) = (_mm256_unpacklo_epi8(b, zero), _mm256_unpackhi_epi8(b, zero));
                let lanes = [
                    _mm256_unpacklo_epi16(a_lo, b_lo),
                    _mm256_unpackhi_epi16(a_lo, b_lo),
                    _mm256_unpacklo_epi16(a_hi, b_hi),
                    _mm256_unpackhi_epi16(a_hi, b_hi),
                ];
                for (acc, lanes) in acc.iter_mut().zip(lanes) {
                    *acc = _mm256_add_epi32(*acc, _mm256_madd_epi16(lanes, w));
                }
            }
            let acc = acc.map(|v| _mm256_sra_epi32(v, shift));
            let bytes = _mm256_packus_epi16(
                _mm256_packs_epi32(acc[0], acc[1]),
                _mm256_packs_epi32(acc[2], acc[3]),
            );
            if out.len() == 32 {
                // SAFETY: `out` holds the 32 bytes written; `storeu` has no alignment requirement.
                unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), bytes) };
            } else {
                let mut b = [0u8; 32];
                // SAFETY: as above, on the local buffer.
                unsafe { _mm256_storeu_si256(b.as_mut_ptr().cast(), bytes) };
                out.copy_from_slice(&b[..out.len()]);
            }
        }
    }
    Rgb {
        width: src.width,
        height: out_h,
        data,
    }
}
