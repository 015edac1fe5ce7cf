//! The parsers against `tests/parsers.json`: each case names the text and what must come out.

use rollbox_workflow_tool_agent::parse::{ends_with_marker, hermes, marked_code, truncate_middle};
use serde_json::Value;

fn fixtures() -> Value {
    serde_json::from_str(include_str!("parsers.json")).expect("parsers.json is JSON")
}

#[test]
fn hermes_fixtures() {
    let f = fixtures();
    let cases = f["hermes"].as_array().expect("hermes cases");
    assert!(cases.len() >= 15);
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let parsed = hermes(text);
        assert_eq!(parsed.unclosed, case["unclosed"] == true, "{text}");
        let want = case["calls"].as_array().expect("calls");
        assert_eq!(parsed.calls.len(), want.len(), "{text}: {parsed:?}");
        for (got, want) in parsed.calls.iter().zip(want) {
            match (got, want["error"].as_str()) {
                (Ok(call), None) => {
                    assert_eq!(call.name, want["name"], "{text}");
                    assert_eq!(
                        Value::Object(call.arguments.clone()),
                        want["arguments"],
                        "{text}"
                    );
                }
                (Err(e), Some(kind)) => {
                    assert_eq!(e.kind, kind, "{text}: {}", e.detail);
                    assert!(!e.detail.is_empty());
                }
                (got, want) => panic!("{text}: got {got:?}, want {want:?}"),
            }
        }
    }
}

#[test]
fn stop_marker_fixtures() {
    let f = fixtures();
    for case in f["stop_markers"].as_array().expect("cases") {
        let text = case["after_start"].as_str().expect("text");
        let end = case["end"].as_str().expect("end");
        assert_eq!(marked_code(text, end), case["code"].as_str(), "{text}");
    }
    for case in f["ends_with_marker"].as_array().expect("cases") {
        let text = case["text"].as_str().expect("text");
        let got = ends_with_marker(
            text,
            case["marker"].as_str().expect("marker"),
            case["eos"].as_str(),
        );
        assert_eq!(got, case["expect"] == true, "{text}");
    }
    for case in f["truncate_middle"].as_array().expect("cases") {
        let text = case["text"].as_str().expect("text");
        let max = case["max"].as_u64().expect("max") as usize;
        assert_eq!(
            truncate_middle(text, max),
            case["expect"].as_str().expect("expect")
        );
    }
}

#[test]
fn a_huge_call_is_invalid_without_parsing() {
    let body = format!(
        "<tool_call>{{\"name\": \"a\", \"arguments\": {{\"x\": \"{}\"}}}}</tool_call>",
        "y".repeat(300 << 10)
    );
    let parsed = hermes(&body);
    assert!(matches!(&parsed.calls[..], [Err(e)] if e.kind == "invalid_call"));
}
