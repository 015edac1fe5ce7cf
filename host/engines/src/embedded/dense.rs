//! Prefill's f32 matrix product: `x [m, k]` times a dense `[n, k]` weight matrix, with the
//! output columns split into blocks that candle's thread pool multiplies with single-threaded
//! `gemm` calls. candle's own f32 matmul leaves short prompts (tens of rows) on one thread.

use candle_core::{Result, Storage, Tensor};

/// Output columns per block handed to one worker.
const BLOCK: usize = 128;

/// A dense f32 weight matrix `[n, k]` (row-major), held by a candle tensor (shared, not copied:
/// the tied embedding matrix is both the embedding table and the output projection).
pub struct DenseMatrix {
    w: Tensor,
    n: usize,
    k: usize,
}

/// The output pointer, shared by the workers; each writes its own column block.
struct Out(*mut f32);
// SAFETY: workers write disjoint column ranges of the buffer, which outlives the pool call.
unsafe impl Sync for Out {}

impl DenseMatrix {
    /// From a contiguous f32 CPU tensor `[n, k]`.
    pub fn new(w: Tensor) -> Result<DenseMatrix> {
        let (n, k) = w.dims2()?;
        let w = w.to_dtype(candle_core::DType::F32)?.contiguous()?;
        Ok(DenseMatrix { w, n, k })
    }

    /// Output size.
    pub fn rows(&self) -> usize {
        self.n
    }

    /// `x [m, k]` (row-major) times the transposed matrix: `[m, n]`.
    pub fn matmul(&self, x: &[f32], m: usize) -> Result<Vec<f32>> {
        let (n, k) = (self.n, self.k);
        if x.len() != m * k {
            candle_core::bail!("dense matmul: {} values for {m} rows of {k}", x.len())
        }
        let (storage, layout) = self.w.storage_and_layout();
        let Storage::Cpu(cpu) = &*storage else {
            candle_core::bail!("dense matmul: the weights are not on the CPU")
        };
        let w = &cpu.as_slice::<f32>()?[layout.start_offset()..][..n * k];
        let mut out = vec![0f32; m * n];
        let dst = Out(out.as_mut_ptr());
        let blocks = n.div_ceil(BLOCK);
        let work = |range: std::ops::Range<usize>| {
            let dst = &dst;
            for b in range {
                let c0 = b * BLOCK;
                let nc = BLOCK.min(n - c0);
                // SAFETY: dst is `[m, n]` row-major; this block writes columns c0..c0+nc of
                // every row, which no other block touches. lhs is x `[m, k]`; rhs is the
                // `[k, nc]` transpose of weight rows c0..c0+nc (row stride 1, column stride k).
                unsafe {
                    gemm::gemm(
                        m,
                        nc,
                        k,
                        dst.0.add(c0),
                        1,
                        n as isize,
                        false,
                        x.as_ptr(),
                        1,
                        k as isize,
                        w.as_ptr().add(c0 * k),
                        k as isize,
                        1,
                        0.0f32,
                        1.0f32,
                        false,
                        false,
                        false,
                        gemm::Parallelism::None,
                    );
                }
            }
        };
        candle_core::utils::barrier_pool().execute_chunked(blocks, work);
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn column_blocks_give_the_plain_product() {
        // n spans three blocks, the last one partial.
        let (m, n, k) = (5, 2 * BLOCK + 44, 40);
        let w: Vec<f32> = (0..n * k)
            .map(|i| ((i * 7919 % 1000) as f32 - 500.0) / 700.0)
            .collect();
        let x: Vec<f32> = (0..m * k)
            .map(|i| ((i * 104_729 % 997) as f32 - 498.0) / 300.0)
            .collect();
        let t = Tensor::from_vec(w.clone(), (n, k), &candle_core::Device::Cpu).expect("w");
        let d = DenseMatrix::new(t).expect("dense");
        let out = d.matmul(&x, m).expect("matmul");
        for r in 0..m {
            for c in 0..n {
                let want: f64 = (0..k)
                    .map(|j| f64::from(x[r * k + j]) * f64::from(w[c * k + j]))
                    .sum();
                let got = f64::from(out[r * n + c]);
                assert!(
                    (got - want).abs() < 1e-4 * want.abs().max(1.0),
                    "{r},{c}: {got} vs {want}"
                );
            }
        }
        assert!(d.matmul(&x[1..], m).is_err());
    }
}
