//! The resize passes for int16 weights (ATen's), with SSE2's `pmaddwd`: two taps of 16-bit
//! pixel × 16-bit weight products summed into each 32-bit lane. The sums are the scalar
//! passes' exactly (integer arithmetic that cannot overflow: the scalar passes accumulate the
//! same products in `i32`), so the bytes are the same. x86-64 always has SSE2, so the callers'
//! `unsafe` (calling a `target_feature` function) always holds.

use std::arch::x86_64::{
    __m128i, _mm_add_epi32, _mm_cvtsi32_si128, _mm_cvtsi128_si32, _mm_loadl_epi64, _mm_loadu_si128,
    _mm_madd_epi16, _mm_packs_epi32, _mm_packus_epi16, _mm_set1_epi32, _mm_setzero_si128,
    _mm_sra_epi32, _mm_srli_si128, _mm_storeu_si128, _mm_unpackhi_epi8, _mm_unpackhi_epi16,
    _mm_unpacklo_epi8, _mm_unpacklo_epi16,
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

/// The horizontal pass's layout, shared by the SSE2 and AVX2 passes: every output pixel reads
/// the same number of tap pairs, its own padded with zero weights (a zero product leaves the sum
/// as it is).
pub(super) struct Plan {
    /// Tap pairs per output pixel.
    pub(super) pairs: usize,
    /// `pairs` weight pairs per output pixel (see [`pair`]).
    pub(super) packed: Vec<i32>,
    /// The first input pixel of each output pixel.
    pub(super) starts: Vec<usize>,
}

impl Plan {
    pub(super) fn new(axis: &Axis) -> Plan {
        let pairs = axis
            .bounds
            .iter()
            .map(|&(_, n)| n.div_ceil(2))
            .max()
            .unwrap_or(0)
            .max(1);
        let mut packed = vec![0i32; axis.bounds.len() * pairs];
        for ((&(_, n), k), p) in axis
            .bounds
            .iter()
            .zip(axis.weights.chunks_exact(axis.ksize))
            .zip(packed.chunks_exact_mut(pairs))
        {
            let w = |i: usize| if i < n { k[i] } else { 0 };
            for (j, p) in p.iter_mut().enumerate() {
                *p = pair(w(2 * j), w(2 * j + 1));
            }
        }
        let starts = axis.bounds.iter().map(|&(xmin, _)| xmin).collect();
        Plan {
            pairs,
            packed,
            starts,
        }
    }

    /// Interleaved pixels for one input row of `width` pixels: room for every pair read.
    #[target_feature(enable = "sse2")]
    pub(super) fn taps(&self, width: usize) -> Vec<__m128i> {
        vec![_mm_setzero_si128(); width + 2 * self.pairs]
    }
}

/// Each pixel of `row` interleaved with the next as 16-bit lanes, `[r, r', g, g', b, b', *, *]`,
/// into `taps`: one `pmaddwd` operand per tap pair (the fourth sum is never read). A tap past a
/// pixel's own (the partner of an odd count, the padded pairs) is weighted 0, so whatever pixel
/// it holds adds nothing. `padded` is a scratch buffer of the row's length plus 16.
#[target_feature(enable = "sse2")]
pub(super) fn interleave(row: &[u8], padded: &mut [u8], taps: &mut [__m128i]) {
    let zero = _mm_setzero_si128();
    let padded = &mut padded[..row.len() + 16];
    padded[..row.len()].copy_from_slice(row);
    for (t, p) in taps[..row.len() / 3].iter_mut().zip(padded.chunks_exact(3)) {
        // SAFETY: `p` starts at most `row.len() - 3` into `padded` (one chunk per pixel), which
        // has 16 bytes more, so the 8 read are inside it; `loadl` needs no alignment.
        let v = unsafe { _mm_loadl_epi64(p.as_ptr().cast()) };
        let lanes = _mm_unpacklo_epi8(v, zero);
        *t = _mm_unpacklo_epi16(lanes, _mm_srli_si128::<6>(lanes));
    }
}

#[target_feature(enable = "sse2")]
pub(super) fn horizontal(src: &Rgb, axis: &Axis, out_w: usize) -> Rgb {
    let mut data = vec![0u8; src.height * out_w * 3];
    let plan = Plan::new(axis);
    let stride = src.width * 3;
    let mut padded = vec![0u8; stride + 16];
    let mut taps = plan.taps(src.width);
    for (row, out) in src
        .data
        .chunks_exact(stride)
        .zip(data.chunks_exact_mut(out_w * 3))
    {
        interleave(row, &mut padded, &mut taps);
        resample_row(&plan, &taps, axis.precision, out);
    }
    Rgb {
        width: out_w,
        height: src.height,
        data,
    }
}

/// One output row of the horizontal pass from its input row's interleaved pixels.
#[target_feature(enable = "sse2")]
pub(super) fn resample_row(plan: &Plan, taps: &[__m128i], precision: u32, out: &mut [u8]) {
    let row = Row {
        taps,
        starts: &plan.starts,
        packed: &plan.packed,
        half: _mm_set1_epi32(1 << (precision - 1)),
        shift: _mm_cvtsi32_si128(precision as i32),
    };
    // The common counts as constants, so the tap loop unrolls.
    match plan.pairs {
        1 => row.resample::<1>(out, 1),
        2 => row.resample::<2>(out, 2),
        3 => row.resample::<3>(out, 3),
        4 => row.resample::<4>(out, 4),
        n => row.resample::<0>(out, n),
    }
}

/// One row of the horizontal pass: its interleaved pixel pairs, and per output pixel its
/// first input pixel and its weight pairs.
struct Row<'a> {
    taps: &'a [__m128i],
    starts: &'a [usize],
    packed: &'a [i32],
    half: __m128i,
    shift: __m128i,
}

impl Row<'_> {
    /// `pairs` tap pairs per output pixel: `P` when it is not 0.
    #[target_feature(enable = "sse2")]
    fn resample<const P: usize>(&self, out: &mut [u8], pairs: usize) {
        let pairs = if P == 0 { pairs } else { P };
        for (x, (&start, ws)) in self
            .starts
            .iter()
            .zip(self.packed.chunks_exact(pairs))
            .enumerate()
        {
            let t = &self.taps[start..start + 2 * pairs - 1];
            let mut acc = self.half;
            for (j, &w) in ws.iter().enumerate() {
                acc = _mm_add_epi32(acc, _mm_madd_epi16(t[2 * j], _mm_set1_epi32(w)));
            }
            put_pixel(out, x, to_bytes(acc, self.shift));
        }
    }
}

/// Pixel `x` of an output row: four bytes where the row has room (the fourth is the next
/// pixel's, written after), else three.
pub(super) fn put_pixel(out: &mut [u8], x: usize, px: [u8; 4]) {
    match out[3 * x..].first_chunk_mut::<4>() {
        Some(o) => *o = px,
        None => out[3 * x..3 * x + 3].copy_from_slice(&px[..3]),
    }
}

/// Sixteen bytes of `row` from `at`, zero past its end.
#[target_feature(enable = "sse2")]
fn sixteen(row: &[u8], at: usize) -> __m128i {
    match row.get(at..at + 16) {
        // SAFETY: the slice holds the 16 bytes read; `loadu` has no alignment requirement.
        Some(b) => unsafe { _mm_loadu_si128(b.as_ptr().cast()) },
        None => {
            let mut b = [0u8; 16];
            let end = row.len().min(at + 16);
            b[..end - at].copy_from_slice(&row[at..end]);
            // SAFETY: as above, on the local copy.
            unsafe { _mm_loadu_si128(b.as_ptr().cast()) }
        }
    }
}

/// The vertical pass's tap pairs for one output row whose `n` weights `k` start at input row
/// `ymin`: each pair's weights (see [`pair`]) and its two input rows. The partner row of an odd
/// tap count is weighted 0: any row will do, so it is the next one or the last.
pub(super) fn row_pairs(
    k: &[i32],
    ymin: usize,
    n: usize,
    height: usize,
) -> impl Iterator<Item = (i32, usize, usize)> + '_ {
    (0..n.div_ceil(2)).map(move |j| {
        let w1 = if 2 * j + 1 < n { k[2 * j + 1] } else { 0 };
        let a = ymin + 2 * j;
        (pair(k[2 * j], w1), a, (a + 1).min(height - 1))
    })
}

/// One tap pair of the vertical pass: the pair of 16-bit weights and the two source rows.
struct Taps<'a> {
    weights: __m128i,
    a: &'a [u8],
    b: &'a [u8],
}

#[target_feature(enable = "sse2")]
pub(super) fn vertical(src: &Rgb, axis: &Axis, out_h: usize) -> Rgb {
    let stride = src.width * 3;
    let mut data = vec![0u8; out_h * stride];
    let shift = _mm_cvtsi32_si128(axis.precision as i32);
    let half = _mm_set1_epi32(1 << (axis.precision - 1));
    let zero = _mm_setzero_si128();
    let row = |y: usize| &src.data[y * stride..(y + 1) * stride];
    let mut taps = Vec::with_capacity(axis.ksize.div_ceil(2));
    for ((&(ymin, n), k), out) in axis
        .bounds
        .iter()
        .zip(axis.weights.chunks_exact(axis.ksize))
        .zip(data.chunks_exact_mut(stride))
    {
        taps.clear();
        taps.extend(row_pairs(k, ymin, n, src.height).map(|(w, a, b)| Taps {
            weights: _mm_set1_epi32(w),
            a: row(a),
            b: row(b),
        }));
        // Sixteen output bytes at a time, their sums in four registers of four lanes.
        for (i, out) in out.chunks_mut(16).enumerate() {
            let at = i * 16;
            let mut acc = [half; 4];
            for t in &taps {
                let (a, b) = (sixteen(t.a, at), sixteen(t.b, at));
                let (a_lo, a_hi) = (_mm_unpacklo_epi8(a, zero), _mm_unpackhi_epi8(a, zero));
                let (b_lo, b_hi) = (_mm_unpacklo_epi8(b, zero), _mm_unpackhi_epi8(b, zero));
                let w = t.weights;
                acc[0] = _mm_add_epi32(acc[0], _mm_madd_epi16(_mm_unpacklo_epi16(a_lo, b_lo), w));
                acc[1] = _mm_add_epi32(acc[1], _mm_madd_epi16(_mm_unpackhi_epi16(a_lo, b_lo), w));
                acc[2] = _mm_add_epi32(acc[2], _mm_madd_epi16(_mm_unpacklo_epi16(a_hi, b_hi), w));
                acc[3] = _mm_add_epi32(acc[3], _mm_madd_epi16(_mm_unpackhi_epi16(a_hi, b_hi), w));
            }
            let acc = acc.map(|v| _mm_sra_epi32(v, shift));
            // Saturating packs: to 16 bits, then to 0..=255 (as `to_u8`).
            let bytes = _mm_packus_epi16(
                _mm_packs_epi32(acc[0], acc[1]),
                _mm_packs_epi32(acc[2], acc[3]),
            );
            if out.len() == 16 {
                // SAFETY: `out` holds the 16 bytes written; `storeu` has no alignment requirement.
                unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), bytes) };
            } else {
                let mut b = [0u8; 16];
                // SAFETY: as above, on the local buffer.
                unsafe { _mm_storeu_si128(b.as_mut_ptr().cast(), bytes) };
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
