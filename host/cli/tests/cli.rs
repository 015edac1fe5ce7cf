//! The `rollbox` binary end to end: `inspect`, and `run` of the rlvr workflow with the host
//! tokenizer, the replay engine and the sandboxed math reward, as a user runs it.

use std::path::PathBuf;
use std::process::Command;

use rollbox_tests::components as c;
use rollbox_tokenizer::{ChatOptions, HostTokenizer};
use serde_json::{Value, json};

fn model() -> PathBuf {
    rollbox_tests::model_path()
}

fn rollbox(args: &[&str], cache: &std::path::Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rollbox"))
        .args(args)
        .env("ROLLBOX_CACHE_DIR", cache)
        .output()
        .expect("rollbox runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn inspect_names_the_world_and_refuses_the_wrong_one() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (ok, out, _) = rollbox(&["inspect", c::WORKFLOW_RLVR], tmp.path());
    assert!(ok);
    assert!(
        out.contains("world    rollbox:workflow/workflow@0.1.0"),
        "{out}"
    );
    assert!(out.contains("rollbox:workflow/tokenizer@0.1.0"), "{out}");
    let (ok, _, err) = rollbox(&["run", c::REWARD_MATH], tmp.path());
    assert!(!ok);
    assert!(
        err.contains("is this a reward component? load it with --reward"),
        "{err}"
    );
}

#[test]
fn run_rlvr_with_tokenizer_replay_engine_and_math_reward() {
    let tmp = tempfile::tempdir().expect("tmp");
    let tok = HostTokenizer::load(&model()).expect("run scripts/fetch-model.sh");
    let messages = json!([{"role": "user", "content": "What is 6 * 7?"}]);
    let options = ChatOptions {
        extra: Some(json!({"enable_thinking": false})),
        ..ChatOptions::default()
    };
    let prompt = tok
        .apply_chat_template(&messages, &options)
        .expect("prompt");
    let output = tok
        .encode("6 * 7 = 42, so \\boxed{42}<|im_end|>", false)
        .expect("output");
    let replay = tmp.path().join("replay.jsonl");
    let record = json!({"input_ids": prompt, "output_tokens": output,
        "output_logprobs": vec![-0.5f32; output.len()], "stop_reason": "stop"});
    std::fs::write(&replay, record.to_string()).expect("write replay");
    let data = json!({"messages": messages, "answer": "42"}).to_string();
    let model_path = model().display().to_string();
    let engine = format!("replay:{}", replay.display());
    let reward = format!("math={}", c::REWARD_MATH);
    let (ok, out, err) = rollbox(
        &[
            "run",
            c::WORKFLOW_RLVR,
            "--tokenizer",
            &model_path,
            "--engine",
            &engine,
            "--reward",
            &reward,
            "--config",
            r#"{"reward": "math"}"#,
            "--data",
            &data,
            "--json",
        ],
        tmp.path(),
    );
    assert!(ok, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).expect("--json prints JSON");
    assert_eq!(v["summary"]["outcome"], "accepted");
    let names: Vec<&str> = v["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        [
            "input_ids",
            "loss_mask",
            "logprobs",
            "versions",
            "attention_mask",
            "rewards",
            "is_truncated"
        ]
    );
    assert_eq!(
        v["tensors"][0]["shape"],
        json!([1, prompt.len() + output.len()])
    );
    assert_eq!(v["stats"], json!([["reward", 1.0]]));
    assert_eq!(v["reward_calls"][0]["name"], "math");

    // --out writes the tensors as safetensors that Python loads unchanged.
    let batch = tmp.path().join("episode.safetensors");
    let batch_arg = batch.display().to_string();
    let (ok, out, err) = rollbox(
        &[
            "run",
            c::WORKFLOW_RLVR,
            "--tokenizer",
            &model_path,
            "--engine",
            &engine,
            "--reward",
            &reward,
            "--config",
            r#"{"reward": "math"}"#,
            "--data",
            &data,
            "--out",
            &batch_arg,
        ],
        tmp.path(),
    );
    assert!(ok, "{out}\n{err}");
    let py = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/check_safetensors.py"
        ))
        .arg(&batch)
        .output()
        .expect("python3 runs (.ci/run installs safetensors and numpy)");
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    let loaded: Value = serde_json::from_slice(&py.stdout).expect("JSON from check_safetensors.py");
    let t = &loaded["tensors"];
    let len = prompt.len() + output.len();
    let ids: Vec<u32> = prompt.iter().chain(&output).copied().collect();
    assert_eq!(t["input_ids"]["dtype"], "int32");
    assert_eq!(t["input_ids"]["shape"], json!([1, len]));
    assert_eq!(t["input_ids"]["data"], json!(ids));
    assert_eq!(t["attention_mask"]["dtype"], "bool");
    assert_eq!(t["attention_mask"]["data"], json!(vec![true; len]));
    let mask: Vec<i32> = (0..len).map(|i| i32::from(i >= prompt.len())).collect();
    assert_eq!(t["loss_mask"]["data"], json!(mask));
    assert_eq!(t["logprobs"]["dtype"], "float32");
    assert_eq!(t["rewards"]["shape"], json!([1]));
    assert_eq!(t["rewards"]["data"], json!([1.0]));
    assert_eq!(t["is_truncated"]["dtype"], "bool");
    let meta = &loaded["metadata"];
    assert_eq!(meta["workflow_sha256"], v["sha256"]);
    assert_eq!(meta["rollbox_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        meta["component_sha256.math"].as_str().map(str::len),
        Some(64)
    );

    // Without the reward registered, the episode fails with the registration hint, exit 1.
    let (ok, out, _) = rollbox(
        &[
            "run",
            c::WORKFLOW_RLVR,
            "--tokenizer",
            &model_path,
            "--engine",
            &engine,
            "--data",
            &data,
        ],
        tmp.path(),
    );
    assert!(!ok);
    assert!(
        out.contains("register one with --reward NAME=PATH"),
        "{out}"
    );
}
