//! Parity with AReaL's own `concat_padded_tensors`.
//!
//! The fixture was recorded by `scripts/fixtures/record_concat_fixture.py`, which runs AReaL 1.0.4's
//! `areal/utils/data.py` under torch on the committed inputs (`in/{case}/{dict}/{key}`) and
//! stores its outputs (`out/{case}/{key}`). Ours must be bit-identical, on every device.

use std::path::PathBuf;

use rollbox_tensor::{Device, HostTensor, concat_padded, read_safetensors, test_devices};

fn fixture() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tensor/concat_padded_areal.safetensors")
}

#[derive(serde::Deserialize)]
struct Case {
    name: String,
    dicts: usize,
    keys: Vec<String>,
    pad_value: f64,
}

#[test]
fn concat_padded_is_bit_identical_to_areal() {
    let file = read_safetensors(&fixture(), &Device::Cpu)
        .expect("fixture (scripts/fixtures/record_concat_fixture.py)");
    assert_eq!(
        file.metadata.get("areal_version").map(String::as_str),
        Some("1.0.4")
    );
    let cases: Vec<Case> =
        serde_json::from_str(file.metadata.get("cases").expect("cases")).expect("cases JSON");
    assert!(cases.len() >= 5, "fixture has {} cases", cases.len());
    for device in test_devices() {
        for case in &cases {
            let dicts: Vec<Vec<(String, HostTensor)>> = (0..case.dicts)
                .map(|i| {
                    case.keys
                        .iter()
                        .map(|k| {
                            let name = format!("in/{}/{i}/{k}", case.name);
                            let t = file.get(&name).unwrap_or_else(|| panic!("missing {name}"));
                            (k.clone(), t.to_device(&device).expect("to device"))
                        })
                        .collect()
                })
                .collect();
            let views: Vec<Vec<(String, &HostTensor)>> = dicts
                .iter()
                .map(|d| d.iter().map(|(k, t)| (k.clone(), t)).collect())
                .collect();
            let out = concat_padded(&views, case.pad_value)
                .unwrap_or_else(|e| panic!("case {}: {e}", case.name));
            let keys: Vec<&str> = out.iter().map(|(k, _)| k.as_str()).collect();
            assert_eq!(
                keys, case.keys,
                "case {}: key order is dict[0]'s",
                case.name
            );
            for (key, ours) in &out {
                let name = format!("out/{}/{key}", case.name);
                let theirs = file.get(&name).unwrap_or_else(|| panic!("missing {name}"));
                let ours = ours.to_device(&Device::Cpu).expect("to cpu");
                assert_eq!(ours.dtype(), theirs.dtype(), "{name} dtype");
                assert_eq!(ours.shape(), theirs.shape(), "{name} shape");
                assert_eq!(&ours, theirs, "{name} values");
            }
        }
    }
}
