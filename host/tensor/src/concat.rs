//! `concat` along dimension 0 and AReaL's `concat_padded_tensors`.
//!
//! `concat_padded` follows `areal/utils/data.py` exactly: identical key sets, rank ≥ 2 tensors
//! right-padded on every non-batch dimension to the maximum then concatenated on dim 0,
//! `attention_mask` always padded with 0/false, other keys with `pad_value`, rank-1 tensors
//! concatenated, keys in the order of the first dict.

use candle_core::{Device, Storage, Tensor, WithDType};
use half::bf16;

use crate::data::{check_shape, element_count};
use crate::{DType, HostTensor, TensorError};

/// Concatenate tensors along dimension 0. All must share dtype, rank and trailing dims.
pub fn concat(tensors: &[&HostTensor]) -> Result<HostTensor, TensorError> {
    concat_within(tensors, usize::MAX)
}

/// [`concat`], refused with [`TensorError::TooLarge`] before anything is allocated when the
/// result would take more than `max_bytes`.
pub fn concat_within(tensors: &[&HostTensor], max_bytes: usize) -> Result<HostTensor, TensorError> {
    let shape = concat_shape(tensors)?;
    check_budget("concat", &[(shape.clone(), tensors[0].dtype())], max_bytes)?;
    cat_dim0(tensors)
}

/// The shape `concat` would produce, after checking dtypes, ranks and trailing dims.
fn concat_shape(tensors: &[&HostTensor]) -> Result<Vec<usize>, TensorError> {
    let first = tensors.first().ok_or(TensorError::Invalid {
        op: "concat",
        message: "no tensors given".into(),
    })?;
    if first.rank() == 0 {
        return Err(TensorError::ScalarConcat {
            op: "concat",
            key: "0".into(),
        });
    }
    let tail = &first.shape()[1..];
    let mut rows = 0usize;
    for (index, t) in tensors.iter().enumerate() {
        if t.dtype() != first.dtype() {
            return Err(TensorError::DTypeMismatch {
                op: "concat",
                key: index.to_string(),
                expected: first.dtype(),
                got: t.dtype(),
            });
        }
        if t.rank() != first.rank() || &t.shape()[1..] != tail {
            return Err(TensorError::DimMismatch {
                op: "concat",
                index,
                expected: tail.to_vec(),
                got: t.shape().to_vec(),
            });
        }
        rows = rows
            .checked_add(t.shape()[0])
            .ok_or_else(|| TensorError::Invalid {
                op: "concat",
                message: "the number of rows overflows".into(),
            })?;
    }
    let mut shape = vec![rows];
    shape.extend_from_slice(tail);
    check_shape("concat", &shape)?;
    Ok(shape)
}

/// Bytes the tensors of `shapes` take together, in `u128` (cannot overflow: ranks and
/// dimension products are bounded by [`check_shape`]).
fn planned_bytes(shapes: &[(Vec<usize>, DType)]) -> u128 {
    shapes
        .iter()
        .map(|(shape, dtype)| {
            shape.iter().fold(dtype.size_in_bytes() as u128, |acc, &d| {
                acc.saturating_mul(d as u128)
            })
        })
        .fold(0u128, u128::saturating_add)
}

fn check_budget(
    op: &'static str,
    shapes: &[(Vec<usize>, DType)],
    max_bytes: usize,
) -> Result<(), TensorError> {
    let bytes = planned_bytes(shapes);
    if bytes > max_bytes as u128 {
        let shape = shapes
            .iter()
            .map(|(s, d)| format!("{s:?} {d}"))
            .collect::<Vec<_>>()
            .join(", ");
        return Err(TensorError::TooLarge {
            op,
            bytes,
            limit: max_bytes,
            shape,
        });
    }
    Ok(())
}

/// `torch.cat(.., dim=0)` of tensors already checked by [`concat_shape`].
fn cat_dim0(tensors: &[&HostTensor]) -> Result<HostTensor, TensorError> {
    let parts: Vec<&Tensor> = tensors.iter().map(|t| t.as_candle()).collect();
    let inner = Tensor::cat(&parts, 0).map_err(|e| TensorError::device("concat", e))?;
    HostTensor::from_candle(inner, tensors[0].dtype())
}

/// AReaL's `concat_padded_tensors` over dicts given as `(key, tensor)` lists.
///
/// Returns the keys in the order of the first dict. An empty input gives an empty output and a
/// single dict is returned as is (AReaL does not validate it either).
pub fn concat_padded(
    dicts: &[Vec<(String, &HostTensor)>],
    pad_value: f64,
) -> Result<Vec<(String, HostTensor)>, TensorError> {
    concat_padded_within(dicts, pad_value, usize::MAX)
}

/// [`concat_padded`], refused with [`TensorError::TooLarge`] before anything is allocated when
/// the padded results together would take more than `max_bytes`.
pub fn concat_padded_within(
    dicts: &[Vec<(String, &HostTensor)>],
    pad_value: f64,
    max_bytes: usize,
) -> Result<Vec<(String, HostTensor)>, TensorError> {
    let Some(first) = dicts.first() else {
        return Ok(Vec::new());
    };
    for (index, dict) in dicts.iter().enumerate() {
        let mut keys: Vec<&str> = dict.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        if let Some(w) = keys.windows(2).find(|w| w[0] == w[1]) {
            return Err(TensorError::DuplicateKey {
                index,
                key: w[0].to_string(),
            });
        }
    }
    if dicts.len() == 1 {
        return Ok(first
            .iter()
            .map(|(k, t)| (k.clone(), (*t).clone()))
            .collect());
    }
    let expected = sorted_keys(first);
    for (index, dict) in dicts.iter().enumerate().skip(1) {
        let got = sorted_keys(dict);
        if got != expected {
            return Err(TensorError::KeyMismatch {
                index,
                expected,
                got,
            });
        }
    }
    // Plan every key (checks and output shapes) before allocating any.
    let mut plans = Vec::with_capacity(first.len());
    for (key, _) in first {
        let values: Vec<&HostTensor> = dicts
            .iter()
            .map(|d| {
                d.iter()
                    .find(|(k, _)| k == key)
                    .map(|(_, t)| *t)
                    .ok_or_else(|| TensorError::Invalid {
                        op: "concat_padded",
                        message: format!("key `{key}` vanished"),
                    })
            })
            .collect::<Result<_, _>>()?;
        let pad = if key == "attention_mask" {
            0.0
        } else {
            pad_value
        };
        let shape = padded_shape(key, &values, pad)?;
        plans.push((key, values, pad, shape));
    }
    let shapes: Vec<(Vec<usize>, DType)> = plans
        .iter()
        .map(|(_, v, _, s)| (s.clone(), v[0].dtype()))
        .collect();
    check_budget("concat_padded", &shapes, max_bytes)?;
    let mut out = Vec::with_capacity(plans.len());
    for (key, values, pad, shape) in plans {
        out.push((key.clone(), pad_cat_dim0(&values, &shape, pad)?));
    }
    Ok(out)
}

fn sorted_keys(dict: &[(String, &HostTensor)]) -> Vec<String> {
    let mut keys: Vec<String> = dict.iter().map(|(k, _)| k.clone()).collect();
    keys.sort_unstable();
    keys
}

/// The output shape of AReaL's `_pad_cat_dim0` for one key, after its checks.
fn padded_shape(key: &str, values: &[&HostTensor], pad: f64) -> Result<Vec<usize>, TensorError> {
    let first = values[0];
    let rank = first.rank();
    for t in values {
        if t.rank() != rank {
            return Err(TensorError::RankMismatch {
                op: "concat_padded",
                key: key.into(),
                expected: rank,
                got: t.rank(),
            });
        }
        if t.dtype() != first.dtype() {
            return Err(TensorError::DTypeMismatch {
                op: "concat_padded",
                key: key.into(),
                expected: first.dtype(),
                got: t.dtype(),
            });
        }
    }
    match rank {
        0 => Err(TensorError::ScalarConcat {
            op: "concat_padded",
            key: key.into(),
        }),
        1 => concat_shape(values),
        // Rows of different trajectories (image patches), not positions: never padded.
        _ if crate::is_multi_modal_key(key) => {
            concat_shape(values).map_err(|e| TensorError::Invalid {
                op: "concat_padded",
                message: format!(
                    "`{key}` is a multi-modal input, concatenated without padding, and its trailing dimensions differ: {e}"
                ),
            })
        }
        _ => {
            let mut max_tail = first.shape()[1..].to_vec();
            let mut rows = 0usize;
            for t in values {
                rows = rows
                    .checked_add(t.shape()[0])
                    .ok_or_else(|| TensorError::Invalid {
                        op: "concat_padded",
                        message: format!("`{key}`: the number of rows overflows"),
                    })?;
                for (m, &d) in max_tail.iter_mut().zip(&t.shape()[1..]) {
                    *m = (*m).max(d);
                }
            }
            let mut shape = vec![rows];
            shape.extend_from_slice(&max_tail);
            check_shape("concat_padded", &shape).map_err(|e| TensorError::Invalid {
                op: "concat_padded",
                message: format!("`{key}`: {e}"),
            })?;
            element_count(&shape).ok_or(TensorError::Invalid {
                op: "concat_padded",
                message: format!("`{key}`: padded shape {shape:?} overflows"),
            })?;
            check_pad(key, first.dtype(), pad)?;
            Ok(shape)
        }
    }
}

/// AReaL's `_pad_cat_dim0` for one key, into the shape [`padded_shape`] planned.
fn pad_cat_dim0(
    values: &[&HostTensor],
    shape: &[usize],
    pad: f64,
) -> Result<HostTensor, TensorError> {
    if values[0].rank() == 1 {
        return cat_dim0(values);
    }
    let inner = match cpu_pad_cat(values, shape, pad) {
        Some(t) => t,
        None => device_pad_cat(values, &shape[1..], pad),
    }
    .map_err(|e| TensorError::device("concat_padded", e))?;
    HostTensor::from_candle(inner, values[0].dtype())
}

/// torch refuses a fill value the dtype cannot hold (`fill_` raises); so do we, naming the key.
fn check_pad(key: &str, dtype: DType, pad: f64) -> Result<(), TensorError> {
    let (lo, hi) = match dtype {
        DType::I32 => (f64::from(i32::MIN), f64::from(i32::MAX)),
        // i64's bounds are not exact in f64; torch's check is `-2^63 <= v < 2^63`.
        DType::I64 => (-(2f64.powi(63)), 2f64.powi(63) - 1024.0),
        DType::U8 => (0.0, 255.0),
        DType::F32 | DType::BF16 | DType::Bool => return Ok(()),
    };
    // Truncation toward zero happens first, so -0.5 fits i32 but not u8 (torch agrees).
    let ok = pad.is_finite() && pad >= lo && pad <= hi && !(dtype == DType::U8 && pad < 0.0);
    if ok {
        return Ok(());
    }
    Err(TensorError::Invalid {
        op: "concat_padded",
        message: format!(
            "pad value {pad} cannot be stored in `{key}` ({dtype}); pass a pad value in range"
        ),
    })
}

/// The CPU path: one pass writing the padded output. `None` when a tensor is not a
/// contiguous CPU tensor (then the device path runs).
fn cpu_pad_cat(
    values: &[&HostTensor],
    shape: &[usize],
    pad: f64,
) -> Option<candle_core::Result<Tensor>> {
    match values[0].dtype() {
        DType::I32 => cpu_pad_cat_typed(values, shape, pad as i32),
        DType::I64 => cpu_pad_cat_typed(values, shape, pad as i64),
        DType::F32 => cpu_pad_cat_typed(values, shape, pad as f32),
        DType::BF16 => cpu_pad_cat_typed(values, shape, bf16::from_f32(pad as f32)),
        DType::Bool => cpu_pad_cat_typed(values, shape, u8::from(pad != 0.0)),
        DType::U8 => cpu_pad_cat_typed(values, shape, pad as u8),
    }
}

fn cpu_pad_cat_typed<T: WithDType>(
    values: &[&HostTensor],
    shape: &[usize],
    pad: T,
) -> Option<candle_core::Result<Tensor>> {
    let total: usize = shape.iter().product();
    let tail = &shape[1..];
    let mut dst: Vec<T> = Vec::with_capacity(total);
    for t in values {
        with_cpu_slice(t.as_candle(), |src: &[T]| {
            pad_into(&mut dst, src, t.shape(), tail, pad)
        })?;
    }
    Some(Tensor::from_vec(dst, shape, &Device::Cpu))
}

/// Run `f` on the row-major elements of a contiguous CPU tensor.
pub(crate) fn with_cpu_slice<T: WithDType, R>(t: &Tensor, f: impl FnOnce(&[T]) -> R) -> Option<R> {
    let (storage, layout) = t.storage_and_layout();
    let Storage::Cpu(cpu) = &*storage else {
        return None;
    };
    let (start, end) = layout.contiguous_offsets()?;
    let all = cpu.as_slice::<T>().ok()?;
    Some(f(all.get(start..end)?))
}

/// The device path (any candle device): pad each tensor with `full` blocks, then one `cat`.
fn device_pad_cat(values: &[&HostTensor], tail: &[usize], pad: f64) -> candle_core::Result<Tensor> {
    let dtype = values[0].dtype();
    let mut padded = Vec::with_capacity(values.len());
    for t in values {
        let mut x = t.as_candle().clone();
        for (i, &target) in tail.iter().enumerate() {
            let have = x.dim(i + 1)?;
            if have < target {
                let mut fill_shape = x.dims().to_vec();
                fill_shape[i + 1] = target - have;
                let fill = full(dtype, pad, fill_shape, x.device())?;
                x = Tensor::cat(&[&x, &fill], i + 1)?;
            }
        }
        padded.push(x);
    }
    Tensor::cat(&padded, 0)
}

/// A tensor filled with `pad` cast to `dtype` the way torch casts a fill value.
fn full(dtype: DType, pad: f64, shape: Vec<usize>, device: &Device) -> candle_core::Result<Tensor> {
    match dtype {
        DType::I32 => Tensor::full(pad as i32, shape, device),
        DType::I64 => Tensor::full(pad as i64, shape, device),
        DType::F32 => Tensor::full(pad as f32, shape, device),
        DType::BF16 => Tensor::full(bf16::from_f32(pad as f32), shape, device),
        DType::Bool => Tensor::full(u8::from(pad != 0.0), shape, device),
        DType::U8 => Tensor::full(pad as u8, shape, device),
    }
}

/// Copy a row-major block of shape `shape` into a block of shape `[shape[0], tail...]`,
/// filling the new positions with `pad`.
fn pad_into<T: Copy>(dst: &mut Vec<T>, src: &[T], shape: &[usize], tail: &[usize], pad: T) {
    let inner = &shape[1..];
    if inner == tail {
        dst.extend_from_slice(src);
        return;
    }
    // Recurse over the leading dims; the last dim is copied then padded.
    fn rec<T: Copy>(dst: &mut Vec<T>, src: &[T], inner: &[usize], tail: &[usize], pad: T) {
        if inner.len() == 1 {
            dst.extend_from_slice(src);
            dst.extend(std::iter::repeat_n(pad, tail[0] - inner[0]));
            return;
        }
        let src_block: usize = inner[1..].iter().product();
        let dst_block: usize = tail[1..].iter().product();
        for i in 0..inner[0] {
            rec(
                dst,
                &src[i * src_block..(i + 1) * src_block],
                &inner[1..],
                &tail[1..],
                pad,
            );
        }
        dst.extend(std::iter::repeat_n(pad, (tail[0] - inner[0]) * dst_block));
    }
    let src_row: usize = inner.iter().product();
    for r in 0..shape[0] {
        rec(dst, &src[r * src_row..(r + 1) * src_row], inner, tail, pad);
    }
}

#[cfg(test)]
mod tests;
