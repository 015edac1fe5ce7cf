//! The KV cache of one sequence ([`SeqCache`]: one `Kv` per layer, in host memory) and decode
//! attention over it: the dot-product and weighted-sum kernels, one head of one sequence per
//! work item on candle's thread pool.

use candle_core::{Device, Result, Tensor};

/// One sequence's KV cache and position.
#[derive(Clone)]
pub struct SeqCache {
    pub(super) layers: Vec<Kv>,
    /// Tokens already in the cache.
    pub pos: usize,
}

impl SeqCache {
    /// Forget what a forward pass given up part-way appended past `pos` (it advances `pos` only
    /// once every layer has run), so the next pass starts from the same place.
    pub(super) fn rewind(&mut self) {
        let pos = self.pos;
        for kv in &mut self.layers {
            kv.len = kv.len.min(pos);
        }
    }
}

/// One layer's keys and values of one sequence, in host memory: `[n_kv_head, capacity,
/// head_dim]` each, so a head's rows are contiguous and decode attention reads them in place.
#[derive(Clone)]
pub(super) struct Kv {
    k: Vec<f32>,
    v: Vec<f32>,
    nkv: usize,
    hd: usize,
    cap: usize,
    len: usize,
}

impl Kv {
    pub(super) fn new(nkv: usize, hd: usize, cap: usize) -> Kv {
        Kv {
            k: vec![0.0; nkv * cap * hd],
            v: vec![0.0; nkv * cap * hd],
            nkv,
            hd,
            cap,
            len: 0,
        }
    }

    /// Append `t` positions given as `[n_kv_head, t, head_dim]`.
    pub(super) fn append(&mut self, k: &[f32], v: &[f32], t: usize) {
        let (nkv, hd) = (self.nkv, self.hd);
        if self.len + t > self.cap {
            let cap = (self.len + t).max(self.cap * 2);
            for buf in [&mut self.k, &mut self.v] {
                let mut grown = vec![0.0; nkv * cap * hd];
                for h in 0..nkv {
                    grown[h * cap * hd..][..self.len * hd]
                        .copy_from_slice(&buf[h * self.cap * hd..][..self.len * hd]);
                }
                *buf = grown;
            }
            self.cap = cap;
        }
        for h in 0..nkv {
            let dst = (h * self.cap + self.len) * hd;
            self.k[dst..dst + t * hd].copy_from_slice(&k[h * t * hd..(h + 1) * t * hd]);
            self.v[dst..dst + t * hd].copy_from_slice(&v[h * t * hd..(h + 1) * t * hd]);
        }
        self.len += t;
    }

    /// The `len` rows of head `h` of `buf` (`self.k` or `self.v`).
    fn rows<'a>(&self, buf: &'a [f32], h: usize) -> &'a [f32] {
        &buf[h * self.cap * self.hd..][..self.len * self.hd]
    }

    /// `[1, n_kv_head, len, head_dim]` tensors of the keys and values (prefill's path).
    pub(super) fn tensors(&self, device: &Device) -> Result<(Tensor, Tensor)> {
        let gather = |buf: &[f32]| -> Vec<f32> {
            (0..self.nkv)
                .flat_map(|h| self.rows(buf, h).iter().copied())
                .collect()
        };
        let shape = (1, self.nkv, self.len, self.hd);
        Ok((
            Tensor::from_vec(gather(&self.k), shape, device)?,
            Tensor::from_vec(gather(&self.v), shape, device)?,
        ))
    }
}

/// Sum of `a[i] * b[i]` with eight partial sums in a fixed order (vectorizes; the result does
/// not depend on anything but the two slices).
#[inline(always)]
fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let (ac, bc) = (a.chunks_exact(8), b.chunks_exact(8));
    let tail: f32 = ac
        .remainder()
        .iter()
        .zip(bc.remainder())
        .map(|(x, y)| x * y)
        .sum();
    for (x, y) in ac.zip(bc) {
        for l in 0..8 {
            acc[l] += x[l] * y[l];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// [`dot`] of `a` with the four rows of `rows` (each `a.len()` long): per row the same
/// operations in the same order, interleaved so the four sums do not wait on one another.
#[inline(always)]
fn dot4(a: &[f32], rows: &[f32]) -> [f32; 4] {
    let hd = a.len();
    let full = hd / 8 * 8;
    let mut acc = [[0f32; 8]; 4];
    for c in (0..full).step_by(8) {
        let x = &a[c..c + 8];
        for (j, acc) in acc.iter_mut().enumerate() {
            let y = &rows[j * hd + c..j * hd + c + 8];
            for l in 0..8 {
                acc[l] += x[l] * y[l];
            }
        }
    }
    std::array::from_fn(|j| {
        let row = &rows[j * hd..(j + 1) * hd];
        let tail: f32 = a[full..].iter().zip(&row[full..]).map(|(x, y)| x * y).sum();
        acc[j].iter().sum::<f32>() + tail
    })
}

/// Softmax attention of one query head over its cache rows into `acc` (`p` is scratch).
#[inline(always)]
fn attend_body(
    qh: &[f32],
    keys: &[f32],
    values: &[f32],
    scale: f32,
    p: &mut Vec<f32>,
    acc: &mut [f32],
) {
    let hd = qh.len();
    // Plain loops, not `extend(map(..))`: the iterator's fold was compiled as a separate
    // (SSE) function instead of inside the AVX2 copy of this body.
    p.clear();
    p.resize(keys.len() / hd, 0.0);
    for (x, k) in p.chunks_exact_mut(4).zip(keys.chunks_exact(4 * hd)) {
        for (x, d) in x.iter_mut().zip(dot4(qh, k)) {
            *x = d * scale;
        }
    }
    let done = p.len() / 4 * 4;
    for (x, k) in p[done..].iter_mut().zip(keys[done * hd..].chunks_exact(hd)) {
        *x = dot(qh, k) * scale;
    }
    let max = p.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
    super::cpu::exp_shifted(p, max);
    let mut sum = 0f32;
    for &x in p.iter() {
        sum += x;
    }
    for w in p.iter_mut() {
        *w /= sum;
    }
    // acc[j] = sum over positions of w * v[j], in position order; 32 columns at a time (four
    // independent registers) so the partial sums do not go through memory at every position.
    let mut c = 0;
    while c + 32 <= hd {
        weighted_columns::<32>(p, values, hd, c, acc);
        c += 32;
    }
    while c + 8 <= hd {
        weighted_columns::<8>(p, values, hd, c, acc);
        c += 8;
    }
    while c < hd {
        weighted_columns::<1>(p, values, hd, c, acc);
        c += 1;
    }
}

/// `acc[c..c + W] = sum over positions i of p[i] * values[i][c..c + W]`, in position order,
/// the `W` partial sums kept in registers.
#[inline(always)]
fn weighted_columns<const W: usize>(
    p: &[f32],
    values: &[f32],
    hd: usize,
    c: usize,
    acc: &mut [f32],
) {
    let mut a = [0f32; W];
    for (&w, v) in p.iter().zip(values.chunks_exact(hd)) {
        let v = &v[c..c + W];
        for l in 0..W {
            a[l] += w * v[l];
        }
    }
    acc[c..c + W].copy_from_slice(&a);
}

/// [`attend_body`], compiled for AVX2 where the CPU has it (same operations, wider vectors).
fn attend(qh: &[f32], keys: &[f32], values: &[f32], scale: f32, p: &mut Vec<f32>, acc: &mut [f32]) {
    #[cfg(target_arch = "x86_64")]
    {
        #[target_feature(enable = "avx2")]
        fn wide(
            qh: &[f32],
            keys: &[f32],
            values: &[f32],
            scale: f32,
            p: &mut Vec<f32>,
            acc: &mut [f32],
        ) {
            attend_body(qh, keys, values, scale, p, acc)
        }
        if super::cpu::has_avx2_fma() {
            // SAFETY: AVX2 was found at run time.
            return unsafe { wide(qh, keys, values, scale, p, acc) };
        }
    }
    attend_body(qh, keys, values, scale, p, acc)
}

/// One new token's attention for each sequence: `q` is `[B, n_head, head_dim]`, the result
/// `[B, n_head * head_dim]`. The (sequence, head) pairs are spread over candle's thread pool;
/// each is computed the same way whatever the batch.
pub(super) fn decode_attention(q: &[f32], kvs: &[&Kv], nh: usize, scale: f32) -> Vec<f32> {
    let Some(first) = kvs.first() else {
        return Vec::new();
    };
    let (nkv, hd) = (first.nkv, first.hd);
    let group = nh / nkv;
    let out = super::cpu::Cells::new(kvs.len() * nh * hd);
    let items = |range: std::ops::Range<usize>| {
        let mut p = Vec::new();
        let mut acc = vec![0f32; hd];
        for item in range {
            let (bi, h) = (item / nh, item % nh);
            let kv = kvs[bi];
            let (keys, values) = (kv.rows(&kv.k, h / group), kv.rows(&kv.v, h / group));
            let qh = &q[item * hd..(item + 1) * hd];
            attend(qh, keys, values, scale, &mut p, &mut acc);
            for (j, &a) in acc.iter().enumerate() {
                out.set(item * hd + j, a);
            }
        }
    };
    candle_core::utils::barrier_pool().execute_chunked(kvs.len() * nh, items);
    out.into_vec()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn four_row_dot_is_the_one_row_dot() {
        for hd in [64, 20, 7] {
            let a: Vec<f32> = (0..hd)
                .map(|i| ((i * 37 % 23) as f32 - 11.0) / 7.0)
                .collect();
            let rows: Vec<f32> = (0..4 * hd)
                .map(|i| ((i * 53 % 31) as f32 - 15.0) / 9.0)
                .collect();
            let four = dot4(&a, &rows);
            for (j, &d) in four.iter().enumerate() {
                assert_eq!(d.to_bits(), dot(&a, &rows[j * hd..(j + 1) * hd]).to_bits());
            }
        }
    }

    #[test]
    fn attention_is_the_textbook_loop_bit_for_bit() {
        for (hd, n) in [(64, 9), (40, 5), (12, 1), (64, 130)] {
            let val = |i: usize, m: usize| ((i * m % 97) as f32 - 48.0) / 31.0;
            let q: Vec<f32> = (0..hd).map(|i| val(i, 7)).collect();
            let keys: Vec<f32> = (0..n * hd).map(|i| val(i, 13)).collect();
            let values: Vec<f32> = (0..n * hd).map(|i| val(i, 17)).collect();
            let scale = 1.0 / (hd as f32).sqrt();
            let (mut p, mut got) = (Vec::new(), vec![0f32; hd]);
            attend(&q, &keys, &values, scale, &mut p, &mut got);
            // One position at a time, accumulating through memory.
            let scores: Vec<f32> = keys.chunks_exact(hd).map(|k| dot(&q, k) * scale).collect();
            let max = scores.iter().fold(f32::NEG_INFINITY, |m, &x| m.max(x));
            let mut e = scores.clone();
            crate::embedded::cpu::exp_shifted(&mut e, max);
            let mut sum = 0f32;
            for x in &e {
                sum += x;
            }
            let mut want = vec![0f32; hd];
            for (w, v) in e.iter().zip(values.chunks_exact(hd)) {
                let w = w / sum;
                for (a, &x) in want.iter_mut().zip(v) {
                    *a += w * x;
                }
            }
            assert_eq!(got, want, "hd {hd}, {n} positions");
        }
    }
}
