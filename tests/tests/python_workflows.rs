//! Workflows written in Python with the SDK (`guest-sdk/python`), built by componentize-py and
//! loaded by path: AReaL's RLVRWorkflow and MultiTurnWorkflow give the Rust workflows' tensors
//! (and the AReaL layout fixture's) on every key AReaL returns; `asyncio.gather` maps to one
//! concurrent `generate-many`; rejections, exceptions (with their traceback), wrong dtypes and
//! sandbox denials are reported as such.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rollbox_engines::replay::ReplayBackend;
use rollbox_engines::testing::FakeBackend;
use rollbox_runtime::{
    EpisodeOutcome, EpisodeReport, EpisodeRequest, Limits, Runtime, Scope, Trajectory,
    WorkflowComponent,
};
use rollbox_tests::components as c;
use rollbox_tests::fixed_backend;
use rollbox_tokenizer::{ChatOptions, HostTokenizer};
use serde_json::{Value, json};

use rollbox_tests::{replay_record as record, tokenizer};

fn runtime(
    tok: &Arc<HostTokenizer>,
    backend: Arc<dyn rollbox_engines::InferenceBackend>,
) -> Runtime {
    rollbox_tests::workflow_runtime(tok, backend)
}

fn replay(records: &[String]) -> Arc<dyn rollbox_engines::InferenceBackend> {
    Arc::new(ReplayBackend::from_jsonl_str(&records.join("\n")).expect("replay"))
}

async fn run(rt: &Runtime, workflow: &str, data: Value, config: Value) -> EpisodeReport {
    rollbox_tests::run_workflow(rt, workflow, data, config).await
}

fn accepted(r: &EpisodeReport) -> &Trajectory {
    match &r.outcome {
        EpisodeOutcome::Accepted(t) => t,
        EpisodeOutcome::Failed(f) => panic!("accepted expected, got {f}"),
        EpisodeOutcome::Rejected => panic!("accepted expected, got rejected"),
    }
}

fn fault(r: &EpisodeReport) -> String {
    match &r.outcome {
        EpisodeOutcome::Failed(f) => f.to_string(),
        other => panic!("a failure expected, got {}", other.kind()),
    }
}

/// `python` has exactly AReaL's keys (`areal`), each with the same shape and data as `rust`'s.
fn same_tensors(python: &Trajectory, rust: &Trajectory, areal: &[&str]) {
    let mut keys: Vec<&str> = python.tensors.iter().map(|(k, _)| k.as_str()).collect();
    keys.sort_unstable();
    let mut want = areal.to_vec();
    want.sort_unstable();
    assert_eq!(keys, want, "the Python workflow returns AReaL's keys");
    for key in areal {
        let (p, r) = (
            python.get(key).expect("python key"),
            rust.get(key).expect("rust key"),
        );
        assert_eq!(p.shape(), r.shape(), "{key}: shape");
        assert_eq!(
            p.data().expect("data"),
            r.data().expect("data"),
            "{key}: data"
        );
    }
}

const RLVR_KEYS: &[&str] = &[
    "input_ids",
    "loss_mask",
    "logprobs",
    "versions",
    "attention_mask",
    "rewards",
];

/// The recorded cases of `tests/fixtures/rlvr/areal_layout.json` (AReaL's RLVR layout) through
/// the Python rlvr and the Rust rlvr: identical tensors on AReaL's keys, identical stats and
/// prompt/completion metadata; rows as GSM8K ships them (question + answer_key) as well.
#[tokio::test]
async fn python_rlvr_gives_the_rust_rlvr_tensors_on_areal_keys() {
    if !rollbox_tests::built(c::PYTHON_RLVR) {
        return;
    }
    let tok = tokenizer();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rlvr/areal_layout.json");
    let fixture: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json");
    let cases = fixture["cases"].as_array().expect("cases");
    assert!(!cases.is_empty());
    for (i, case) in cases.iter().enumerate() {
        let mut out = Vec::new();
        for workflow in [c::PYTHON_RLVR, c::WORKFLOW_RLVR] {
            let rt = runtime(&tok, replay(&[case["record"].to_string()]));
            rt.services()
                .set_version(case["version"].as_i64().expect("version") as i32);
            out.push(
                run(
                    &rt,
                    workflow,
                    case["row"].clone(),
                    json!({"reward": "math"}),
                )
                .await,
            );
        }
        let (py, rs) = (accepted(&out[0]), accepted(&out[1]));
        same_tensors(py, rs, RLVR_KEYS);
        // AReaL's own expected values (the fixture) for the same keys.
        for key in RLVR_KEYS {
            assert_eq!(
                serde_json::to_value(py.get(key).expect("key").shape()).expect("shape"),
                case["expected"][key]["shape"],
                "case {i}: {key} shape"
            );
        }
        assert_eq!(out[0].stats, out[1].stats, "case {i}: stats");
        let (pm, rm) = (py.metadata(), rs.metadata());
        for key in ["prompt", "completion", "stop_reason"] {
            assert_eq!(pm[key], rm[key], "case {i}: metadata {key}");
        }
    }

    // A GSM8K row as the dataset ships it, with AReaL's GSM8K instruction suffix.
    let row = json!({"question": "Natalia sold 48 clips in April and half as many in May. How many in total?", "answer": "Natalia sold 48+24 = 72 clips.\n#### 72"});
    let config = json!({"prompt_suffix": "\nPlease put your final answer within \\boxed{}."});
    let messages = json!([{"role": "user", "content": format!("{}\nPlease put your final answer within \\boxed{{}}.", row["question"].as_str().expect("q"))}]);
    let options = ChatOptions {
        add_generation_prompt: true,
        tools: None,
        extra: Some(json!({"enable_thinking": false})),
    };
    let prompt = tok
        .apply_chat_template(&messages, &options)
        .expect("prompt");
    let output = tok
        .encode("So \\boxed{72}<|im_end|>", false)
        .expect("output");
    let mut out = Vec::new();
    for workflow in [c::PYTHON_RLVR, c::WORKFLOW_RLVR] {
        let rt = runtime(&tok, replay(&[record(&prompt, &output, "stop")]));
        out.push(run(&rt, workflow, row.clone(), config.clone()).await);
    }
    same_tensors(accepted(&out[0]), accepted(&out[1]), RLVR_KEYS);
    assert_eq!(out[0].stats, vec![("reward".to_string(), 1.0)]);
}

/// The Python MultiTurnWorkflow retries with the feedback turn and discounts exactly as the
/// Rust one does (same tokens, masks, logprobs, versions, reward, stats).
#[tokio::test]
async fn python_multi_turn_gives_the_rust_multi_turn_tensors() {
    if !rollbox_tests::built(c::PYTHON_MULTI_TURN) {
        return;
    }
    let tok = tokenizer();
    let options = ChatOptions {
        add_generation_prompt: true,
        tools: None,
        extra: Some(json!({"enable_thinking": false})),
    };
    let feedback = "Wrong, try again.";
    let before = json!([{"role": "assistant", "content": "placeholder answer."}]);
    let after = json!([{"role": "assistant", "content": "placeholder answer."}, {"role": "user", "content": feedback}]);
    let a = tok
        .apply_chat_template(
            &before,
            &ChatOptions {
                add_generation_prompt: false,
                ..options.clone()
            },
        )
        .expect("a");
    let b = tok.apply_chat_template(&after, &options).expect("b");
    let fb = b[a.len()..].to_vec();
    let row = json!({
        "messages": [{"role": "user", "content": "Natalia sold 48 clips in April and half as many in May. How many in total?"}],
        "answer": "#### 72"
    });
    let p1 = tok
        .apply_chat_template(&row["messages"], &options)
        .expect("prompt");
    let out1 = tok.encode("I think it is 71", false).expect("out1");
    let eos = tok.special().eos.expect("eos");
    let p2: Vec<u32> = [p1.clone(), out1.clone(), vec![eos], fb].concat();
    let out2 = tok
        .encode("Sorry: \\boxed{72}<|im_end|>", false)
        .expect("out2");
    let records = [record(&p1, &out1, "length"), record(&p2, &out2, "stop")];
    let config = json!({"max_turns": 3, "turn_discount": 0.5, "feedback": feedback});
    let mut out = Vec::new();
    for workflow in [c::PYTHON_MULTI_TURN, c::WORKFLOW_MULTI_TURN] {
        let rt = runtime(&tok, replay(&records));
        out.push(run(&rt, workflow, row.clone(), config.clone()).await);
    }
    same_tensors(accepted(&out[0]), accepted(&out[1]), RLVR_KEYS);
    assert_eq!(out[0].stats, out[1].stats);
    assert_eq!(
        out[0].stats,
        vec![("reward".to_string(), 0.5), ("num_turns".to_string(), 2.0)]
    );
    // AReaL's checks of the settings.
    let rt = runtime(&tok, replay(&records));
    let r = run(&rt, c::PYTHON_MULTI_TURN, row, json!({"max_turns": 0})).await;
    assert!(
        fault(&r).contains("max_turns must be positive"),
        "{}",
        fault(&r)
    );
}

fn probe_runtime(backend: FakeBackend) -> (Runtime, Arc<FakeBackend>) {
    let backend = Arc::new(backend);
    (runtime(&tokenizer(), backend.clone()), backend)
}

/// Three `agenerate` calls under `asyncio.gather` reach the engine concurrently (one
/// `generate-many`), and `rollbox.merge` pads them into one batch with `rollout_reward`.
#[tokio::test]
async fn asyncio_gather_generates_concurrently() {
    if !rollbox_tests::built(c::PYTHON_PROBE) {
        return;
    }
    let (rt, backend) = probe_runtime(fixed_backend(Duration::from_millis(50)));
    let r = run(&rt, c::PYTHON_PROBE, json!({}), json!({"mode": "gather"})).await;
    let t = accepted(&r);
    assert_eq!(
        backend.max_in_flight(),
        3,
        "the three requests were in flight together"
    );
    assert_eq!(r.generate_calls, 3);
    assert_eq!(t.get("input_ids").expect("ids").shape()[0], 3);
    assert_eq!(t.f32s("rewards").expect("rewards"), vec![0.0, 1.0, 2.0]);
    assert_eq!(
        t.f32s("rollout_reward").expect("rollout_reward"),
        vec![1.0, 1.0, 1.0]
    );
    let meta = t.metadata();
    assert_eq!(meta["rids"], 3);

    // A request made alone is sent at once; one made while a task's request waits goes with
    // it (two in flight); a refused one raises at its `await`, on either path.
    let (rt, backend) = probe_runtime(fixed_backend(Duration::from_millis(50)));
    let r = run(&rt, c::PYTHON_PROBE, json!({}), json!({"mode": "batching"})).await;
    let t = accepted(&r);
    assert_eq!(backend.max_in_flight(), 2);
    assert_eq!(t.get("input_ids").expect("ids").shape()[0], 3);
    let meta = t.metadata();
    assert_eq!(meta["sdk_calls"], 3, "{meta}");
    assert_eq!(meta["error"], "invalid-argument", "{meta}");

    // Virtual time: an hour's asyncio.sleep between two generations returns at once: the
    // episode completes within its 600 s timeout (a real sleep would end it as a timeout).
    let start = std::time::Instant::now();
    let r = run(&rt, c::PYTHON_PROBE, json!({}), json!({"mode": "sleep"})).await;
    accepted(&r);
    eprintln!("an hour of virtual sleep took {:?}", start.elapsed());
    // A plain `def arun_episode` with the blocking `engine.generate`.
    let r = run(&rt, c::PYTHON_PROBE, json!({}), json!({"mode": "sync"})).await;
    assert_eq!(accepted(&r).f32s("rewards").expect("rewards"), vec![0.5]);
    // A reward called by name in AReaL's argument order, with the row as keyword arguments.
    let r = run(
        &rt,
        c::PYTHON_PROBE,
        json!({"answer": "#### 72"}),
        json!({"mode": "reward"}),
    )
    .await;
    assert_eq!(accepted(&r).f32s("rewards").expect("rewards"), vec![1.0]);
}

/// What a Python author gets wrong is reported with Python's names: `None` rejects; an
/// exception keeps its traceback; a float in an int32 tensor and a list where a tensor belongs
/// name the tensor; a file read is denied (no files in the sandbox); awaiting what nothing
/// completes is an error, not a hang.
#[tokio::test]
async fn python_errors_are_reported_with_python_names() {
    if !rollbox_tests::built(c::PYTHON_PROBE) {
        return;
    }
    let (rt, _) = probe_runtime(fixed_backend(Duration::ZERO));
    let r = run(&rt, c::PYTHON_PROBE, json!({}), json!({"mode": "reject"})).await;
    assert_eq!(r.outcome.kind(), "rejected");

    let r = run(&rt, c::PYTHON_PROBE, json!({}), json!({"mode": "raise"})).await;
    let f = fault(&r);
    assert!(f.contains("KeyError") && f.contains("missing key"), "{f}");
    assert!(
        f.contains("Traceback") && f.contains("_deep_failure") && f.contains("arun_episode"),
        "the traceback: {f}"
    );

    let r = run(
        &rt,
        c::PYTHON_PROBE,
        json!({}),
        json!({"mode": "bad_dtype"}),
    )
    .await;
    let f = fault(&r);
    assert!(f.contains("element 2 is 0.5") && f.contains("int32"), "{f}");

    let r = run(
        &rt,
        c::PYTHON_PROBE,
        json!({}),
        json!({"mode": "list_tensor"}),
    )
    .await;
    let f = fault(&r);
    assert!(
        f.contains("tensor `input_ids` is a list") && f.contains("rollbox.tensor"),
        "{f}"
    );

    let r = run(
        &rt,
        c::PYTHON_PROBE,
        json!({}),
        json!({"mode": "open_file"}),
    )
    .await;
    let f = fault(&r);
    assert!(
        f.contains("/etc/hostname")
            && f.contains("the workflow sandbox has no files")
            && (f.contains("FileNotFoundError")
                || f.contains("PermissionError")
                || f.contains("OSError")),
        "{f}"
    );

    let r = run(&rt, c::PYTHON_PROBE, json!({}), json!({"mode": "never"})).await;
    let f = fault(&r);
    assert!(f.contains("nothing will complete"), "{f}");

    let r = run(&rt, c::PYTHON_PROBE, json!({}), json!({"mode": "nope"})).await;
    assert!(fault(&r).contains("unknown mode 'nope'"), "{}", fault(&r));
}

/// `random` and `uuid.uuid4()` follow the episode's seed (the same seed, the same numbers; a
/// different seed, different ones), although the interpreter was snapshotted at build time;
/// the clock is the host's.
#[tokio::test]
async fn python_randomness_follows_the_episode_seed() {
    if !rollbox_tests::built(c::PYTHON_PROBE) {
        return;
    }
    let (rt, _) = probe_runtime(fixed_backend(Duration::ZERO));
    let w = rt
        .load::<WorkflowComponent>(Path::new(c::PYTHON_PROBE))
        .expect("workflow loads");
    let mut seen = Vec::new();
    for seed in [1u64, 2, 1] {
        let r = rt
            .run_episode(
                &Scope::default(),
                &w,
                EpisodeRequest {
                    config: json!({"mode": "entropy"}).into(),
                    seed,
                    ..EpisodeRequest::new("r0-s0", json!({}))
                },
                Arc::new(Limits::default()),
            )
            .await;
        let meta = accepted(&r).metadata();
        assert_eq!(meta["clock"], true, "{meta}");
        seen.push((meta["random"].clone(), meta["uuid"].clone()));
    }
    assert_eq!(seen[0], seen[2], "the same seed gives the same numbers");
    assert_ne!(seen[0].0, seen[1].0, "random follows the seed");
    assert_ne!(seen[0].1, seen[1].1, "uuid4 follows the seed");
}
