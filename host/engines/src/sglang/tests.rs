use super::*;
use crate::SamplingParams;

/// SGLang's documented `/generate` answers (see the fixture's `source`).
const DOCUMENTED: &str =
    include_str!("../../../../tests/fixtures/engines/sglang/documented_responses.json");

fn documented(case: &str) -> serde_json::Value {
    let all: serde_json::Value = serde_json::from_str(DOCUMENTED).expect("fixture is JSON");
    all["cases"][case]["response"].clone()
}

fn parse(value: serde_json::Value) -> Result<Segment, String> {
    parse_segment(serde_json::from_value(value).map_err(|e| e.to_string())?)
}

#[test]
fn parses_documented_answers() {
    let stop = parse(documented("stop_token")).expect("stop");
    assert_eq!(stop.finish, Finish::Stop);
    assert_eq!(stop.tokens, vec![12095, 13, 151645]);
    assert_eq!(stop.logprobs.len(), 3);
    let length = parse(documented("length")).expect("length");
    assert_eq!(length.finish, Finish::Length);
    assert_eq!(length.tokens.len(), 4);
    let abort = parse(documented("abort_before_prefill")).expect("abort");
    assert!(abort.tokens.is_empty());
    assert!(
        matches!(abort.finish, Finish::Abort { ref message, status: None }
            if message.starts_with("Abort before prefill"))
    );
    let partial = parse(documented("abort_mid_decode")).expect("abort");
    assert_eq!(partial.tokens, vec![12095, 13]);
}

#[test]
fn bad_shapes_are_named() {
    let err = parse(serde_json::json!({"meta_info": {}})).expect_err("no finish");
    assert!(err.contains("finish_reason"), "{err}");
    let err = parse(serde_json::json!({"meta_info": {
            "finish_reason": {"type": "stop"}, "output_token_logprobs": [[-0.1]]}}))
    .expect_err("short entry");
    assert!(err.contains("output_token_logprobs[0]"), "{err}");
    let err = parse(serde_json::json!({"meta_info": {"finish_reason": {"type": "eos"}}}))
        .expect_err("unknown type");
    assert!(err.contains("`eos`"), "{err}");
}

#[test]
fn builds_areal_request_and_resume_segments() {
    let mut request = GenerateRequest::new(vec![1, 2]);
    request.sampling = SamplingParams {
        max_new_tokens: 10,
        min_new_tokens: 3,
        greedy: true,
        stop_token_ids: vec![2],
        seed: Some(7),
        ..SamplingParams::default()
    };
    let body =
        serde_json::to_value(wire_request(&request, &[1, 2, 5, 6], 2, None)).expect("serialize");
    let s = &body["sampling_params"];
    assert_eq!(body["input_ids"], serde_json::json!([1, 2, 5, 6]));
    assert_eq!(s["max_new_tokens"], 8);
    assert_eq!(s["min_new_tokens"], 1);
    assert_eq!(s["temperature"], 0.0);
    assert_eq!(s["top_k"], 1);
    assert_eq!(s["stop_token_ids"], serde_json::json!([2]));
    assert_eq!(s["skip_special_tokens"], false);
    assert_eq!(s["no_stop_trim"], true);
    assert_eq!(s["sampling_seed"], 7);
    assert!(
        s.get("stop").is_none(),
        "empty stop list is left out, as AReaL does"
    );
    assert_eq!(body["return_logprob"], true);
    assert!(body.get("rid").is_none() && body.get("image_data").is_none());
}

#[test]
fn construction_checks_addresses() {
    let version = Arc::new(AtomicI32::new(0));
    let none = SglangBackend::new(SglangOptions::new(Vec::<String>::new()), version.clone());
    assert!(none.is_err());
    let tls = SglangBackend::new(SglangOptions::new(["https://h:1"]), version.clone());
    assert!(tls.err().expect("https").to_string().contains("https"));
    let ok =
        SglangBackend::new(SglangOptions::new(["h:1", "http://g:2/"]), version).expect("valid");
    assert_eq!(ok.servers(), vec!["http://h:1", "http://g:2"]);
}
