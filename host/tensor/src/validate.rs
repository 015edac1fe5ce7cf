//! Validation of AReaL's standard trajectory keys at the boundary.
//!
//! | key | dtype | shape |
//! |---|---|---|
//! | `input_ids`, `loss_mask`, `versions`, `turn_ids`, `mm_token_type_ids` | i32 | `[B, L]` |
//! | `logprobs` | f32 | `[B, L]` |
//! | `attention_mask` | bool | `[B, L]` |
//! | `rewards`, `rollout_reward` | f32, finite | `[B]` |
//! | `is_truncated` | bool | `[B]` |
//! | `multi_modal_input.*` | any | `[N, ...]`, in a trajectory of one row (`B = 1`) |
//!
//! Every per-token key present must share one `[B, L]`, every per-row key that `B`. Keys are
//! checked only when present, and other keys are the workflow's own business.
//!
//! Multi-modal keys ([`is_multi_modal_key`]) hold AReaL's `multi_modal_input[0]` entries of one
//! trajectory (e.g. `multi_modal_input.pixel_values`, `multi_modal_input.image_grid_thw`): a
//! batch concatenates them along their first dimension without padding and records where each
//! trajectory's rows start, so they need a trajectory of one row.

use crate::{DType, HostTensor, TensorData, TensorError};

/// Per-token keys: `[B, L]`.
pub const PER_TOKEN_KEYS: [(&str, DType); 7] = [
    ("input_ids", DType::I32),
    ("mm_token_type_ids", DType::I32),
    ("loss_mask", DType::I32),
    ("logprobs", DType::F32),
    ("versions", DType::I32),
    ("turn_ids", DType::I32),
    ("attention_mask", DType::Bool),
];

/// Per-row keys: `[B]`.
pub const PER_ROW_KEYS: [(&str, DType); 3] = [
    ("rewards", DType::F32),
    ("is_truncated", DType::Bool),
    ("rollout_reward", DType::F32),
];

fn fix_for(key: &str, dtype: DType, per_token: bool) -> String {
    let shape = if per_token { "[B, L]" } else { "[B]" };
    format!(
        "build `{key}` as {dtype} {shape} (rollbox_sdk::trajectory does), or rename the key if it is not AReaL's `{key}`"
    )
}

/// Whether `key` holds a multi-modal input (AReaL's `is_multi_modal_key`: names starting
/// with `multi_modal_input`): concatenated along the first dimension, never padded.
pub fn is_multi_modal_key(key: &str) -> bool {
    key.starts_with("multi_modal_input")
}

/// Longest tensor name, bytes.
pub const MAX_KEY_BYTES: usize = 128;

/// Most tensors in one trajectory dict (AReaL's have about ten); bounds a batch file's header.
pub const MAX_KEYS: usize = 256;

/// Check a tensor name: 1 to [`MAX_KEY_BYTES`] ASCII letters, digits, `_`, `-`, `.`, `/` or
/// `:`, not starting with `__` (reserved: safetensors stores its metadata under the name
/// `__metadata__`, and a tensor of that name makes the file unreadable).
pub fn check_key_name(key: &str) -> Result<(), TensorError> {
    let fix = "use 1-128 ASCII letters, digits, `_`, `-`, `.`, `/` or `:`, not starting with `__`";
    let problem = if key.is_empty() {
        "is empty".to_string()
    } else if key.len() > MAX_KEY_BYTES {
        format!("is {} bytes long", key.len())
    } else if key.starts_with("__") {
        "starts with `__`, which safetensors reserves (`__metadata__`)".to_string()
    } else if let Some(c) = key
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || "_-./:".contains(*c)))
    {
        format!("contains {c:?}")
    } else {
        return Ok(());
    };
    let shown: String = key.chars().take(64).collect();
    Err(TensorError::Invalid {
        op: "tensor name",
        message: format!("`{}` {problem}; {fix}", shown.escape_debug()),
    })
}

/// Check the standard keys of one episode's tensor dict.
pub fn validate_trajectory(tensors: &[(String, HostTensor)]) -> Result<(), TensorError> {
    let mut token_shape: Option<(&str, [usize; 2])> = None;
    for (key, dtype) in PER_TOKEN_KEYS {
        let Some((_, t)) = tensors.iter().find(|(k, _)| k == key) else {
            continue;
        };
        check_dtype(key, t, dtype, true)?;
        if t.rank() != 2 {
            return Err(TensorError::Trajectory {
                key: key.into(),
                expected: match token_shape {
                    Some((_, [b, l])) => format!("{dtype} [{b}, {l}]"),
                    None => format!("{dtype} [B, L]"),
                },
                got: format!("{} {:?}", t.dtype(), t.shape()),
                fix: fix_for(key, dtype, true),
            });
        }
        let shape = [t.shape()[0], t.shape()[1]];
        match token_shape {
            None => token_shape = Some((key, shape)),
            Some((first, s)) if s != shape => {
                return Err(TensorError::Trajectory {
                    key: key.into(),
                    expected: format!("{dtype} {s:?} (the shape of `{first}`)"),
                    got: format!("{} {:?}", t.dtype(), t.shape()),
                    fix: "every per-token key must cover the same rows and tokens".into(),
                });
            }
            Some(_) => {}
        }
    }
    let mut rows = token_shape.map(|(k, [b, _])| (k, b));
    for (key, dtype) in PER_ROW_KEYS {
        let Some((_, t)) = tensors.iter().find(|(k, _)| k == key) else {
            continue;
        };
        check_dtype(key, t, dtype, false)?;
        let b_ok = match rows {
            Some((_, b)) => t.shape() == [b],
            None => t.rank() == 1,
        };
        if !b_ok {
            let expected = match rows {
                Some((from, b)) => format!("{dtype} [{b}] (B from `{from}`)"),
                None => format!("{dtype} [B]"),
            };
            return Err(TensorError::Trajectory {
                key: key.into(),
                expected,
                got: format!("{} {:?}", t.dtype(), t.shape()),
                fix: fix_for(key, dtype, false),
            });
        }
        if rows.is_none() {
            rows = Some((key, t.shape()[0]));
        }
        if dtype == DType::F32
            && let Ok(TensorData::F32(v)) = t.data()
            && let Some(bad) = v.iter().find(|x| !x.is_finite())
        {
            return Err(TensorError::Trajectory {
                key: key.into(),
                expected: "finite values".into(),
                got: format!("{bad}"),
                fix: "rewards must be finite numbers; map a failed score to 0.0 or reject the episode"
                    .into(),
            });
        }
    }
    let b = rows.map(|(_, b)| b);
    for (key, t) in tensors.iter().filter(|(k, _)| is_multi_modal_key(k)) {
        if t.rank() == 0 || b.is_some_and(|b| b != 1) {
            return Err(TensorError::Trajectory {
                key: key.clone(),
                expected: "a tensor of rank 1 or more in a trajectory of one row (B = 1)".into(),
                got: format!(
                    "{} {:?}{}",
                    t.dtype(),
                    t.shape(),
                    b.map(|b| format!(" with B = {b}")).unwrap_or_default()
                ),
                fix: "return multi-modal inputs with one trajectory per episode; a batch concatenates `multi_modal_input.*` keys and records each trajectory's rows".into(),
            });
        }
    }
    Ok(())
}

fn check_dtype(
    key: &str,
    t: &HostTensor,
    dtype: DType,
    per_token: bool,
) -> Result<(), TensorError> {
    if t.dtype() == dtype {
        return Ok(());
    }
    Err(TensorError::Trajectory {
        key: key.into(),
        expected: format!("{dtype} {}", if per_token { "[B, L]" } else { "[B]" }),
        got: format!("{} {:?}", t.dtype(), t.shape()),
        fix: fix_for(key, dtype, per_token),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(data: TensorData, shape: &[usize]) -> HostTensor {
        HostTensor::new(data, shape.to_vec()).expect("tensor")
    }

    fn rlvr(len: usize) -> Vec<(String, HostTensor)> {
        vec![
            (
                "input_ids".into(),
                t(TensorData::I32(vec![1; len]), &[1, len]),
            ),
            (
                "loss_mask".into(),
                t(TensorData::I32(vec![0; len]), &[1, len]),
            ),
            (
                "logprobs".into(),
                t(TensorData::F32(vec![0.0; len]), &[1, len]),
            ),
            (
                "versions".into(),
                t(TensorData::I32(vec![-1; len]), &[1, len]),
            ),
            (
                "attention_mask".into(),
                t(TensorData::Bool(vec![true; len]), &[1, len]),
            ),
            ("rewards".into(), t(TensorData::F32(vec![1.0]), &[1])),
            (
                "is_truncated".into(),
                t(TensorData::Bool(vec![false]), &[1]),
            ),
        ]
    }

    fn replace(
        mut d: Vec<(String, HostTensor)>,
        key: &str,
        v: HostTensor,
    ) -> Vec<(String, HostTensor)> {
        for (k, x) in &mut d {
            if k == key {
                *x = v.clone();
            }
        }
        d
    }

    #[test]
    fn a_standard_dict_passes_and_other_keys_are_free() {
        validate_trajectory(&rlvr(4)).expect("valid");
        let mut d = rlvr(3);
        d.push(("my_scalar".into(), t(TensorData::U8(vec![7]), &[])));
        validate_trajectory(&d).expect("custom keys are not checked");
        validate_trajectory(&[]).expect("nothing to check");
    }

    #[test]
    fn wrong_dtype_names_key_expected_actual_and_fix() {
        let d = replace(
            rlvr(3),
            "loss_mask",
            t(TensorData::I64(vec![0; 3]), &[1, 3]),
        );
        let e = validate_trajectory(&d).expect_err("dtype").to_string();
        assert!(
            e.contains("`loss_mask`")
                && e.contains("expected i32 [B, L]")
                && e.contains("got i64 [1, 3]"),
            "{e}"
        );
        assert!(e.contains("build `loss_mask` as i32"), "{e}");
    }

    #[test]
    fn per_token_keys_share_one_shape() {
        let d = replace(
            rlvr(3),
            "logprobs",
            t(TensorData::F32(vec![0.0; 4]), &[1, 4]),
        );
        let e = validate_trajectory(&d).expect_err("shape").to_string();
        assert!(
            e.contains("`logprobs`")
                && e.contains("[1, 3] (the shape of `input_ids`)")
                && e.contains("[1, 4]"),
            "{e}"
        );
        let d = replace(rlvr(3), "versions", t(TensorData::I32(vec![0; 3]), &[3]));
        let e = validate_trajectory(&d).expect_err("rank").to_string();
        assert!(
            e.contains("`versions`") && e.contains("expected i32 [1, 3]"),
            "{e}"
        );
    }

    #[test]
    fn multi_modal_keys_need_one_row_and_a_first_dimension() {
        let mut d = rlvr(3);
        d.push((
            "mm_token_type_ids".into(),
            t(TensorData::I32(vec![0, 1, 0]), &[1, 3]),
        ));
        d.push((
            "multi_modal_input.pixel_values".into(),
            t(TensorData::F32(vec![0.5; 8]), &[2, 4]),
        ));
        validate_trajectory(&d).expect("one row with images");
        let bad = replace(
            d.clone(),
            "mm_token_type_ids",
            t(TensorData::I64(vec![0; 3]), &[1, 3]),
        );
        let e = validate_trajectory(&bad).expect_err("dtype").to_string();
        assert!(
            e.contains("`mm_token_type_ids`") && e.contains("i32"),
            "{e}"
        );
        let scalar = replace(
            d.clone(),
            "multi_modal_input.pixel_values",
            t(TensorData::F32(vec![0.5]), &[]),
        );
        let e = validate_trajectory(&scalar).expect_err("rank").to_string();
        assert!(e.contains("`multi_modal_input.pixel_values`"), "{e}");
        let two_rows: Vec<(String, HostTensor)> = d
            .into_iter()
            .map(|(k, x)| {
                let x = if k.starts_with("multi_modal_input") {
                    x
                } else {
                    let mut shape = x.shape().to_vec();
                    shape[0] = 2;
                    let data = match x.data().expect("data") {
                        TensorData::I32(v) => TensorData::I32([v.clone(), v].concat()),
                        TensorData::F32(v) => TensorData::F32([v.clone(), v].concat()),
                        TensorData::Bool(v) => TensorData::Bool([v.clone(), v].concat()),
                        other => other,
                    };
                    t(data, &shape)
                };
                (k, x)
            })
            .collect();
        let e = validate_trajectory(&two_rows)
            .expect_err("B = 2")
            .to_string();
        assert!(
            e.contains("with B = 2") && e.contains("one trajectory per episode"),
            "{e}"
        );
    }

    #[test]
    fn per_row_keys_follow_the_batch() {
        let d = replace(rlvr(3), "rewards", t(TensorData::F32(vec![1.0, 2.0]), &[2]));
        let e = validate_trajectory(&d).expect_err("rows").to_string();
        assert!(
            e.contains("`rewards`")
                && e.contains("f32 [1] (B from `input_ids`)")
                && e.contains("got f32 [2]"),
            "{e}"
        );
        let d = replace(
            rlvr(3),
            "is_truncated",
            t(TensorData::Bool(vec![true]), &[]),
        );
        assert!(validate_trajectory(&d).is_err());
        let d = replace(rlvr(3), "rewards", t(TensorData::F32(vec![f32::NAN]), &[1]));
        let e = validate_trajectory(&d).expect_err("nan").to_string();
        assert!(e.contains("finite") && e.contains("NaN"), "{e}");
    }
}

#[cfg(test)]
mod key_tests {
    use super::*;

    #[test]
    fn key_names_are_checked() {
        for ok in [
            "input_ids",
            "a",
            "multi_modal/pixel_values",
            "x.y-z:1",
            &"k".repeat(128),
        ] {
            check_key_name(ok).expect(ok);
        }
        for bad in [
            "",
            "__metadata__",
            "__x",
            "a b",
            "é",
            "a\n",
            "{",
            &"k".repeat(129),
        ] {
            check_key_name(bad).expect_err(bad);
        }
        let err = check_key_name("__metadata__")
            .expect_err("reserved")
            .to_string();
        assert!(err.contains("safetensors reserves"), "{err}");
    }
}
