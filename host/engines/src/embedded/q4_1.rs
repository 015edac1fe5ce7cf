//! Q4_1 × Q8_1 and Q8_0 × Q8_1 matrix kernels (AVX2 + FMA, with a portable fallback).
//!
//! candle 0.11 multiplies Q4_1 weights with its generic scalar loop. Here activations are
//! quantized per 32-value block to 8 bits (`d`, `s = d * sum(q)`, as llama.cpp's Q8_1) and each
//! weight block adds `d_w * d_a * sum(q_w q_a) + m_w * s_a`.
//!
//! Q4_1 weights are repacked at load into groups of 8 rows ([`Group`]): one 256-bit register
//! holds 4 nibble bytes of each of the 8 rows, so `maddubs` against a broadcast 4-byte slice of
//! the activations yields partial sums for 8 output rows at once. A block's 32-term integer
//! dot products for the 8 rows are summed exactly in 16-bit lanes (at most 8 × 3,840 in
//! magnitude), scaled once per block for all 8 rows, and never need a horizontal sum: about
//! half the instructions per (row, block) of the one-row-at-a-time layout llama.cpp's
//! `ggml_vec_dot_q4_1_q8_1` uses. For a batch (batched decode) each unpacked group serves up
//! to [`LANES`] activation rows. Per-row results do not depend on the batch: every lane runs
//! the one-row operations in the same order, and the scalar fallback performs the same
//! rounding steps (fused multiply-adds included), so it gives the same bits.

use super::cpu::{Cells, has_avx2_fma as has_avx2};

use half::f16;

const QK: usize = 32;

/// One Q8_1 block of activations.
#[derive(Clone, Copy)]
struct Act {
    d: f32,
    s: f32,
    qs: [i8; 32],
}

/// Eight rows' Q8_0 blocks at one block index, interleaved as in [`Group`]:
/// `qs[c][4 * r..4 * r + 4]` are values `4c..4c + 4` of row `r`.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Group8 {
    d: [f32; 8],
    qs: [[i8; 32]; 8],
}

/// Eight rows' Q4_1 blocks at one block index, interleaved: `qs[c][4 * r..4 * r + 4]` are
/// bytes `4c..4c + 4` of row `r`'s nibbles (low nibble: value `4c + t`, high nibble: value
/// `16 + 4c + t`), so each 32-bit lane of a register belongs to one row.
#[derive(Clone, Copy)]
#[repr(C, align(32))]
struct Group {
    d: [f32; 8],
    m: [f32; 8],
    qs: [[u8; 32]; 4],
}

impl Group {
    /// Rows padded with zero blocks (`d = m = 0`, so they add nothing).
    const ZERO: Group = Group {
        d: [0.0; 8],
        m: [0.0; 8],
        qs: [[0; 32]; 4],
    };
}

enum Blocks {
    /// `ceil(n / 8)` row groups of `k / 32` groups each; the last group is zero-padded.
    Q4_1(Vec<Group>),
    /// The same layout for Q8_0.
    Q8_0(Vec<Group8>),
}

/// A Q4_1 or Q8_0 weight matrix for the SIMD kernels `[n, k]` (row-major, `k / 32` blocks per row).
pub struct QuantMatrix {
    n: usize,
    k: usize,
    blocks: Blocks,
}

impl QuantMatrix {
    /// From GGUF Q4_1 bytes (20 bytes per block: f16 d, f16 m, 16 bytes of nibbles) of an
    /// `[n, k]` matrix.
    pub fn from_bytes(bytes: &[u8], n: usize, k: usize) -> Option<QuantMatrix> {
        if !k.is_multiple_of(QK) || bytes.len() != n * (k / QK) * 20 {
            return None;
        }
        let kb = k / QK;
        let mut groups = vec![Group::ZERO; n.div_ceil(8) * kb];
        for (i, b) in bytes.chunks_exact(20).enumerate() {
            let (row, blk) = (i / kb, i % kb);
            let g = &mut groups[(row / 8) * kb + blk];
            let r = row % 8;
            g.d[r] = f16::from_le_bytes([b[0], b[1]]).to_f32();
            g.m[r] = f16::from_le_bytes([b[2], b[3]]).to_f32();
            for (c, lanes) in g.qs.iter_mut().enumerate() {
                lanes[4 * r..4 * r + 4].copy_from_slice(&b[4 + 4 * c..8 + 4 * c]);
            }
        }
        Some(QuantMatrix {
            n,
            k,
            blocks: Blocks::Q4_1(groups),
        })
    }

    /// From GGUF Q8_0 bytes (34 bytes per block: f16 d, 32 signed bytes).
    pub fn from_q8_0_bytes(bytes: &[u8], n: usize, k: usize) -> Option<QuantMatrix> {
        if !k.is_multiple_of(QK) || bytes.len() != n * (k / QK) * 34 {
            return None;
        }
        let kb = k / QK;
        let zero = Group8 {
            d: [0.0; 8],
            qs: [[0; 32]; 8],
        };
        let mut groups = vec![zero; n.div_ceil(8) * kb];
        for (i, b) in bytes.chunks_exact(34).enumerate() {
            let (row, blk) = (i / kb, i % kb);
            let g = &mut groups[(row / 8) * kb + blk];
            let r = row % 8;
            g.d[r] = f16::from_le_bytes([b[0], b[1]]).to_f32();
            for (c, lanes) in g.qs.iter_mut().enumerate() {
                for (q, &x) in lanes[4 * r..4 * r + 4]
                    .iter_mut()
                    .zip(&b[2 + 4 * c..6 + 4 * c])
                {
                    *q = x as i8;
                }
            }
        }
        Some(QuantMatrix {
            n,
            k,
            blocks: Blocks::Q8_0(groups),
        })
    }

    /// Output size.
    pub fn rows(&self) -> usize {
        self.n
    }

    /// `x [b, k]` (row-major) times the transposed matrix: `[b, n]`.
    pub fn matmul(&self, x: &[f32], b: usize) -> Vec<f32> {
        self.matmul_with(x, b, has_avx2())
    }

    /// [`QuantMatrix::matmul`] with the AVX2 kernels (`fast`) or the portable ones, which give
    /// the same bits.
    fn matmul_with(&self, x: &[f32], b: usize, fast: bool) -> Vec<f32> {
        let kb = self.k / QK;
        let acts: Vec<Act> = x.chunks_exact(QK).map(quantize).collect();
        debug_assert_eq!(acts.len(), b * kb);
        // Output `[b, n]`, shared by the workers of candle's own thread pool (the one its
        // other kernels use, so the two never compete for cores); each (batch, row) cell is
        // written by exactly one worker.
        let n = self.n;
        let out = Cells::new(n * b);
        match &self.blocks {
            Blocks::Q4_1(groups) => {
                run_groups(groups, kb, n, b, &acts, &out, |w, acts, lanes, cell| {
                    if fast {
                        group_avx2(w, acts, lanes, cell)
                    } else {
                        group_scalar(w, acts, lanes, cell)
                    }
                })
            }
            Blocks::Q8_0(groups) => {
                run_groups(groups, kb, n, b, &acts, &out, |w, acts, lanes, cell| {
                    if fast {
                        group8_avx2(w, acts, lanes, cell)
                    } else {
                        group8_scalar(w, acts, lanes, cell)
                    }
                })
            }
        }
        out.into_vec()
    }
}

/// Every row group of a matrix times `b` activation rows on candle's thread pool: `kernel`
/// fills the 8 rows of one group for up to [`LANES`] activation rows (each unpacked weight
/// block serves all of them); padding rows past `n` are not written.
fn run_groups<G: Sync>(
    groups: &[G],
    kb: usize,
    n: usize,
    b: usize,
    acts: &[Act],
    out: &Cells,
    kernel: impl Fn(&[G], &[Act], usize, &mut [[f32; 8]; LANES]) + Sync,
) {
    let run = |range: std::ops::Range<usize>| {
        let mut cell = [[0f32; 8]; LANES];
        for g in range {
            let w = &groups[g * kb..(g + 1) * kb];
            let rows = (n - 8 * g).min(8);
            let mut first = 0;
            while first < b {
                let lanes = (b - first).min(LANES);
                kernel(w, &acts[first * kb..(first + lanes) * kb], lanes, &mut cell);
                for (l, c) in cell[..lanes].iter().enumerate() {
                    for (r, &v) in c[..rows].iter().enumerate() {
                        out.set((first + l) * n + 8 * g + r, v);
                    }
                }
                first += lanes;
            }
        }
    };
    candle_core::utils::barrier_pool().execute_chunked(n.div_ceil(8), run);
}

/// Q8_1 quantization of one block, rounded as ggml/candle do (scales through f16).
fn quantize(x: &[f32]) -> Act {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() && x.len() == QK {
        // SAFETY: AVX2 and FMA were found at run time; `x` holds 32 values.
        return unsafe { quantize_avx2(x) };
    }
    quantize_scalar(x)
}

/// [`quantize_scalar`] with AVX2: the same products, the same round-half-away-from-zero (as
/// `f32::round`), so the same block.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn quantize_avx2(x: &[f32]) -> Act {
    use std::arch::x86_64::*;
    assert_eq!(x.len(), QK);
    let sign = _mm256_set1_ps(-0.0);
    // SAFETY: four unaligned loads of 8 floats within the 32 asserted above.
    let v: [__m256; 4] = std::array::from_fn(|c| unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * c)) });
    let mut m = _mm256_andnot_ps(sign, v[0]);
    for vc in &v[1..] {
        m = _mm256_max_ps(m, _mm256_andnot_ps(sign, *vc));
    }
    let mut lanes = [0f32; 8];
    // SAFETY: 8 floats.
    unsafe { _mm256_storeu_ps(lanes.as_mut_ptr(), m) };
    let amax = lanes.iter().fold(0f32, |a, &b| a.max(b));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let idv = _mm256_set1_ps(id);
    let half = _mm256_set1_ps(0.5);
    let one = _mm256_set1_ps(1.0);
    let ints: [__m256i; 4] = std::array::from_fn(|c| {
        let y = _mm256_mul_ps(v[c], idv);
        let t = _mm256_round_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
        let frac = _mm256_andnot_ps(sign, _mm256_sub_ps(y, t));
        let away = _mm256_cmp_ps(frac, half, _CMP_GE_OQ);
        let step = _mm256_or_ps(_mm256_and_ps(y, sign), one);
        _mm256_cvtps_epi32(_mm256_add_ps(t, _mm256_and_ps(away, step)))
    });
    let total = _mm256_add_epi32(
        _mm256_add_epi32(ints[0], ints[1]),
        _mm256_add_epi32(ints[2], ints[3]),
    );
    let mut sums = [0i32; 8];
    // SAFETY: 8 i32.
    unsafe { _mm256_storeu_si256(sums.as_mut_ptr().cast(), total) };
    let sum: i32 = sums.iter().sum();
    let bytes = _mm256_packs_epi16(
        _mm256_packs_epi32(ints[0], ints[1]),
        _mm256_packs_epi32(ints[2], ints[3]),
    );
    let bytes = _mm256_permutevar8x32_epi32(bytes, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    let mut qs = [0i8; 32];
    // SAFETY: 32 bytes.
    unsafe { _mm256_storeu_si256(qs.as_mut_ptr().cast(), bytes) };
    let d16 = f16::from_f32(d);
    Act {
        d: d16.to_f32(),
        s: (f16::from_f32(sum as f32) * d16).to_f32(),
        qs,
    }
}

fn quantize_scalar(x: &[f32]) -> Act {
    let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
    let d = amax / 127.0;
    let id = if d != 0.0 { 1.0 / d } else { 0.0 };
    let mut qs = [0i8; 32];
    let mut sum = 0i32;
    for (q, &v) in qs.iter_mut().zip(x) {
        *q = (v * id).round() as i8;
        sum += i32::from(*q);
    }
    let d16 = f16::from_f32(d);
    Act {
        d: d16.to_f32(),
        s: (f16::from_f32(sum as f32) * d16).to_f32(),
        qs,
    }
}

/// The 8 rows of a group times `lanes` activation rows, one lane and row at a time: for each
/// block, `step(group, activations, row, acc)` adds that block's share to the row's sum with
/// the SIMD kernel's operations in the same order, so the same bits.
fn scalar_groups<G>(
    w: &[G],
    acts: &[Act],
    lanes: usize,
    out: &mut [[f32; 8]; LANES],
    step: impl Fn(&G, &Act, usize, f32) -> f32,
) {
    let kb = w.len();
    for (l, o) in out[..lanes].iter_mut().enumerate() {
        let acts = &acts[l * kb..(l + 1) * kb];
        for (r, o) in o.iter_mut().enumerate() {
            *o = w
                .iter()
                .zip(acts)
                .fold(0f32, |acc, (g, a)| step(g, a, r, acc));
        }
    }
}

/// [`group_avx2_impl`] without SIMD: exact integer sums, then the same roundings and fused
/// multiply-adds.
fn group_scalar(w: &[Group], acts: &[Act], lanes: usize, out: &mut [[f32; 8]; LANES]) {
    scalar_groups(w, acts, lanes, out, |g, a, r, acc| {
        let mut sumi = 0i32;
        for (c, q) in g.qs.iter().enumerate() {
            for (t, &q) in q[4 * r..4 * r + 4].iter().enumerate() {
                sumi += i32::from(q & 0x0f) * i32::from(a.qs[4 * c + t])
                    + i32::from(q >> 4) * i32::from(a.qs[16 + 4 * c + t]);
            }
        }
        let acc = (g.d[r] * a.d).mul_add(sumi as f32, acc);
        g.m[r].mul_add(a.s, acc)
    })
}

/// [`group8_avx2_impl`] without SIMD (same bits).
fn group8_scalar(w: &[Group8], acts: &[Act], lanes: usize, out: &mut [[f32; 8]; LANES]) {
    scalar_groups(w, acts, lanes, out, |g, a, r, acc| {
        let mut sumi = 0i32;
        for (c, q) in g.qs.iter().enumerate() {
            for (t, &q) in q[4 * r..4 * r + 4].iter().enumerate() {
                sumi += i32::from(q) * i32::from(a.qs[4 * c + t]);
            }
        }
        (g.d[r] * a.d).mul_add(sumi as f32, acc)
    })
}

/// Activation rows one pass over a weight group serves (each keeps one accumulator register).
const LANES: usize = 4;

/// `out[l] = group rows · acts[l * kb..(l + 1) * kb]` for `l < lanes` (`lanes <= LANES`).
#[cfg(target_arch = "x86_64")]
fn group_avx2(w: &[Group], acts: &[Act], lanes: usize, out: &mut [[f32; 8]; LANES]) {
    // SAFETY: only called when `has_avx2()` found AVX2 and FMA at run time; each arm reads
    // `lanes * w.len()` activation blocks, which `acts` holds (asserted inside).
    unsafe {
        match lanes {
            4 => group_avx2_impl::<4>(w, acts, out),
            3 => group_avx2_impl::<3>(w, acts, out),
            2 => group_avx2_impl::<2>(w, acts, out),
            _ => group_avx2_impl::<1>(w, acts, out),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn group_avx2(w: &[Group], acts: &[Act], lanes: usize, out: &mut [[f32; 8]; LANES]) {
    group_scalar(w, acts, lanes, out)
}

/// Q4_1 x Q8_1 for the 8 rows of a group and `N` activation rows: each group block is
/// unpacked once (8 registers of nibbles) and serves every lane; per lane, eight `maddubs`
/// against broadcast 4-byte activation slices give the 8 rows' products, summed exactly in
/// 16 bits, widened once, and scaled with one multiply-add for `d` and one for `m`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn group_avx2_impl<const N: usize>(w: &[Group], acts: &[Act], out: &mut [[f32; 8]; LANES]) {
    use std::arch::x86_64::*;
    let kb = w.len();
    assert!(acts.len() >= N * kb);
    let mask = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    for (i, g) in w.iter().enumerate() {
        // SAFETY: `Group` is 32-byte aligned and each `qs[c]` is 32 bytes at a multiple of 32.
        let v: [__m256i; 4] =
            std::array::from_fn(|c| unsafe { _mm256_load_si256(g.qs[c].as_ptr().cast()) });
        let lo: [__m256i; 4] = std::array::from_fn(|c| _mm256_and_si256(v[c], mask));
        let hi: [__m256i; 4] =
            std::array::from_fn(|c| _mm256_and_si256(_mm256_srli_epi16(v[c], 4), mask));
        // SAFETY: 8 aligned floats each.
        let (d, m) = unsafe { (_mm256_load_ps(g.d.as_ptr()), _mm256_load_ps(g.m.as_ptr())) };
        for l in 0..N {
            let a = &acts[l * kb + i];
            // Activation values 4j..4j + 4 in every 32-bit lane.
            let slice = |j: usize| {
                // SAFETY: `j < 8`, so the 4 bytes lie within the 32 of `qs`.
                _mm256_set1_epi32(unsafe {
                    a.qs.as_ptr().add(4 * j).cast::<i32>().read_unaligned()
                })
            };
            // Each 16-bit lane is at most 2 * 15 * 128 in magnitude: eight of them fit.
            let mut p = _mm256_maddubs_epi16(lo[0], slice(0));
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo[1], slice(1)));
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo[2], slice(2)));
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(lo[3], slice(3)));
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[0], slice(4)));
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[1], slice(5)));
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[2], slice(6)));
            p = _mm256_add_epi16(p, _mm256_maddubs_epi16(hi[3], slice(7)));
            let sumi = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
            let scale = _mm256_mul_ps(d, _mm256_set1_ps(a.d));
            acc[l] = _mm256_fmadd_ps(scale, sumi, acc[l]);
            acc[l] = _mm256_fmadd_ps(m, _mm256_set1_ps(a.s), acc[l]);
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: 8 floats.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), a) };
    }
}

/// `out[l] = group rows · acts[l * kb..(l + 1) * kb]` for Q8_0 groups (see [`group_avx2`]).
#[cfg(target_arch = "x86_64")]
fn group8_avx2(w: &[Group8], acts: &[Act], lanes: usize, out: &mut [[f32; 8]; LANES]) {
    // SAFETY: as in `group_avx2`.
    unsafe {
        match lanes {
            4 => group8_avx2_impl::<4>(w, acts, out),
            3 => group8_avx2_impl::<3>(w, acts, out),
            2 => group8_avx2_impl::<2>(w, acts, out),
            _ => group8_avx2_impl::<1>(w, acts, out),
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn group8_avx2(w: &[Group8], acts: &[Act], lanes: usize, out: &mut [[f32; 8]; LANES]) {
    group8_scalar(w, acts, lanes, out)
}

/// Q8_0 x Q8_1 for the 8 rows of a group and `N` activation rows: signed times signed through
/// `maddubs` as |w| times (a with w's sign); each 4-value slice's products are widened to
/// 32 bits at once (two 16-bit sums of 127 * 128 could overflow), the block's sum is exact,
/// then scaled with one multiply-add.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn group8_avx2_impl<const N: usize>(
    w: &[Group8],
    acts: &[Act],
    out: &mut [[f32; 8]; LANES],
) {
    use std::arch::x86_64::*;
    let kb = w.len();
    assert!(acts.len() >= N * kb);
    let ones = _mm256_set1_epi16(1);
    let mut acc = [_mm256_setzero_ps(); N];
    for (i, g) in w.iter().enumerate() {
        let mut sums = [_mm256_setzero_si256(); N];
        for (c, q) in g.qs.iter().enumerate() {
            // SAFETY: `Group8` is 32-byte aligned and each `qs[c]` is 32 bytes at a multiple
            // of 32.
            let wv = unsafe { _mm256_load_si256(q.as_ptr().cast()) };
            let wabs = _mm256_sign_epi8(wv, wv);
            for (l, sum) in sums.iter_mut().enumerate() {
                let a = &acts[l * kb + i];
                // SAFETY: `c < 8`, so the 4 bytes lie within the 32 of `qs`.
                let av = _mm256_set1_epi32(unsafe {
                    a.qs.as_ptr().add(4 * c).cast::<i32>().read_unaligned()
                });
                let p = _mm256_maddubs_epi16(wabs, _mm256_sign_epi8(av, wv));
                *sum = _mm256_add_epi32(*sum, _mm256_madd_epi16(p, ones));
            }
        }
        // SAFETY: 8 aligned floats.
        let d = unsafe { _mm256_load_ps(g.d.as_ptr()) };
        for l in 0..N {
            let scale = _mm256_mul_ps(d, _mm256_set1_ps(acts[l * kb + i].d));
            acc[l] = _mm256_fmadd_ps(scale, _mm256_cvtepi32_ps(sums[l]), acc[l]);
        }
    }
    for (o, a) in out.iter_mut().zip(acc) {
        // SAFETY: 8 floats.
        unsafe { _mm256_storeu_ps(o.as_mut_ptr(), a) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn matrix(n: usize, k: usize) -> (Vec<u8>, Vec<f32>) {
        // Deterministic blocks and their dequantized values.
        let mut bytes = Vec::new();
        let mut dense = vec![0f32; n * k];
        let mut state = 7u32;
        let mut next = || {
            state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            state >> 8
        };
        for r in 0..n {
            for blk in 0..k / QK {
                let d = f16::from_f32((next() % 100) as f32 / 1000.0 + 0.001);
                let m = f16::from_f32(-((next() % 100) as f32) / 500.0);
                bytes.extend(d.to_le_bytes());
                bytes.extend(m.to_le_bytes());
                for j in 0..16 {
                    let byte = (next() & 0xff) as u8;
                    bytes.push(byte);
                    let base = r * k + blk * QK;
                    dense[base + j] = f32::from(byte & 0x0f) * d.to_f32() + m.to_f32();
                    dense[base + j + 16] = f32::from(byte >> 4) * d.to_f32() + m.to_f32();
                }
            }
        }
        (bytes, dense)
    }

    #[test]
    fn simd_scalar_and_dense_agree_and_batches_are_invariant() {
        let (n, k, b) = (70, 96, 7);
        let (bytes, dense) = matrix(n, k);
        let m = QuantMatrix::from_bytes(&bytes, n, k).expect("matrix");
        let x: Vec<f32> = (0..b * k)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 40.0)
            .collect();
        let out = m.matmul(&x, b);
        // The SIMD kernel and the portable one give the same bits.
        assert_eq!(out, m.matmul_with(&x, b, false));
        for bi in 0..b {
            for j in 0..n {
                let exact: f32 = (0..k).map(|t| x[bi * k + t] * dense[j * k + t]).sum();
                let got = out[bi * n + j];
                // Activation quantization to 8 bits: ~1 % of the magnitude.
                let scale: f32 = (0..k)
                    .map(|t| (x[bi * k + t] * dense[j * k + t]).abs())
                    .sum();
                assert!(
                    (got - exact).abs() <= 0.02 * scale + 1e-3,
                    "{got} vs {exact}"
                );
            }
            // The same row alone gives bit-identical results.
            let alone = m.matmul(&x[bi * k..(bi + 1) * k], 1);
            assert_eq!(alone, out[bi * n..(bi + 1) * n]);
        }
        assert!(QuantMatrix::from_bytes(&bytes[1..], n, k).is_none());
    }

    #[test]
    fn extreme_blocks_do_not_overflow_the_16_bit_sums() {
        // Every nibble 15 against activations of +-127: the largest 16-bit partial sums.
        let (n, k) = (8, 64);
        let mut bytes = Vec::new();
        for _ in 0..n * k / QK {
            bytes.extend(f16::from_f32(1.0).to_le_bytes());
            bytes.extend(f16::from_f32(0.0).to_le_bytes());
            bytes.extend([0xff; 16]);
        }
        let m = QuantMatrix::from_bytes(&bytes, n, k).expect("matrix");
        for sign in [1.0f32, -1.0] {
            let x = vec![sign; k];
            let out = m.matmul(&x, 1);
            assert_eq!(out, m.matmul_with(&x, 1, false));
            for v in out {
                // 64 values of 15 times 1 (quantized to 127 with d = 1/127, through f16).
                assert!((v - sign * 960.0).abs() < 1.0, "{v}");
            }
        }
    }

    #[test]
    fn simd_quantization_is_the_scalar_one() {
        // Random blocks, plus blocks whose scaled values land exactly on halves.
        let mut state = 11u32;
        let mut blocks: Vec<Vec<f32>> = (0..500)
            .map(|_| {
                (0..QK)
                    .map(|_| {
                        state = state.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
                        ((state >> 8) % 20001) as f32 / 1000.0 - 10.0
                    })
                    .collect()
            })
            .collect();
        blocks.push((0..QK).map(|i| i as f32 - 15.5).collect());
        blocks.push(
            (0..QK)
                .map(|i| if i == 0 { 127.0 } else { i as f32 + 0.5 })
                .collect(),
        );
        blocks.push(vec![0.0; QK]);
        for b in &blocks {
            let (s, v) = (quantize_scalar(b), quantize(b));
            assert_eq!((s.d, s.s, s.qs), (v.d, v.s, v.qs), "{b:?}");
        }
    }

    #[test]
    fn q8_0_simd_matches_scalar() {
        let (n, k) = (9, 64);
        let mut bytes = Vec::new();
        for i in 0..n * k / QK {
            bytes.extend(f16::from_f32(0.01 + i as f32 * 0.001).to_le_bytes());
            bytes.extend((0..32).map(|j| ((i * 31 + j * 17) % 255) as u8));
        }
        let m = QuantMatrix::from_q8_0_bytes(&bytes, n, k).expect("q8_0");
        let x: Vec<f32> = (0..k)
            .map(|i| ((i * 13 % 29) as f32 - 14.0) / 7.0)
            .collect();
        let out = m.matmul(&x, 1);
        // Rows batched with others (4 + 1 lanes) give the bits they give alone.
        let mut five = Vec::new();
        for r in 0..5 {
            five.extend(x.iter().map(|v| v * (1.0 + r as f32 / 3.0)));
        }
        let batched = m.matmul(&five, 5);
        for r in 0..5 {
            assert_eq!(
                m.matmul(&five[r * k..(r + 1) * k], 1),
                batched[r * n..(r + 1) * n]
            );
        }
        // The SIMD kernel and the portable one give the same bits.
        assert_eq!(out, m.matmul_with(&x, 1, false));
        assert_eq!(batched, m.matmul_with(&five, 5, false));
        // And the product of the dequantized weights, to 8-bit activation precision.
        for (j, &got) in out.iter().enumerate() {
            let (mut exact, mut scale) = (0f32, 0f32);
            for (t, &xt) in x.iter().enumerate() {
                let i = j * (k / QK) + t / QK;
                let d = f16::from_f32(0.01 + i as f32 * 0.001).to_f32();
                let w = d * f32::from(((i * 31 + (t % QK) * 17) % 255) as u8 as i8);
                exact += w * xt;
                scale += (w * xt).abs();
            }
            assert!(
                (got - exact).abs() <= 0.02 * scale + 1e-3,
                "{got} vs {exact}"
            );
        }
    }
}

#[cfg(test)]
mod candle_parity {
    use super::*;
    use candle_core::quantized::{GgmlDType, QMatMul, QTensor};
    use candle_core::{Device, Module, Tensor};

    #[test]
    fn same_as_candle_q4_1_and_q8_0() {
        let (n, k) = (64, 576);
        let w: Vec<f32> = (0..n * k)
            .map(|i| (((i * 7919) % 1000) as f32 - 500.0) / 3000.0)
            .collect();
        let wt = Tensor::from_vec(w, (n, k), &Device::Cpu).expect("w");
        let x: Vec<f32> = (0..k)
            .map(|i| (((i * 104_729) % 997) as f32 - 498.0) / 200.0)
            .collect();
        let xt = Tensor::from_vec(x.clone(), (1, k), &Device::Cpu).expect("x");
        for dtype in [GgmlDType::Q4_1, GgmlDType::Q8_0] {
            let q = QTensor::quantize(&wt, dtype).expect("quantize");
            let bytes = q.data().expect("bytes").to_vec();
            let ours = match dtype {
                GgmlDType::Q4_1 => QuantMatrix::from_bytes(&bytes, n, k),
                _ => QuantMatrix::from_q8_0_bytes(&bytes, n, k),
            }
            .expect("matrix")
            .matmul(&x, 1);
            let theirs: Vec<f32> = QMatMul::from_qtensor(q)
                .expect("qmatmul")
                .forward(&xt)
                .expect("forward")
                .flatten_all()
                .expect("flat")
                .to_vec1()
                .expect("vec");
            for (a, b) in ours.iter().zip(&theirs) {
                // Only the summation order differs (measured: 1.5e-6 relative for Q4_1, exact
                // for Q8_0).
                assert!(
                    (a - b).abs() <= 1e-5 * b.abs().max(1.0),
                    "{dtype:?}: {a} vs candle {b}"
                );
            }
        }
    }
}
