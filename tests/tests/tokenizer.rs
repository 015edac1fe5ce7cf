//! The `tokenizer` interface seen from a workflow: the host's SmolLM2 tokenizer (GGUF) gives
//! guests the ids transformers gives (fixture recorded by scripts/fixtures/record_tokenizer_fixtures.py),
//! and its eos/pad become the default stop ids.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rollbox_runtime::{
    EpisodeOutcome, EpisodeRequest, Limits, Runtime, RuntimeConfig, Scope, Services,
    WorkflowComponent,
};
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
    let w = rt
        .load::<WorkflowComponent>(Path::new(c::TOKENIZE))
        .expect("loads");
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
            &Scope::default(),
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
    let w = rt
        .load::<WorkflowComponent>(Path::new(c::TOKENIZE))
        .expect("loads");
    let r = rt
        .run_episode(
            &Scope::default(),
            &w,
            EpisodeRequest::new("r0-s0", json!({"text": "hi", "messages": []})),
            Arc::new(Limits::default()),
        )
        .await;
    match &r.outcome {
        EpisodeOutcome::Failed(f) => assert!(
            f.to_string()
                .contains("this host has no tokenizer: give it one"),
            "{f}"
        ),
        other => panic!("expected failure, got {}", other.kind()),
    }
}

/// A runtime with the host tokenizer, fuel metering as given.
fn tokenizer_runtime(fuel: bool) -> Runtime {
    let tok = Arc::new(HostTokenizer::load(&model()).expect("tokenizer loads"));
    Runtime::new(
        RuntimeConfig {
            cache_dir: Some(test_cache_dir()),
            max_instances: 16,
            fuel,
            ..RuntimeConfig::default()
        },
        Services::new().with_tokenizer(tok),
    )
    .expect("runtime")
}

/// Host work is bounded and charged (issue 31): an encode over `max_tokenizer_bytes` is
/// refused before it runs; a long encode under a short deadline ends the episode as `timeout`
/// at its deadline; with fuel, the encode's CPU time is taken from the episode's fuel.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokenizer_calls_are_capped_timed_and_charged_to_fuel() {
    use rollbox_runtime::GuestFault;
    use std::time::{Duration, Instant};
    let text = rollbox_tests::random_words;
    let run = |rt: Runtime, text: String, limits: Limits| async move {
        let w = rt
            .load::<WorkflowComponent>(Path::new(c::TOKENIZE))
            .expect("loads");
        let data = json!({"text": text, "messages": [{"role": "user", "content": "hi"}]});
        let start = Instant::now();
        let r = rt
            .run_episode(
                &Scope::default(),
                &w,
                EpisodeRequest::new("r0-s0", data),
                Arc::new(limits),
            )
            .await;
        (r, start.elapsed())
    };
    // Over the per-call cap: refused at once, naming the limit.
    let (r, _) = run(tokenizer_runtime(false), text(2 << 20), Limits::default()).await;
    let EpisodeOutcome::Failed(GuestFault::GuestError { message }) = &r.outcome else {
        panic!("expected the guest's error, got {}", r.outcome.kind())
    };
    assert!(message.contains("LimitExceeded"), "{message}");
    assert!(message.contains("(`max_tokenizer_bytes`)"), "{message}");
    // 16 MB under a 2 s deadline: the episode ends as a timeout, long before the tens of
    // seconds the whole text takes (the bound leaves room for load, issue 52).
    let limits = Limits {
        timeout: Duration::from_secs(2),
        max_tokenizer_bytes: 32 << 20,
        ..Limits::default()
    };
    let (r, took) = run(tokenizer_runtime(false), text(16 << 20), limits).await;
    assert_eq!(r.outcome.kind(), "timeout", "{:?}", r.outcome);
    assert!(took <= Duration::from_secs(10), "{took:?}");
    // With fuel: 256 KiB of text takes hundreds of ms of host CPU, far more than 2 * 10^7
    // units (20 ms at HOST_FUEL_PER_MS), which the same episode on a short text stays within.
    let limits = Limits {
        fuel: Some(20_000_000),
        ..Limits::default()
    };
    let (small, _) = run(tokenizer_runtime(true), "hi".into(), limits.clone()).await;
    assert_eq!(small.outcome.kind(), "accepted", "{}", small.stderr);
    let (r, _) = run(tokenizer_runtime(true), text(256 << 10), limits).await;
    assert_eq!(
        r.outcome.kind(),
        "out_of_fuel",
        "host CPU {:?}, fuel {:?}",
        r.host_cpu,
        r.fuel_consumed
    );
    assert!(r.host_cpu > Duration::from_millis(1), "{:?}", r.host_cpu);
}
