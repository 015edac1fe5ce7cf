//! The resize passes for int16 weights (ATen's), with SSE2's `pmaddwd`: two taps of 16-bit
//! pixel × 16-bit weight products summed into each 32-bit lane. The sums are the scalar
//! passes' exactly (integer arithmetic that cannot overflow: the scalar passes accumulate the
//! same products in `i32`), so the bytes are the same. x86-64 always has SSE2, so the callers'
//! `unsafe` (calling a `target_feature` function) always holds.

use std::arch::x86_64::{
    __m128i, _mm_add_epi32, _mm_cvtsi32_si128, _mm_cvtsi64_si128, _mm_cvtsi128_si32,
    _mm_madd_epi16, _mm_packs_epi32, _mm_packus_epi16, _mm_set1_epi32, _mm_setzero_si128,
    _mm_sra_epi32, _mm_unpackhi_epi16, _mm_unpacklo_epi8, _mm_unpacklo_epi16,
};

use super::Axis;
use crate::Rgb;

/// Two 16-bit weights in one 32-bit word, the first in the low half (`pmaddwd`'s order).
fn pair(w0: i32, w1: i32) -> i32 {
    (w1 << 16) | (w0 & 0xffff)
}

/// Four 32-bit sums to bytes: `sum >> precision`, clamped to 0..=255 (as `to_u8`).
#[target_feature(enable = "sse2")]
fn to_bytes(acc: __m128i, shift: __m128i) -> [u8; 4] {
    let s = _mm_sra_epi32(acc, shift);
    let w = _mm_packs_epi32(s, s);
    (_mm_cvtsi128_si32(_mm_packus_epi16(w, w)) as u32).to_le_bytes()
}

/// Whether every weight of `axis` fits 16 bits: ATen's always do (their precision is chosen so);
/// Pillow's 22-bit ones only on large downscales, where this path gives the same bytes too.
pub(super) fn fits(axis: &Axis) -> bool {
    axis.weights.iter().all(|&w| i16::try_from(w).is_ok())
}

#[target_feature(enable = "sse2")]
pub(super) fn horizontal(src: &Rgb, axis: &Axis, out_w: usize) -> Rgb {
    let mut data = vec![0u8; src.height * out_w * 3];
    let shift = _mm_cvtsi32_si128(axis.precision as i32);
    let half = _mm_set1_epi32(1 << (axis.precision - 1));
    // Per output pixel, its weights in pairs.
    let pairs = axis.ksize.div_ceil(2);
    let mut packed = vec![0i32; out_w * pairs];
    for (x, &(_, n)) in axis.bounds.iter().enumerate() {
        let k = &axis.weights[x * axis.ksize..x * axis.ksize + n];
        for (j, p) in packed[x * pairs..(x + 1) * pairs].iter_mut().enumerate() {
            let w = |i: usize| k.get(i).copied().unwrap_or(0);
            *p = pair(w(2 * j), w(2 * j + 1));
        }
    }
    // A row as 16-bit lanes `[r, g, b, 0]` per pixel, one zero pixel after the last (the
    // partner of an odd tap count, weighted 0).
    let mut wide = vec![0i64; src.width + 1];
    for (row, out) in src
        .data
        .chunks_exact(src.width * 3)
        .zip(data.chunks_exact_mut(out_w * 3))
    {
        for (w, p) in wide.iter_mut().zip(row.chunks_exact(3)) {
            *w = i64::from(p[0]) | i64::from(p[1]) << 16 | i64::from(p[2]) << 32;
        }
        for ((&(xmin, n), ws), px) in axis
            .bounds
            .iter()
            .zip(packed.chunks_exact(pairs))
            .zip(out.chunks_exact_mut(3))
        {
            let mut acc = half;
            for (j, &w) in ws[..n.div_ceil(2)].iter().enumerate() {
                let a = _mm_cvtsi64_si128(wide[xmin + 2 * j]);
                let b = _mm_cvtsi64_si128(wide[xmin + 2 * j + 1]);
                let taps = _mm_unpacklo_epi16(a, b);
                acc = _mm_add_epi32(acc, _mm_madd_epi16(taps, _mm_set1_epi32(w)));
            }
            px.copy_from_slice(&to_bytes(acc, shift)[..3]);
        }
    }
    Rgb {
        width: out_w,
        height: src.height,
        data,
    }
}

/// Eight bytes of `row` from `at` as 16-bit lanes, zero past its end.
#[target_feature(enable = "sse2")]
fn eight(row: &[u8], at: usize) -> __m128i {
    let mut b = [0u8; 8];
    let end = (at + 8).min(row.len());
    b[..end - at].copy_from_slice(&row[at..end]);
    _mm_unpacklo_epi8(
        _mm_cvtsi64_si128(i64::from_le_bytes(b)),
        _mm_setzero_si128(),
    )
}

#[target_feature(enable = "sse2")]
pub(super) fn vertical(src: &Rgb, axis: &Axis, out_h: usize) -> Rgb {
    let stride = src.width * 3;
    let mut data = vec![0u8; out_h * stride];
    let shift = _mm_cvtsi32_si128(axis.precision as i32);
    let half = 1i32 << (axis.precision - 1);
    let blocks = stride.div_ceil(8);
    let mut acc = vec![[_mm_set1_epi32(half); 2]; blocks];
    for (yy, &(ymin, n)) in axis.bounds.iter().enumerate() {
        let k = &axis.weights[yy * axis.ksize..yy * axis.ksize + n];
        acc.fill([_mm_set1_epi32(half); 2]);
        for j in 0..n.div_ceil(2) {
            let w = _mm_set1_epi32(pair(k[2 * j], k.get(2 * j + 1).copied().unwrap_or(0)));
            let a = &src.data[(ymin + 2 * j) * stride..(ymin + 2 * j + 1) * stride];
            // The partner row of an odd tap count is weighted 0: any row will do.
            let b_row = (ymin + 2 * j + 1).min(src.height - 1);
            let b = &src.data[b_row * stride..(b_row + 1) * stride];
            for (i, acc) in acc.iter_mut().enumerate() {
                let (a8, b8) = (eight(a, i * 8), eight(b, i * 8));
                acc[0] = _mm_add_epi32(acc[0], _mm_madd_epi16(_mm_unpacklo_epi16(a8, b8), w));
                acc[1] = _mm_add_epi32(acc[1], _mm_madd_epi16(_mm_unpackhi_epi16(a8, b8), w));
            }
        }
        let out = &mut data[yy * stride..(yy + 1) * stride];
        for (i, acc) in acc.iter().enumerate() {
            let mut bytes = [0u8; 8];
            bytes[..4].copy_from_slice(&to_bytes(acc[0], shift));
            bytes[4..].copy_from_slice(&to_bytes(acc[1], shift));
            let at = i * 8;
            let end = (at + 8).min(stride);
            out[at..end].copy_from_slice(&bytes[..end - at]);
        }
    }
    Rgb {
        width: src.width,
        height: out_h,
        data,
    }
}
