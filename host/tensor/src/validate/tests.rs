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
