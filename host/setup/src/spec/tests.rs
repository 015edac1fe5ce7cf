use super::*;
use rollbox_runtime::Limits;
use rollbox_runtime::limits::LimitValue;
use std::time::Duration;

#[test]
fn components_parse_from_text_and_maps() {
    let c =
        ComponentSpec::parse("rewards/math.wasm,timeout=2s,retries=1,memory=64MiB").expect("parse");
    assert_eq!(c.path, PathBuf::from("rewards/math.wasm"));
    let p = c.policy(CallPolicy::default()).expect("policy");
    assert_eq!(p.retries, 1);
    assert_eq!(p.limits.timeout, Duration::from_secs(2));
    assert_eq!(p.limits.max_memory, 64 << 20);
    // Tool defaults stay where nothing is set.
    let t = ComponentSpec::parse("x.wasm")
        .expect("tool")
        .policy(CallPolicy::tool())
        .expect("policy");
    assert_eq!((t.retries, t.limits.timeout), (0, Duration::from_secs(5)));
    let m: ComponentSpec =
        serde_json::from_str(r#"{"path": "m.wasm", "fuel": 1000, "max_boundary_bytes": "4KiB"}"#)
            .expect("map");
    assert_eq!(m.limits.get("fuel"), Some(LimitValue::Number(1000)));
    assert_eq!(
        m.limits.get("max_boundary_bytes"),
        Some(LimitValue::Number(4096))
    );
    for bad in [
        r#""m.wasm,colour=red""#,
        r#""m.wasm,timeout""#,
        r#"{"timeout": "1s"}"#,
        r#"{"path": "m.wasm", "timeout": "soon"}"#,
        "7",
    ] {
        assert!(serde_json::from_str::<ComponentSpec>(bad).is_err(), "{bad}");
    }
    let e = ComponentSpec::parse("m.wasm,colour=red").expect_err("unknown");
    assert!(
        e.contains("retries, style, requirements or a limit (max_memory, timeout, fuel"),
        "{e}"
    );
}

#[test]
fn specs_refuse_unknown_keys_and_list_the_known_ones() {
    let e =
        serde_json::from_str::<HostSpec>(r#"{"workflow": "rlvr", "limits": {"max_memroy": 1}}"#)
            .expect_err("typo")
            .to_string();
    assert!(
        e.contains("unknown limit `max_memroy`; use max_memory, timeout"),
        "{e}"
    );
    let e = serde_json::from_str::<HostSpec>(r#"{"workflow": "rlvr", "reward": {}}"#)
        .expect_err("typo")
        .to_string();
    assert!(
        e.contains("unknown field `reward`") && e.contains("`rewards`"),
        "{e}"
    );
    let e = serde_json::from_str::<HostSpec>(r#"{"workflow": "rlvr", "config": []}"#)
        .expect_err("not an object")
        .to_string();
    assert!(e.contains("config must be a JSON object"), "{e}");
    let e =
        serde_json::from_str::<HostSpec>(r#"{"workflow": "rlvr", "limits": {"timeout": "-1s"}}"#)
            .expect_err("negative")
            .to_string();
    assert!(
        e.contains("timeout: `-1s` must be a positive duration"),
        "{e}"
    );
}

#[test]
fn limits_take_numbers_and_text_and_are_validated() {
    let s: LimitSpec = serde_json::from_str(
        r#"{"timeout": 1.5, "memory": "64MiB", "max_handles": 7, "max_output_bytes": 1024}"#,
    )
    .expect("limits");
    let l = s.apply(Limits::default()).expect("valid");
    assert_eq!(l.timeout, Duration::from_millis(1500));
    assert_eq!(l.max_memory, 64 << 20);
    assert_eq!((l.max_handles, l.max_output_bytes), (7, 1024));
    let mut big = LimitSpec::default();
    big.set_text("max_memory", "8GiB").expect("parses");
    assert!(big.apply(Limits::default()).is_err(), "past 4 GiB");
    assert!(serde_json::from_str::<LimitSpec>(r#"{"max_handles": -1}"#).is_err());
    assert!(serde_json::from_str::<LimitSpec>(r#"{"fuel": [1]}"#).is_err());
}
