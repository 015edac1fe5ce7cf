//! Bicubic resize of 8-bit RGB, ported from the two kernels `transformers` runs, so the bytes
//! are theirs:
//!
//! * [`pil_bicubic`]: Pillow's `Image.resize(..., BICUBIC)` (`Qwen2VLImageProcessor`):
//!   double-precision filter weights normalised per output pixel, stored as 22-bit fixed point,
//!   a horizontal pass to 8 bits, then a vertical pass.
//! * [`torch_bicubic_aa`]: ATen's antialiased uint8 bicubic (`torchvision` `resize(...,
//!   BICUBIC, antialias=True)` on uint8, `Qwen2VLImageProcessorFast`): the same filter and
//!   passes, but weights stored as int16 with a precision chosen per axis from the largest
//!   weight.
//!
//! Both use Keys' cubic with a = -0.5 and a support of 2 input pixels, widened by the scale
//! when shrinking (antialiasing). A dimension that keeps its size is not resampled.

use crate::Rgb;

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod sse2;

/// Keys' cubic convolution kernel, a = -0.5.
fn cubic(x: f64) -> f64 {
    const A: f64 = -0.5;
    let x = x.abs();
    if x < 1.0 {
        ((A + 2.0) * x - (A + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        (((x - 5.0) * x + 8.0) * x - 4.0) * A
    } else {
        0.0
    }
}

/// One axis's filter: for each output index, the first input index and the fixed-point
/// weights of the inputs it reads.
struct Axis {
    /// (first input index, number of inputs) per output index.
    bounds: Vec<(usize, usize)>,
    /// `ksize` weights per output index.
    weights: Vec<i32>,
    ksize: usize,
    precision: u32,
}

/// Normalised double weights per output index, as both references compute them.
fn float_weights(in_size: usize, out_size: usize) -> (Vec<(usize, usize)>, Vec<f64>, usize) {
    let scale = in_size as f64 / out_size as f64;
    let filterscale = scale.max(1.0);
    let support = 2.0 * filterscale;
    let ksize = support.ceil() as usize * 2 + 1;
    let mut bounds = Vec::with_capacity(out_size);
    let mut kk = vec![0.0f64; out_size * ksize];
    for xx in 0..out_size {
        let center = (xx as f64 + 0.5) * scale;
        let ss = 1.0 / filterscale;
        let xmin = ((center - support + 0.5) as i64).max(0) as usize;
        let xmax = ((center + support + 0.5) as i64).min(in_size as i64) as usize;
        let n = xmax.saturating_sub(xmin).min(ksize);
        let k = &mut kk[xx * ksize..xx * ksize + ksize];
        let mut ww = 0.0;
        for (x, kx) in k.iter_mut().enumerate().take(n) {
            let w = cubic((x as f64 + xmin as f64 - center + 0.5) * ss);
            *kx = w;
            ww += w;
        }
        if ww != 0.0 {
            for kx in k.iter_mut().take(n) {
                *kx /= ww;
            }
        }
        bounds.push((xmin, n));
    }
    (bounds, kk, ksize)
}

/// Round half away from zero, as both references convert weights (`(int)(±0.5 + v)`).
fn round_away(v: f64) -> i32 {
    if v < 0.0 {
        (-0.5 + v) as i32
    } else {
        (0.5 + v) as i32
    }
}

/// Pillow: weights in 22-bit fixed point (32 bits less 8 for the pixel, 2 for overflow).
fn pil_axis(in_size: usize, out_size: usize) -> Axis {
    const PRECISION_BITS: u32 = 32 - 8 - 2;
    let (bounds, kk, ksize) = float_weights(in_size, out_size);
    let weights = kk
        .iter()
        .map(|&k| round_away(k * f64::from(1u32 << PRECISION_BITS)))
        .collect();
    Axis {
        bounds,
        weights,
        ksize,
        precision: PRECISION_BITS,
    }
}

/// ATen: int16 weights, with the largest precision (below 22 bits) at which twice the largest
/// weight still fits in 15 bits.
fn torch_axis(in_size: usize, out_size: usize) -> Axis {
    let (bounds, kk, ksize) = float_weights(in_size, out_size);
    let wt_max = kk.iter().copied().fold(0.0f64, f64::max);
    let mut precision = 0u32;
    while precision < 22 {
        let next = (0.5 + wt_max * f64::from(1u32 << (precision + 1))) as i32;
        if next >= 1 << 15 {
            break;
        }
        precision += 1;
    }
    let weights = kk
        .iter()
        .map(|&k| i32::from(round_away(k * f64::from(1u32 << precision)) as i16))
        .collect();
    Axis {
        bounds,
        weights,
        ksize,
        precision,
    }
}

/// `(sum + half) >> precision`, clamped to a byte (arithmetic shift: negatives floor).
fn to_u8(sum: i32, precision: u32) -> u8 {
    (sum >> precision).clamp(0, 255) as u8
}

fn horizontal(src: &Rgb, axis: &Axis, out_w: usize) -> Rgb {
    let mut data = vec![0u8; src.height * out_w * 3];
    let half = 1i32 << (axis.precision - 1);
    // Each row widened to four lanes (the fourth unused), so the four multiply-adds of a tap
    // compile to one vector operation.
    let mut wide = vec![[0i32; 4]; src.width];
    for (row, out) in src
        .data
        .chunks_exact(src.width * 3)
        .zip(data.chunks_exact_mut(out_w * 3))
    {
        for (w4, p) in wide.iter_mut().zip(row.chunks_exact(3)) {
            *w4 = [i32::from(p[0]), i32::from(p[1]), i32::from(p[2]), 0];
        }
        for ((&(xmin, n), k), px) in axis
            .bounds
            .iter()
            .zip(axis.weights.chunks_exact(axis.ksize))
            .zip(out.chunks_exact_mut(3))
        {
            let mut acc = [half; 4];
            for (p, &w) in wide[xmin..xmin + n].iter().zip(k) {
                for c in 0..4 {
                    acc[c] += p[c] * w;
                }
            }
            px[0] = to_u8(acc[0], axis.precision);
            px[1] = to_u8(acc[1], axis.precision);
            px[2] = to_u8(acc[2], axis.precision);
        }
    }
    Rgb {
        width: out_w,
        height: src.height,
        data,
    }
}

fn vertical(src: &Rgb, axis: &Axis, out_h: usize) -> Rgb {
    let stride = src.width * 3;
    let mut data = vec![0u8; out_h * stride];
    let half = 1i32 << (axis.precision - 1);
    let mut acc = vec![0i32; stride];
    for (yy, &(ymin, n)) in axis.bounds.iter().enumerate() {
        let k = &axis.weights[yy * axis.ksize..yy * axis.ksize + n];
        acc.fill(half);
        for (i, &w) in k.iter().enumerate() {
            let row = &src.data[(ymin + i) * stride..(ymin + i + 1) * stride];
            for (a, &p) in acc.iter_mut().zip(row) {
                *a += i32::from(p) * w;
            }
        }
        for (o, &a) in data[yy * stride..(yy + 1) * stride].iter_mut().zip(&acc) {
            *o = to_u8(a, axis.precision);
        }
    }
    Rgb {
        width: src.width,
        height: out_h,
        data,
    }
}

fn separable(src: &Rgb, w: usize, h: usize, axis: fn(usize, usize) -> Axis) -> Rgb {
    let mut img = std::borrow::Cow::Borrowed(src);
    if w != src.width {
        img = std::borrow::Cow::Owned(horizontal_pass(&img, &axis(src.width, w), w));
    }
    if h != src.height {
        img = std::borrow::Cow::Owned(vertical_pass(&img, &axis(src.height, h), h));
    }
    img.into_owned()
}

/// The horizontal pass: for 16-bit weights on x86-64, AVX2 where the CPU has it, else SSE2
/// (the same bytes); else scalar.
fn horizontal_pass(src: &Rgb, axis: &Axis, out_w: usize) -> Rgb {
    #[cfg(target_arch = "x86_64")]
    if sse2::fits(axis) {
        if avx2::available() {
            // SAFETY: the CPU has AVX2 (checked just now).
            return unsafe { avx2::horizontal(src, axis, out_w) };
        }
        // SAFETY: SSE2 is part of the x86-64 baseline, so the target feature is present.
        return unsafe { sse2::horizontal(src, axis, out_w) };
    }
    horizontal(src, axis, out_w)
}

/// The vertical pass: as [`horizontal_pass`] chooses.
fn vertical_pass(src: &Rgb, axis: &Axis, out_h: usize) -> Rgb {
    #[cfg(target_arch = "x86_64")]
    if sse2::fits(axis) {
        if avx2::available() {
            // SAFETY: the CPU has AVX2 (checked just now).
            return unsafe { avx2::vertical(src, axis, out_h) };
        }
        // SAFETY: SSE2 is part of the x86-64 baseline, so the target feature is present.
        return unsafe { sse2::vertical(src, axis, out_h) };
    }
    vertical(src, axis, out_h)
}

/// Pillow's bicubic `resize((w, h))` of `src`. `w` and `h` must be at least 1.
///
/// Pillow's `Image.resize` shrinks an image more than 100 times taller than wide in two calls,
/// the vertical pass first; the 8-bit intermediate then differs from horizontal-first, so that
/// order is kept here.
pub fn pil_bicubic(src: &Rgb, w: usize, h: usize) -> Rgb {
    if src.height > src.width * 100 && h < src.height {
        let tall = separable(src, src.width, h, pil_axis);
        return separable(&tall, w, h, pil_axis);
    }
    separable(src, w, h, pil_axis)
}

/// ATen's antialiased uint8 bicubic resize of `src` to `w` x `h` (at least 1 each).
pub fn torch_bicubic_aa(src: &Rgb, w: usize, h: usize) -> Rgb {
    separable(src, w, h, torch_axis)
}

/// Bytes either resize of a `src_w` x `src_h` image to `w` x `h` holds at once beside its
/// source, known before the source is decoded (the runtime reserves them from the host's memory
/// budget): the first pass's intermediate image (horizontal first, or vertical first for
/// Pillow's very tall images), the output, and each axis's weights and row buffers (at most
/// ~100 bytes per input and ~70 per output pixel of a side: `ksize` is about 4 inputs per output
/// when shrinking; counted as 256).
pub fn working_bytes(src_w: usize, src_h: usize, w: usize, h: usize) -> usize {
    let intermediate = src_h.saturating_mul(w).max(h.saturating_mul(src_w));
    let output = h.saturating_mul(w);
    let sides = src_w
        .saturating_add(src_h)
        .saturating_add(w)
        .saturating_add(h)
        .saturating_mul(256);
    intermediate
        .saturating_add(output)
        .saturating_mul(3)
        .saturating_add(sides)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn weights_sum_to_one_in_fixed_point_and_same_size_is_identity() {
        for (i, o) in [(10, 3), (3, 10), (203, 140), (97, 56), (1, 28), (4000, 28)] {
            let a = pil_axis(i, o);
            for (xx, &(_, n)) in a.bounds.iter().enumerate() {
                let s: i64 = a.weights[xx * a.ksize..xx * a.ksize + n]
                    .iter()
                    .map(|&w| i64::from(w))
                    .sum();
                assert!((s - (1 << 22)).abs() <= n as i64, "{i}->{o} at {xx}: {s}");
            }
        }
        let img = Rgb::new(5, 4, (0..60).map(|v| v as u8 * 4).collect()).expect("rgb");
        assert_eq!(pil_bicubic(&img, 5, 4), img);
        assert_eq!(torch_bicubic_aa(&img, 5, 4), img);
        // A flat image stays flat through both kernels.
        let flat = Rgb::new(7, 3, [200u8, 30, 90].repeat(21)).expect("rgb");
        for out in [pil_bicubic(&flat, 28, 11), torch_bicubic_aa(&flat, 2, 1)] {
            assert!(out.data.chunks(3).all(|p| p == [200, 30, 90]), "{out:?}");
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn simd_passes_give_the_scalar_bytes() {
        let mut state = 0x9e37_79b9_u32;
        let mut byte = || {
            state ^= state << 13;
            state ^= state >> 17;
            state ^= state << 5;
            (state >> 24) as u8
        };
        for (w, h, ow, oh) in [
            (37, 23, 112, 56),
            (203, 97, 140, 56),
            (1, 1, 56, 56),
            (300, 9, 28, 28),
            (17, 400, 28, 196),
            (64, 48, 65, 47),
        ] {
            let img = Rgb::new(w, h, (0..w * h * 3).map(|_| byte()).collect()).expect("rgb");
            let ax = torch_axis(w, ow);
            assert!(sse2::fits(&ax));
            let wide = horizontal(&img, &ax, ow);
            // SAFETY: x86-64 has SSE2.
            assert_eq!(
                unsafe { sse2::horizontal(&img, &ax, ow) },
                wide,
                "{w}x{h} -> {ow}"
            );
            let ay = torch_axis(h, oh);
            let tall = vertical(&wide, &ay, oh);
            // SAFETY: as above.
            assert_eq!(
                unsafe { sse2::vertical(&wide, &ay, oh) },
                tall,
                "{w}x{h} -> {ow}x{oh}"
            );
            if avx2::available() {
                // SAFETY: the CPU has AVX2.
                let (h2, v2) = unsafe {
                    (
                        avx2::horizontal(&img, &ax, ow),
                        avx2::vertical(&wide, &ay, oh),
                    )
                };
                assert_eq!(h2, wide, "AVX2 {w}x{h} -> {ow}");
                assert_eq!(v2, tall, "AVX2 {w}x{h} -> {ow}x{oh}");
            } else {
                eprintln!("no AVX2 on this CPU: only the SSE2 passes were compared");
            }
        }
        assert!(
            !sse2::fits(&pil_axis(203, 140)),
            "Pillow's weights take the scalar path"
        );
    }
}
