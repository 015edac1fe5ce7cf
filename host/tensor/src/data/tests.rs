use super::*;

#[test]
fn shape_must_match_data() {
    let err = HostTensor::new(TensorData::F32(vec![1.0; 5]), vec![2, 3]).expect_err("mismatch");
    assert_eq!(
        err.to_string(),
        "create: shape [2, 3] holds 6 elements but the data has 5"
    );
    let scalar = HostTensor::new(TensorData::F32(vec![1.0]), vec![]).expect("scalar");
    assert_eq!(scalar.rank(), 0);
    assert_eq!(scalar.data().expect("data"), TensorData::F32(vec![1.0]));
    let huge = HostTensor::new(TensorData::U8(vec![]), vec![usize::MAX, 2]).expect_err("overflow");
    assert!(
        huge.to_string().contains("product of its dimensions"),
        "{huge}"
    );
}

#[test]
fn every_dtype_round_trips() {
    let cases = [
        TensorData::I32(vec![-1, 0, i32::MAX, 7]),
        TensorData::I64(vec![i64::MIN, 0, 1, 2]),
        TensorData::F32(vec![0.5, -0.0, f32::INFINITY, 3.25]),
        TensorData::BF16(vec![0x3f80, 0xc000, 0x0000, 0x7f80]),
        TensorData::Bool(vec![true, false, false, true]),
        TensorData::U8(vec![0, 1, 254, 255]),
    ];
    for data in cases {
        let t = HostTensor::new(data.clone(), vec![2, 2]).expect("create");
        assert_eq!(t.dtype(), data.dtype());
        assert_eq!(t.as_candle().dtype(), data.dtype().candle());
        assert_eq!(t.data().expect("data"), data);
        assert_eq!(t.size_in_bytes(), 4 * data.dtype().size_in_bytes());
    }
}

#[test]
fn unsqueeze_inserts_a_unit_dim() {
    let t = HostTensor::new(TensorData::I32(vec![1, 2, 3]), vec![3]).expect("ok");
    assert_eq!(t.unsqueeze(0).expect("dim 0").shape(), &[1, 3]);
    assert_eq!(t.unsqueeze(1).expect("dim 1").shape(), &[3, 1]);
    assert!(t.unsqueeze(2).is_err());
    assert_eq!(t.size_in_bytes(), 12);
}

#[test]
fn from_candle_checks_the_storage_type() {
    let c = Tensor::from_vec(vec![1u8, 0], 2, &Device::Cpu).expect("tensor");
    let b = HostTensor::from_candle(c.clone(), DType::Bool).expect("bool over u8");
    assert_eq!(b.data().expect("data"), TensorData::Bool(vec![true, false]));
    assert!(HostTensor::from_candle(c, DType::I32).is_err());
}
