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
mod tests;

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
