//! `concat` along dimension 0 and AReaL's `concat_padded_tensors`.
//!
//! `concat_padded` follows `areal/utils/data.py` exactly: identical key sets, rank ≥ 2 tensors
//! right-padded on every non-batch dimension to the maximum then concatenated on dim 0,
//! `attention_mask` always padded with 0/false, other keys with `pad_value`, rank-1 tensors
//! concatenated, keys in the order of the first dict.

use crate::data::element_count;
use crate::{HostTensor, TensorData, TensorError};

/// Concatenate tensors along dimension 0. All must share dtype, rank and trailing dims.
pub fn concat(tensors: &[&HostTensor]) -> Result<HostTensor, TensorError> {
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
        rows += t.shape()[0];
    }
    let total: usize = tensors.iter().map(|t| t.data().len()).sum();
    let mut data = TensorData::with_capacity(first.dtype(), total);
    for t in tensors {
        append(&mut data, t.data());
    }
    let mut shape = first.shape().to_vec();
    shape[0] = rows;
    HostTensor::new(data, shape)
}

/// AReaL's `concat_padded_tensors` over dicts given as `(key, tensor)` lists.
///
/// Returns the keys in the order of the first dict. An empty input gives an empty output and a
/// single dict is returned as is (AReaL does not validate it either).
pub fn concat_padded(
    dicts: &[Vec<(String, &HostTensor)>],
    pad_value: f64,
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
    let mut out = Vec::with_capacity(first.len());
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
        out.push((key.clone(), pad_cat_dim0(key, &values, pad)?));
    }
    Ok(out)
}

fn sorted_keys(dict: &[(String, &HostTensor)]) -> Vec<String> {
    let mut keys: Vec<String> = dict.iter().map(|(k, _)| k.clone()).collect();
    keys.sort_unstable();
    keys
}

/// AReaL's `_pad_cat_dim0` for one key.
fn pad_cat_dim0(key: &str, values: &[&HostTensor], pad: f64) -> Result<HostTensor, TensorError> {
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
        1 => concat(values),
        _ => {
            let mut max_tail = first.shape()[1..].to_vec();
            let mut rows = 0usize;
            for t in values {
                rows += t.shape()[0];
                for (m, &d) in max_tail.iter_mut().zip(&t.shape()[1..]) {
                    *m = (*m).max(d);
                }
            }
            let mut shape = vec![rows];
            shape.extend_from_slice(&max_tail);
            let total = element_count(&shape).ok_or(TensorError::Invalid {
                op: "concat_padded",
                message: format!("`{key}`: padded shape {shape:?} overflows"),
            })?;
            let mut data = TensorData::with_capacity(first.dtype(), total);
            for t in values {
                append_padded(&mut data, t, &max_tail, pad);
            }
            HostTensor::new(data, shape)
        }
    }
}

fn append(dst: &mut TensorData, src: &TensorData) {
    match (dst, src) {
        (TensorData::I32(d), TensorData::I32(s)) => d.extend_from_slice(s),
        (TensorData::I64(d), TensorData::I64(s)) => d.extend_from_slice(s),
        (TensorData::F32(d), TensorData::F32(s)) => d.extend_from_slice(s),
        (TensorData::BF16(d), TensorData::BF16(s)) => d.extend_from_slice(s),
        (TensorData::Bool(d), TensorData::Bool(s)) => d.extend_from_slice(s),
        (TensorData::U8(d), TensorData::U8(s)) => d.extend_from_slice(s),
        _ => unreachable_dtype(),
    }
}

/// Callers check dtypes before appending; a mismatch here is a bug in this module.
#[cold]
fn unreachable_dtype() {
    debug_assert!(false, "dtype checked by caller");
}

/// Append `src` (rank ≥ 2) right-padded to trailing dims `tail`.
fn append_padded(dst: &mut TensorData, src: &HostTensor, tail: &[usize], pad: f64) {
    match (dst, src.data()) {
        (TensorData::I32(d), TensorData::I32(s)) => pad_into(d, s, src.shape(), tail, pad as i32),
        (TensorData::I64(d), TensorData::I64(s)) => pad_into(d, s, src.shape(), tail, pad as i64),
        (TensorData::F32(d), TensorData::F32(s)) => pad_into(d, s, src.shape(), tail, pad as f32),
        (TensorData::BF16(d), TensorData::BF16(s)) => {
            pad_into(d, s, src.shape(), tail, f32_to_bf16(pad as f32))
        }
        (TensorData::Bool(d), TensorData::Bool(s)) => pad_into(d, s, src.shape(), tail, pad != 0.0),
        (TensorData::U8(d), TensorData::U8(s)) => pad_into(d, s, src.shape(), tail, pad as u8),
        _ => unreachable_dtype(),
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

/// Round-to-nearest-even f32 → bf16 bits (NaN kept quiet).
fn f32_to_bf16(x: f32) -> u16 {
    let bits = x.to_bits();
    if x.is_nan() {
        return ((bits >> 16) as u16) | 0x40;
    }
    let round = 0x7fff + ((bits >> 16) & 1);
    ((bits + round) >> 16) as u16
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(data: TensorData, shape: &[usize]) -> HostTensor {
        HostTensor::new(data, shape.to_vec()).expect("valid tensor")
    }

    #[test]
    fn pads_rank2_right_and_masks_with_zero() {
        let a_ids = t(TensorData::I32(vec![1, 2, 3]), &[1, 3]);
        let a_mask = t(TensorData::Bool(vec![true; 3]), &[1, 3]);
        let b_ids = t(TensorData::I32(vec![4]), &[1, 1]);
        let b_mask = t(TensorData::Bool(vec![true]), &[1, 1]);
        let out = concat_padded(
            &[
                vec![
                    ("input_ids".into(), &a_ids),
                    ("attention_mask".into(), &a_mask),
                ],
                vec![
                    ("attention_mask".into(), &b_mask),
                    ("input_ids".into(), &b_ids),
                ],
            ],
            7.0,
        )
        .expect("concat");
        assert_eq!(out[0].0, "input_ids");
        assert_eq!(out[0].1.data(), &TensorData::I32(vec![1, 2, 3, 4, 7, 7]));
        assert_eq!(out[1].0, "attention_mask");
        assert_eq!(
            out[1].1.data(),
            &TensorData::Bool(vec![true, true, true, true, false, false])
        );
    }

    #[test]
    fn rank1_concatenates_and_rank3_pads_every_dim() {
        let r1 = t(TensorData::F32(vec![0.5]), &[1]);
        let r2 = t(TensorData::F32(vec![1.5, 2.5]), &[2]);
        let x = t(TensorData::I64((1..=4).collect()), &[1, 2, 2]);
        let y = t(TensorData::I64(vec![9, 8, 7]), &[1, 1, 3]);
        let out = concat_padded(
            &[
                vec![("rewards".into(), &r1), ("x".into(), &x)],
                vec![("rewards".into(), &r2), ("x".into(), &y)],
            ],
            0.0,
        )
        .expect("concat");
        assert_eq!(out[0].1.shape(), &[3]);
        assert_eq!(out[1].1.shape(), &[2, 2, 3]);
        assert_eq!(
            out[1].1.data(),
            &TensorData::I64(vec![1, 2, 0, 3, 4, 0, 9, 8, 7, 0, 0, 0])
        );
    }

    #[test]
    fn errors_name_the_problem() {
        let a = t(TensorData::I32(vec![1]), &[1, 1]);
        let v = t(TensorData::I32(vec![1]), &[1]);
        let s = t(TensorData::I32(vec![1]), &[]);
        let f = t(TensorData::F32(vec![1.0]), &[1, 1]);
        let keys = concat_padded(&[vec![("a".into(), &a)], vec![("b".into(), &a)]], 0.0)
            .expect_err("keys");
        assert!(
            keys.to_string().contains("dict[1] has different keys"),
            "{keys}"
        );
        let rank = concat_padded(&[vec![("a".into(), &a)], vec![("a".into(), &v)]], 0.0)
            .expect_err("rank");
        assert!(
            rank.to_string().contains("expected 2D tensors, got 1D"),
            "{rank}"
        );
        let dtype = concat_padded(&[vec![("a".into(), &a)], vec![("a".into(), &f)]], 0.0)
            .expect_err("dtype");
        assert!(
            dtype.to_string().contains("dtype mismatch for `a`"),
            "{dtype}"
        );
        let scalar = concat_padded(&[vec![("s".into(), &s)], vec![("s".into(), &s)]], 0.0)
            .expect_err("scalar");
        assert!(scalar.to_string().contains("scalar"), "{scalar}");
        let dup = concat_padded(&[vec![("a".into(), &a), ("a".into(), &a)]], 0.0).expect_err("dup");
        assert!(dup.to_string().contains("twice"), "{dup}");
        assert!(concat_padded(&[], 0.0).expect("empty").is_empty());
        assert!(concat(&[]).is_err());
        assert!(concat(&[&a, &t(TensorData::I32(vec![1, 2]), &[1, 2])]).is_err());
    }

    #[test]
    fn bf16_rounding() {
        assert_eq!(f32_to_bf16(1.0), 0x3f80);
        assert_eq!(f32_to_bf16(0.0), 0);
        assert_eq!(f32_to_bf16(-2.0), 0xc000);
    }
}
