use super::*;

/// What readers would refuse is refused when writing: a reserved tensor name, and a header
/// (names, shapes, metadata) over the format's 100 MB cap.
#[test]
fn unreadable_files_are_not_written() {
    let t = HostTensor::new(TensorData::I32(vec![1]), vec![1]).expect("t");
    let err = to_safetensors_bytes(&[("__metadata__".to_string(), t.clone())], &BTreeMap::new())
        .expect_err("reserved name");
    assert!(err.to_string().contains("safetensors reserves"), "{err}");
    let meta = BTreeMap::from([(
        "trajectories".to_string(),
        "x".repeat(MAX_SAFETENSORS_HEADER_BYTES),
    )]);
    let err = to_safetensors_bytes(&[("input_ids".to_string(), t.clone())], &meta)
        .expect_err("header over the cap");
    assert!(matches!(err, TensorError::TooLarge { .. }), "{err}");
    let meta = BTreeMap::from([("trajectories".to_string(), "[]".to_string())]);
    to_safetensors_bytes(&[("input_ids".to_string(), t)], &meta).expect("a normal file");
}

#[test]
fn round_trip_keeps_names_dtypes_shapes_and_metadata() {
    let tensors = vec![
        (
            "input_ids".to_string(),
            HostTensor::new(TensorData::I32(vec![1, 2, 3, 4]), vec![2, 2]).expect("t"),
        ),
        (
            "attention_mask".to_string(),
            HostTensor::new(TensorData::Bool(vec![true, true, true, false]), vec![2, 2])
                .expect("t"),
        ),
        (
            "half".to_string(),
            HostTensor::new(TensorData::BF16(vec![0x3f80, 0x4000]), vec![2]).expect("t"),
        ),
        (
            "ids64".to_string(),
            HostTensor::new(TensorData::I64(vec![-5]), vec![1]).expect("t"),
        ),
    ];
    let mut meta = BTreeMap::new();
    meta.insert("rollbox_version".to_string(), "0.1.0".to_string());
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("batch-000000.safetensors");
    write_safetensors(&path, &tensors, &meta).expect("write");
    let back = read_safetensors(&path, &Device::Cpu).expect("read");
    assert_eq!(back.metadata, meta);
    assert_eq!(back.tensors.len(), tensors.len());
    for (name, t) in &tensors {
        assert_eq!(back.get(name), Some(t), "{name}");
    }
    // The header says BOOL for the mask, whatever candle stores.
    let bytes = std::fs::read(&path).expect("bytes");
    let st = SafeTensors::deserialize(&bytes).expect("parse");
    assert_eq!(
        st.tensor("attention_mask").expect("mask").dtype(),
        Dtype::BOOL
    );
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .expect("dir")
        .map(|e| e.expect("entry").file_name())
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn unreadable_input_is_an_error() {
    let err = from_safetensors_bytes(b"not a safetensors file", &Device::Cpu).expect_err("bad");
    assert!(err.to_string().contains("read_safetensors"), "{err}");
    let err = read_safetensors(Path::new("/nonexistent/x.safetensors"), &Device::Cpu)
        .expect_err("missing");
    assert!(
        err.to_string().contains("/nonexistent/x.safetensors"),
        "{err}"
    );
}

#[test]
fn header_metadata_is_read_without_the_tensors() {
    let dir = tempfile::tempdir().expect("tmp");
    let path = dir.path().join("b.safetensors");
    let t = HostTensor::new(TensorData::I32(vec![1, 2]), vec![2]).expect("t");
    let meta = BTreeMap::from([("rows".to_string(), "[3]".to_string())]);
    write_safetensors(&path, &[("x".to_string(), t)], &meta).expect("write");
    assert_eq!(read_safetensors_metadata(&path).expect("read"), meta);
    std::fs::write(&path, u64::MAX.to_le_bytes()).expect("write");
    let e = read_safetensors_metadata(&path).expect_err("implausible header");
    assert!(e.to_string().contains("over the format's cap"), "{e}");
}
