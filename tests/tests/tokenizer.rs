//! The `tokenizer` interface seen from a workflow: the host's SmolLM2 tokenizer (GGUF) gives
//! guests the ids transformers gives (fixture recorded by scripts/record_tokenizer_fixtures.py),
//! and its eos/pad become the default stop ids.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rollbox_runtime::{EpisodeOutcome, EpisodeRequest, Limits, Runtime, RuntimeConfig, Services};
use rollbox_tests::components as c;
use rollbox_tests::test_cache_dir;
use rollbox_tokenizer::HostTokenizer;
use serde_json::{Value, json};

fn model() -> PathBuf {
    rollbox_tests::model_path()
}

fn fixture() -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/tokenizer/smollm2.json");
    serde_json::from_str(&std::fs::read_to_string(p).expect("fixture")).expect("json")
}

#[tokio::test]
async fn workflows_tokenize_on_the_host_like_transformers() {
    let tok = Arc::new(HostTokenizer::load(&model()).expect("tokenizer loads"));
    let services = Services::new().with_tokenizer(tok);
    assert_eq!(
        services.default_stop_ids(),
        &[2],
        "pad and eos are both <|im_end|> (id 2)"
    );
    let rt = Runtime::new(
        RuntimeConfig {
            cache_dir: Some(test_cache_dir()),
            max_instances: 16,
            ..RuntimeConfig::default()
        },
        services,
    )
    .expect("runtime");
    let w = rt.load_workflow(Path::new(c::TOKENIZE)).expect("loads");
    let f = fixture();
    let enc = &f["encode"][8];
    let chat = f["chat"]
        .as_array()
        .expect("chats")
        .iter()
        .find(|c| c["name"] == "multi_turn")
        .expect("multi_turn");
    let r = rt
        .run_episode(
            &w,
            EpisodeRequest::new(
                "r0-s0",
                json!({"text": enc["text"], "messages": chat["messages"]}),
            ),
            Arc::new(Limits::default()),
        )
        .await;
    let EpisodeOutcome::Accepted(t) = &r.outcome else {
        panic!("accepted expected, got {} {}", r.outcome.kind(), r.stderr)
    };
    let m = &t.metadata();
    assert_eq!(m["ids"], enc["ids"]);
    assert_eq!(m["decoded"], enc["decoded"]);
    assert_eq!(m["chat_ids"], chat["ids"]);
    assert_eq!(m["chat_text"], chat["text"]);
    assert!(
        m["bad"]
            .as_str()
            .expect("error")
            .contains("messages is not valid JSON"),
        "{m}"
    );
    assert_eq!(
        (m["bos"].clone(), m["eos"].clone(), m["pad"].clone()),
        (json!(1), json!(2), json!(2))
    );
}

#[tokio::test]
async fn without_a_tokenizer_calls_say_how_to_load_one() {
    let rt = rollbox_tests::runtime();
    let w = rt.load_workflow(Path::new(c::TOKENIZE)).expect("loads");
    let r = rt
        .run_episode(
            &w,
            EpisodeRequest::new("r0-s0", json!({"text": "hi", "messages": []})),
            Arc::new(Limits::default()),
        )
        .await;
    match &r.outcome {
        EpisodeOutcome::Failed(f) => assert!(f.to_string().contains("--tokenizer"), "{f}"),
        other => panic!("expected failure, got {}", other.kind()),
    }
}
