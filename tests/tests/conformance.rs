//! The conformance suite: `tests/conformance/rlvr.json`, recorded by
//! `tests/conformance/record.py` from AReaL 1.0.4's own `RLVRWorkflow`, `gsm8k_reward_fn` and
//! `concat_padded_tensors` on fixed rows and fixed engine answers (some cut at
//! `max_new_tokens`, under several policy versions). Every language's rlvr component, given
//! the same answers through the replay engine and scoring with the sandboxed `math` reward,
//! must give AReaL's rewards and, joined per group with rollbox's `concat_padded`, AReaL's
//! tensors bit for bit on every key AReaL returns.

use std::path::Path;
use std::sync::Arc;

use rollbox_runtime::{
    EpisodeOutcome, EpisodeRequest, Limits, RewardComponent, Scope, WorkflowComponent,
};
use rollbox_tensor::TensorData;
use rollbox_tests::components as c;
use serde_json::Value;

/// The rlvr component of each language.
const LANGUAGES: &[(&str, &str)] = &[
    ("rust", c::WORKFLOW_RLVR),
    ("python", c::PYTHON_RLVR),
    ("js", c::JS_RLVR),
    ("c", c::C_RLVR),
];

/// The reward component of each language: the Rust `math` (math-verify's rules) and the
/// GSM8K answer matchers (last box, else `####`, else the last number) in Python and JS.
const REWARDS: &[(&str, &str)] = &[
    ("rust", c::REWARD_MATH),
    ("python", c::PYTHON_REWARD),
    ("js", c::JS_REWARD),
    ("c", c::C_REWARD),
];

fn fixture() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("conformance/rlvr.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("the fixture")).expect("JSON")
}

use rollbox_tests::replay_runtime as runtime;

/// `got` against AReaL's `{"dtype", "shape", "data"}`; `None` when equal.
fn differs(got: &rollbox_tensor::HostTensor, want: &Value) -> Option<String> {
    let shape: Vec<usize> = serde_json::from_value(want["shape"].clone()).expect("shape");
    if got.shape() != shape.as_slice() {
        return Some(format!("shape {:?}, AReaL {shape:?}", got.shape()));
    }
    let data = want["data"].as_array().expect("data");
    let (dtype, same) = match got.data().expect("tensor data") {
        TensorData::I32(v) => (
            "i32",
            v.iter()
                .zip(data)
                .all(|(a, b)| i64::from(*a) == b.as_i64().expect("int")),
        ),
        TensorData::F32(v) => (
            "f32",
            v.iter()
                .zip(data)
                .all(|(a, b)| a.to_bits() == (b.as_f64().expect("float") as f32).to_bits()),
        ),
        TensorData::Bool(v) => (
            "bool",
            v.iter()
                .zip(data)
                .all(|(a, b)| *a == b.as_bool().expect("bool")),
        ),
        other => return Some(format!("unexpected dtype {other:?}")),
    };
    if dtype != want["dtype"] {
        return Some(format!("dtype {dtype}, AReaL {}", want["dtype"]));
    }
    (!same).then(|| "data differs".to_string())
}

#[tokio::test]
async fn every_language_gives_areals_rlvr_tensors() {
    let fixture = fixture();
    let tok = rollbox_tests::tokenizer();
    let config = fixture["config"].clone();
    let mut table = Vec::new();
    let mut failures = Vec::new();
    for case in fixture["cases"].as_array().expect("cases") {
        let name = case["name"].as_str().expect("name");
        let samples = case["samples"].as_array().expect("samples");
        let records: Vec<String> = samples.iter().map(|s| s["record"].to_string()).collect();
        for (lang, component) in LANGUAGES.iter().filter(|(_, p)| rollbox_tests::built(p)) {
            let rt = runtime(&tok, &records);
            let workflow = rt
                .load::<WorkflowComponent>(Path::new(component))
                .expect("workflow loads");
            let mut outputs = Vec::new();
            let mut problems = Vec::new();
            for (i, sample) in samples.iter().enumerate() {
                let version = sample["record"]["output_versions"][0].as_i64().unwrap_or(0);
                rt.services().set_version(version as i32);
                let r = rt
                    .run_episode(
                        &Scope::default(),
                        &workflow,
                        EpisodeRequest {
                            config: config.clone().into(),
                            sample_index: i as u32,
                            ..EpisodeRequest::new(format!("r0-s{i}"), case["row"].clone())
                        },
                        Arc::new(Limits::default()),
                    )
                    .await;
                match r.outcome {
                    EpisodeOutcome::Accepted(t) => {
                        let reward = t.f32s("rewards").expect("rewards")[0];
                        if f64::from(reward) != sample["reward"].as_f64().expect("reward") {
                            problems.push(format!("sample {i}: reward {reward}"));
                        }
                        outputs.push(t);
                    }
                    other => problems.push(format!("sample {i}: {}", other.kind())),
                }
            }
            if problems.is_empty() {
                let expected = case["expected"].as_object().expect("expected");
                let dicts: Vec<Vec<(String, &rollbox_tensor::HostTensor)>> = outputs
                    .iter()
                    .map(|t| {
                        expected
                            .keys()
                            .map(|k| {
                                let tensor = t.get(k).unwrap_or_else(|| {
                                    panic!("{lang} {name}: no `{k}` in the output")
                                });
                                (k.clone(), tensor)
                            })
                            .collect()
                    })
                    .collect();
                let joined = rollbox_tensor::concat_padded(&dicts, 0.0).expect("concat_padded");
                for (key, want) in expected {
                    let got = &joined.iter().find(|(k, _)| k == key).expect("key").1;
                    if let Some(d) = differs(got, want) {
                        problems.push(format!("{key}: {d}"));
                    }
                }
            }
            table.push(format!(
                "{name:<28} {lang:<7} {}",
                if problems.is_empty() { "pass" } else { "FAIL" }
            ));
            if !problems.is_empty() {
                failures.push(format!("{lang} {name}: {}", problems.join("; ")));
            }
        }
    }
    println!("{}", table.join("\n"));
    assert!(failures.is_empty(), "{failures:#?}");
}

/// Every language's reward gives AReaL's `gsm8k_reward_fn` score on every sample of the suite
/// (the completion decoded as the workflow passes it, the row as the dataset has it).
#[tokio::test]
async fn every_language_gives_areals_rewards() {
    let fixture = fixture();
    let tok = rollbox_tests::tokenizer();
    let rt = rollbox_tests::runtime();
    let mut failures = Vec::new();
    for (lang, path) in REWARDS.iter().filter(|(_, p)| rollbox_tests::built(p)) {
        let reward = rt
            .load::<RewardComponent>(Path::new(path))
            .expect("reward loads");
        let mut n = 0;
        for case in fixture["cases"].as_array().expect("cases") {
            for sample in case["samples"].as_array().expect("samples") {
                let ids: Vec<u32> =
                    serde_json::from_value(sample["record"]["output_tokens"].clone()).expect("ids");
                let call = rollbox_runtime::RewardCall {
                    completion: tok.decode(&ids, false).expect("decode"),
                    data: case["row"].clone(),
                    ..rollbox_runtime::RewardCall::default()
                };
                let r = rt
                    .call_once(&reward, call, Arc::new(Limits::untrusted_call()))
                    .await;
                let want = sample["reward"].as_f64().expect("reward");
                if r.result != Ok(want) {
                    failures.push(format!(
                        "{lang} {}: {:?}, AReaL {want}",
                        case["name"], r.result
                    ));
                }
                n += 1;
            }
        }
        println!("{lang:<7} reward: {n} samples");
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// A JavaScript exception (or a C error return) is the component's error, with its message:
/// the reward's (retried, then reported) and the workflow's (a failed episode).
#[tokio::test]
async fn javascript_and_c_errors_keep_their_messages() {
    if !rollbox_tests::built(c::JS_REWARD) {
        return;
    }
    if !rollbox_tests::built(c::C_RLVR) {
        return;
    }
    if !rollbox_tests::built(c::JS_RLVR) {
        return;
    }
    let rt = rollbox_tests::runtime();
    let reward = rt
        .load::<RewardComponent>(Path::new(c::JS_REWARD))
        .expect("reward loads");
    let r = rt
        .call_once(
            &reward,
            rollbox_runtime::RewardCall {
                completion: "\\boxed{1}".into(),
                data: serde_json::json!({"question": "?"}),
                ..rollbox_runtime::RewardCall::default()
            },
            Arc::new(Limits::untrusted_call()),
        )
        .await;
    let err = r.result.expect_err("no answer").to_string();
    assert!(err.contains("the row has no `answer`"), "{err}");

    let rt = runtime(&rollbox_tests::tokenizer(), &[]);
    for workflow in [c::JS_RLVR, c::C_RLVR] {
        let r = rollbox_tests::run_workflow(
            &rt,
            workflow,
            serde_json::json!({"text": "?"}),
            serde_json::json!({}),
        )
        .await;
        match r.outcome {
            EpisodeOutcome::Failed(f) => {
                let f = f.to_string();
                assert!(
                    f.contains("the row has no prompt") && f.contains("prompt_key"),
                    "{workflow}: {f}"
                );
            }
            other => panic!("{workflow}: a failure expected, got {}", other.kind()),
        }
    }
}
