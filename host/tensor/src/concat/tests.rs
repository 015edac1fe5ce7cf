//! Tests of `concat` and `concat_padded`.

use super::*;
use crate::{MAX_RANK, TensorData};

fn t(data: TensorData, shape: &[usize]) -> HostTensor {
    HostTensor::new(data, shape.to_vec()).expect("valid tensor")
}

#[test]
fn sizes_are_checked_before_anything_is_allocated() {
    // A zero-element tensor naming huge dims, padded against a small one: 4 TiB planned,
    // refused by the budget (and by plain arithmetic without one), never allocated.
    let huge = t(TensorData::I32(vec![]), &[0, u32::MAX as usize, 256]);
    let small = t(TensorData::I32(vec![1]), &[1, 1, 1]);
    let dicts = [vec![("x".into(), &huge)], vec![("x".into(), &small)]];
    let err = concat_padded_within(&dicts, 0.0, 1 << 30).expect_err("4 TiB");
    assert!(matches!(err, TensorError::TooLarge { .. }), "{err}");
    // Dims whose product is absurd are refused at creation.
    let err = HostTensor::new(
        TensorData::I32(vec![]),
        vec![0, u32::MAX as usize, u32::MAX as usize],
    )
    .expect_err("product over 2^40");
    assert!(
        err.to_string().contains("product of its dimensions"),
        "{err}"
    );
    // Ranks are bounded.
    let deep = HostTensor::new(TensorData::I32(vec![1]), vec![1; MAX_RANK + 1]);
    assert!(deep.expect_err("rank").to_string().contains("dimensions"));
    let top = t(TensorData::I32(vec![1]), &[1; MAX_RANK]);
    top.unsqueeze(0).expect_err("no dimension past MAX_RANK");
    // Many borrows of one tensor: the sum is checked first.
    let big = t(TensorData::U8(vec![0; 1 << 20]), &[1, 1 << 20]);
    let many: Vec<&HostTensor> = std::iter::repeat_n(&big, 200).collect();
    let err = concat_within(&many, 64 << 20).expect_err("200 MiB");
    assert!(
        err.to_string().contains("over the 67108864 bytes allowed"),
        "{err}"
    );
    assert_eq!(
        concat_within(&many[..64], 64 << 20)
            .expect("64 MiB")
            .shape(),
        &[64, 1 << 20]
    );
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
    assert_eq!(
        out[0].1.data().expect("data"),
        TensorData::I32(vec![1, 2, 3, 4, 7, 7])
    );
    assert_eq!(out[1].0, "attention_mask");
    assert_eq!(
        out[1].1.data().expect("data"),
        TensorData::Bool(vec![true, true, true, true, false, false])
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
        out[1].1.data().expect("data"),
        TensorData::I64(vec![1, 2, 0, 3, 4, 0, 9, 8, 7, 0, 0, 0])
    );
}

#[test]
fn multi_modal_keys_concatenate_rows_without_padding() {
    let a = t(TensorData::F32(vec![1.0; 6]), &[2, 3]);
    let b = t(TensorData::F32(vec![2.0; 3]), &[1, 3]);
    let ga = t(TensorData::I64(vec![1, 2, 1]), &[1, 3]);
    let gb = t(TensorData::I64(vec![1, 1, 1]), &[1, 3]);
    let out = concat_padded(
        &[
            vec![
                ("multi_modal_input.pixel_values".into(), &a),
                ("multi_modal_input.image_grid_thw".into(), &ga),
            ],
            vec![
                ("multi_modal_input.pixel_values".into(), &b),
                ("multi_modal_input.image_grid_thw".into(), &gb),
            ],
        ],
        0.0,
    )
    .expect("concat");
    assert_eq!(out[0].1.shape(), &[3, 3]);
    assert_eq!(
        out[0].1.data().expect("data"),
        TensorData::F32(vec![1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 2.0, 2.0, 2.0])
    );
    assert_eq!(
        out[1].1.data().expect("data"),
        TensorData::I64(vec![1, 2, 1, 1, 1, 1])
    );
    // Another patch width cannot be padded into rows of the first: refused, named.
    let c = t(TensorData::F32(vec![2.0; 4]), &[1, 4]);
    let e = concat_padded(
        &[
            vec![("multi_modal_input.pixel_values".into(), &a)],
            vec![("multi_modal_input.pixel_values".into(), &c)],
        ],
        0.0,
    )
    .expect_err("widths differ")
    .to_string();
    assert!(
        e.contains("`multi_modal_input.pixel_values`") && e.contains("without padding"),
        "{e}"
    );
}

#[test]
fn errors_name_the_problem() {
    let a = t(TensorData::I32(vec![1]), &[1, 1]);
    let v = t(TensorData::I32(vec![1]), &[1]);
    let s = t(TensorData::I32(vec![1]), &[]);
    let f = t(TensorData::F32(vec![1.0]), &[1, 1]);
    let keys =
        concat_padded(&[vec![("a".into(), &a)], vec![("b".into(), &a)]], 0.0).expect_err("keys");
    assert!(
        keys.to_string().contains("dict[1] has different keys"),
        "{keys}"
    );
    let rank =
        concat_padded(&[vec![("a".into(), &a)], vec![("a".into(), &v)]], 0.0).expect_err("rank");
    assert!(
        rank.to_string().contains("expected 2D tensors, got 1D"),
        "{rank}"
    );
    let dtype =
        concat_padded(&[vec![("a".into(), &a)], vec![("a".into(), &f)]], 0.0).expect_err("dtype");
    assert!(
        dtype.to_string().contains("dtype mismatch for `a`"),
        "{dtype}"
    );
    let scalar =
        concat_padded(&[vec![("s".into(), &s)], vec![("s".into(), &s)]], 0.0).expect_err("scalar");
    assert!(scalar.to_string().contains("scalar"), "{scalar}");
    let dup = concat_padded(&[vec![("a".into(), &a), ("a".into(), &a)]], 0.0).expect_err("dup");
    assert!(dup.to_string().contains("twice"), "{dup}");
    assert!(concat_padded(&[], 0.0).expect("empty").is_empty());
    assert!(concat(&[]).is_err());
    assert!(concat(&[&a, &t(TensorData::I32(vec![1, 2]), &[1, 2])]).is_err());
}

/// The device path (used on CUDA) and the CPU path give identical tensors.
#[test]
fn device_path_matches_cpu_path() {
    let mut state = 12345u64;
    let mut next = move |n: u64| {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (state >> 33) % n
    };
    for dtype in [
        DType::I32,
        DType::I64,
        DType::F32,
        DType::BF16,
        DType::Bool,
        DType::U8,
    ] {
        let tensors: Vec<HostTensor> = (0..5)
            .map(|_| {
                let shape = vec![
                    1 + next(2) as usize,
                    1 + next(4) as usize,
                    1 + next(5) as usize,
                ];
                let n: usize = shape.iter().product();
                let data = match dtype {
                    DType::I32 => TensorData::I32((0..n).map(|_| next(100) as i32 - 50).collect()),
                    DType::I64 => TensorData::I64((0..n).map(|_| next(100) as i64).collect()),
                    DType::F32 => TensorData::F32((0..n).map(|_| next(100) as f32 / 7.0).collect()),
                    DType::BF16 => {
                        TensorData::BF16((0..n).map(|_| 0x3f80 + next(64) as u16).collect())
                    }
                    DType::Bool => TensorData::Bool((0..n).map(|_| next(2) == 1).collect()),
                    DType::U8 => TensorData::U8((0..n).map(|_| next(256) as u8).collect()),
                };
                t(data, &shape)
            })
            .collect();
        let refs: Vec<&HostTensor> = tensors.iter().collect();
        let mut tail = vec![0usize; 2];
        let mut rows = 0;
        for x in &refs {
            rows += x.shape()[0];
            tail[0] = tail[0].max(x.shape()[1]);
            tail[1] = tail[1].max(x.shape()[2]);
        }
        for pad in [0.0, -1.0, 0.1, 3.0] {
            let shape = [rows, tail[0], tail[1]];
            let cpu = cpu_pad_cat(&refs, &shape, pad)
                .expect("cpu tensors")
                .expect("cpu");
            let dev = device_pad_cat(&refs, &tail, pad).expect("device");
            let cpu = HostTensor::from_candle(cpu, dtype).expect("wrap");
            let dev = HostTensor::from_candle(dev, dtype).expect("wrap");
            assert_eq!(cpu, dev, "{dtype} pad {pad}");
        }
    }
}

#[test]
fn pad_value_casts_like_torch() {
    let a = t(TensorData::BF16(vec![0x3f80]), &[1, 1]);
    let b = t(TensorData::BF16(vec![0x3f80, 0x3f80]), &[1, 2]);
    let out = concat_padded(&[vec![("h".into(), &a)], vec![("h".into(), &b)]], 0.1).expect("ok");
    // 0.1 rounds to the nearest bf16, 0x3dcd.
    assert_eq!(
        out[0].1.data().expect("data"),
        TensorData::BF16(vec![0x3f80, 0x3dcd, 0x3f80, 0x3f80])
    );
    let i = t(TensorData::I32(vec![5]), &[1, 1]);
    let j = t(TensorData::I32(vec![5, 6]), &[1, 2]);
    let out = concat_padded(&[vec![("i".into(), &i)], vec![("i".into(), &j)]], -1.7).expect("ok");
    let u = t(TensorData::U8(vec![5]), &[1, 1]);
    let v = t(TensorData::U8(vec![5, 6]), &[1, 2]);
    let e = concat_padded(&[vec![("u".into(), &u)], vec![("u".into(), &v)]], -0.5).expect_err("u8");
    assert!(
        e.to_string().contains("cannot be stored in `u` (u8)"),
        "{e}"
    );
    let e = concat_padded(&[vec![("i".into(), &i)], vec![("i".into(), &j)]], 3e9).expect_err("i32");
    assert!(e.to_string().contains("i32"), "{e}");
    // Float to int truncates toward zero, as torch's fill does.
    assert_eq!(
        out[0].1.data().expect("data"),
        TensorData::I32(vec![5, -1, 5, 6])
    );
}
