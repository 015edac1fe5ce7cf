use super::*;
use rollbox_tensor::TensorData;

fn batch(row: usize, ids: Vec<i32>, len: usize) -> Batch {
    let n = ids.len() / len;
    Batch {
        tensors: vec![(
            "input_ids".into(),
            HostTensor::new(TensorData::I32(ids), vec![n, len]).expect("shape"),
        )],
        provenance: BTreeMap::from([("rollbox_version".to_string(), "test".to_string())]),
        group_sizes: vec![1],
        rows: vec![row],
        lines: vec![format!("{{\"row\":{row}}}")],
        ..Batch::default()
    }
}

#[test]
fn row_sets_hold_rows_in_words() {
    let mut s: RowSet = [3usize, 64, 65, 3, usize::MAX].into_iter().collect();
    assert_eq!(s.len(), 4);
    assert!(s.contains(3) && s.contains(64) && s.contains(usize::MAX));
    assert!(!s.contains(4) && !s.contains(63) && !s.contains(128));
    assert!(!s.insert(65));
    assert!(s.insert(0));
    assert_eq!(s.iter().collect::<Vec<_>>(), [0, 3, 64, 65, usize::MAX]);
    assert!(!s.is_empty() && RowSet::new().is_empty());
}

/// Batches the controller split are joined back into one answer, padded as AReaL pads,
/// with rows, trajectories and group sizes concatenated in order.
#[test]
fn split_batches_are_joined_into_one_answer() {
    let mut sink = MemorySink::new();
    for b in [batch(3, vec![1, 2, 3], 3), batch(5, vec![4, 5], 2)] {
        assert!(sink.prepare(b).expect("prepared").is_none());
    }
    let joined = sink.join(BTreeMap::new(), 1 << 20).expect("joined");
    let (tensors, meta) = (&joined.tensors, joined.header().expect("header"));
    assert_eq!(tensors[0].1.shape(), &[2, 3]);
    assert_eq!(
        tensors[0].1.data().expect("data"),
        TensorData::I32(vec![1, 2, 3, 4, 5, 0])
    );
    assert_eq!(meta["rows"], "[3,5]");
    assert_eq!(meta["trajectories"], r#"[{"row":3},{"row":5}]"#);
    assert_eq!(meta["group_sizes"], "[1,1]");
    assert_eq!(meta["rollbox_version"], "test");
    assert_eq!(meta["batch"], "0");
    let mut one = MemorySink::new();
    one.prepare(batch(7, vec![1], 1)).expect("prepared");
    let b = one.join(BTreeMap::new(), 1 << 20).expect("one batch");
    assert_eq!(
        (
            b.tensors[0].1.shape(),
            b.header().expect("header")["rows"].as_str()
        ),
        (&[1, 1][..], "[7]")
    );
    let b = MemorySink::new()
        .join(BTreeMap::from([("k".into(), "v".into())]), 1 << 20)
        .expect("no batch");
    assert!(b.tensors.is_empty());
    let meta = b.header().expect("header");
    assert_eq!(
        (meta["trajectories"].as_str(), meta["k"].as_str()),
        ("[]", "v")
    );
    assert!(!meta.contains_key("batch") && !meta.contains_key("multi_modal_offsets"));
}

/// Multi-modal offsets go on across the joined batches.
#[test]
fn multi_modal_offsets_continue_across_joined_batches() {
    let mut sink = MemorySink::new();
    for (row, offsets) in [
        (1, [("m.x", vec![0, 4, 6]), ("m.g", vec![0, 1, 2])]),
        (2, [("m.x", vec![0, 3]), ("m.g", vec![0, 2])]),
    ] {
        let mut b = batch(row, vec![1, 2], 2);
        b.multi_modal_offsets = offsets
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .collect();
        sink.prepare(b).expect("prepared");
    }
    let joined = sink.join(BTreeMap::new(), 1 << 20).expect("joined");
    let got: serde_json::Value =
        serde_json::from_str(&joined.header().expect("header")["multi_modal_offsets"])
            .expect("JSON");
    assert_eq!(
        got,
        serde_json::json!({"m.x": [0, 4, 6, 9], "m.g": [0, 1, 2, 4]})
    );
}
