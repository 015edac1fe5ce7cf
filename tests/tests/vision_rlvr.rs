//! The vision-rlvr workflow end to end (issue 22) against AReaL 1.0.4's own
//! `VisionRLVRWorkflow`: `tests/fixtures/vision/rlvr.json` holds, per image row, the request
//! AReaL sent its engine and the tensors it returned, recorded by
//! `scripts/fixtures/record_vision_rlvr_fixture.py` with transformers' `Qwen2VLProcessor`. Here the
//! same rows run through the component on the replay engine (answering AReaL's recorded
//! prompt only), and every tensor must be equal: the expanded prompt ids, `mm_token_type_ids`,
//! masks, logprobs, versions, the reward, and `pixel_values` (sha256 of its f32 bytes) and
//! `image_grid_thw`. Then a rollout of image rows writes a batch whose multi-modal tensors split
//! back per trajectory by the `multi_modal_offsets` it records.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex};

use rollbox_engines::replay::ReplayBackend;
use rollbox_engines::{EngineError, GenerateRequest, GenerateResponse, InferenceBackend};
use rollbox_rollout::dataset::Dataset;
use rollbox_rollout::output::OutputDir;
use rollbox_rollout::{Rollout, RolloutOptions};
use rollbox_runtime::{EpisodeOutcome, Trajectory, WorkflowComponent};
use rollbox_tensor::{Device, HostTensor, TensorData, read_safetensors};
use rollbox_tests::components as c;
use rollbox_tokenizer::HostTokenizer;
use serde_json::{Value, json};
use sha2::{Digest, Sha256};

fn fixture() -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/vision/rlvr.json");
    serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("JSON")
}

/// The embedded model's tokenizer with the fixture's vision tokens added, as the recording did.
fn tokenizer(fx: &Value) -> Arc<HostTokenizer> {
    let added: Vec<&str> = fx["added_special_tokens"]
        .as_array()
        .expect("tokens")
        .iter()
        .map(|t| t.as_str().expect("token"))
        .collect();
    Arc::new(
        HostTokenizer::load(&rollbox_tests::model_path())
            .expect("tokenizer")
            .with_added_special_tokens(&added)
            .expect("tokens added"),
    )
}

/// The replay engine on the recorded answers, keeping every request it is sent.
struct Seen {
    inner: ReplayBackend,
    requests: Mutex<Vec<GenerateRequest>>,
}

#[async_trait::async_trait]
impl InferenceBackend for Seen {
    fn name(&self) -> &'static str {
        "seen"
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateResponse, EngineError> {
        self.requests.lock().expect("lock").push(request.clone());
        self.inner.generate(request).await
    }
}

fn engine(cases: &[&Value]) -> Arc<Seen> {
    let lines: Vec<String> = cases
        .iter()
        .map(|case| {
            let mut record = case["response"].clone();
            record["input_ids"] = case["request"]["input_ids"].clone();
            record.to_string()
        })
        .collect();
    Arc::new(Seen {
        inner: ReplayBackend::from_jsonl_str(&lines.join("\n")).expect("replay"),
        requests: Mutex::new(Vec::new()),
    })
}

fn config(fx: &Value, case: &Value) -> Value {
    let mut config = json!({"reward": "math", "gconfig": {"max_new_tokens": fx["max_new_tokens"]}});
    for (k, v) in case["config"].as_object().expect("case config") {
        config[k] = v.clone();
    }
    config
}

/// A tensor as the fixture records it: values, or shape and sha256 of its f32 bytes.
fn recorded(t: &HostTensor) -> Value {
    let data = t.data().expect("data");
    if let TensorData::F32(v) = &data
        && t.rank() == 2
        && t.shape()[1] > 64
    {
        let bytes: Vec<u8> = v.iter().flat_map(|x| x.to_le_bytes()).collect();
        return json!({"shape": t.shape(), "sha256": hex::encode(Sha256::digest(&bytes))});
    }
    let values = match data {
        TensorData::I32(v) => json!(v),
        TensorData::I64(v) => json!(v),
        TensorData::F32(v) => json!(v),
        TensorData::Bool(v) => json!(v),
        other => panic!("unexpected dtype {:?}", other.dtype()),
    };
    json!({"shape": t.shape(), "values": values})
}

fn check(name: &str, key: &str, got: &HostTensor, want: &Value) {
    let got = recorded(got);
    assert_eq!(got["shape"], want["shape"], "{name}: {key} shape");
    if want.get("sha256").is_some() {
        assert_eq!(got["sha256"], want["sha256"], "{name}: {key} bytes");
    } else {
        // Compared as numbers: AReaL's int64 ids against rollbox's i32, f32 exactly.
        let (g, w) = (got["values"].as_array(), want["values"].as_array());
        let (g, w) = (g.expect("values"), w.expect("values"));
        assert_eq!(g.len(), w.len(), "{name}: {key} length");
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            let same = match (a, b) {
                (Value::Bool(a), Value::Number(b)) => b.as_i64() == Some(i64::from(*a)),
                (Value::Number(a), Value::Bool(b)) => a.as_i64() == Some(i64::from(*b)),
                (Value::Number(a), Value::Number(b)) => a.as_f64() == b.as_f64(),
                _ => a == b,
            };
            assert!(same, "{name}: {key}[{i}] is {a}, AReaL's {b}");
        }
    }
}

fn trajectory(outcome: EpisodeOutcome) -> Trajectory {
    match outcome {
        EpisodeOutcome::Accepted(t) => t,
        other => panic!("episode not accepted: {other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_rows_give_areals_tensors_and_requests() {
    let fx = fixture();
    let tok = tokenizer(&fx);
    let cases: Vec<&Value> = fx["cases"].as_array().expect("cases").iter().collect();
    assert!(cases.len() >= 5);
    for case in cases {
        let name = case["name"].as_str().expect("name");
        let seen = engine(&[case]);
        let rt = rollbox_tests::workflow_runtime(&tok, seen.clone());
        let report = rollbox_tests::run_workflow(
            &rt,
            c::WORKFLOW_VISION_RLVR,
            case["row"].clone(),
            config(&fx, case),
        )
        .await;
        // The request: AReaL's prompt ids, and the images as AReaL sent them.
        {
            let requests = seen.requests.lock().expect("lock");
            assert_eq!(requests.len(), 1);
            let sent = &requests[0];
            assert_eq!(
                json!(sent.input_ids),
                case["request"]["input_ids"],
                "{name}"
            );
            assert_eq!(
                json!(sent.image_data),
                case["request"]["image_data"],
                "{name}: image_data"
            );
        }
        let t = trajectory(report.outcome);
        let expected = case["expected"].as_object().expect("expected");
        for (key, want) in expected {
            let got = t
                .tensors
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, t)| t)
                .unwrap_or_else(|| panic!("{name}: no `{key}` in the output"));
            check(name, key, got, want);
        }
        let extra: Vec<&String> = t
            .tensors
            .iter()
            .map(|(k, _)| k)
            .filter(|k| !expected.contains_key(*k))
            .collect();
        assert_eq!(
            extra,
            ["is_truncated"],
            "{name}: only rollbox's is_truncated is added"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_image_rows_fail_with_the_reason() {
    let fx = fixture();
    let tok = tokenizer(&fx);
    let case = &fx["cases"][0];
    let seen = engine(&[case]);
    let rt = rollbox_tests::workflow_runtime(&tok, seen.clone());
    let png = case["row"]["images"][0].as_str().expect("image");
    let cfg = config(&fx, case);
    let prompt = case["row"]["messages"].clone();
    for (row, cfg, want) in [
        (
            json!({"messages": prompt, "images": [{"path": "/data/cat.png"}]}),
            cfg.clone(),
            "the sandbox reads no files",
        ),
        (
            json!({"messages": prompt, "images": ["aGVsbG8gd29ybGQ="]}),
            cfg.clone(),
            "image 0",
        ),
        (
            json!({"messages": prompt, "images": [png, png]}),
            cfg.clone(),
            "1 image placeholder(s) and the row has 2 image(s)",
        ),
        (
            json!({"messages": prompt}),
            cfg.clone(),
            "the row has no `images`",
        ),
        (
            json!({"messages": prompt, "images": [png]}),
            json!({"image_token": "<|no_such|>", "reward": "math"}),
            "image_token",
        ),
        (
            json!({"messages": prompt, "images": [png], "messages_chat": "a string"}),
            cfg.clone(),
            "`messages_chat` is not a list",
        ),
    ] {
        let report = rollbox_tests::run_workflow(&rt, c::WORKFLOW_VISION_RLVR, row, cfg).await;
        let EpisodeOutcome::Failed(fault) = report.outcome else {
            panic!(
                "expected a failed episode for {want:?}, got {:?}",
                report.outcome
            );
        };
        assert!(fault.to_string().contains(want), "{fault} lacks {want:?}");
    }
    assert!(
        seen.requests.lock().expect("lock").is_empty(),
        "refused before generating"
    );
    // A row's `messages_chat` (AReaL's `vision_msg_vllm`) reaches the engine as the request's
    // chat messages, for the chat-completions path.
    let chat = json!([{"role": "user", "content": [
        {"type": "image_url", "image_url": {"url": ""}}, {"type": "text", "text": "How many?"}]}]);
    let mut row = case["row"].clone();
    row["messages_chat"] = chat.clone();
    let report = rollbox_tests::run_workflow(&rt, c::WORKFLOW_VISION_RLVR, row, cfg).await;
    assert_eq!(report.outcome.kind(), "accepted");
    let requests = seen.requests.lock().expect("lock");
    assert_eq!(requests[0].chat_messages, Some(chat));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollout_of_image_rows_splits_back_by_its_offsets() {
    let fx = fixture();
    let tok = tokenizer(&fx);
    // The cases that share the default config, each row twice (a group of 2).
    let cases: Vec<&Value> = fx["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .filter(|c| c["config"].as_object().is_some_and(|o| o.is_empty()))
        .collect();
    assert!(cases.len() >= 3);
    let seen = engine(&cases);
    let runtime = Arc::new(rollbox_tests::workflow_runtime(&tok, seen));
    let workflow = Arc::new(
        runtime
            .load::<WorkflowComponent>(Path::new(c::WORKFLOW_VISION_RLVR))
            .expect("loads"),
    );
    let rows: Vec<String> = cases.iter().map(|c| c["row"].to_string()).collect();
    let dataset = Dataset::from_bytes(rows.join("\n").as_bytes(), "rows.jsonl");
    let options = RolloutOptions {
        n_samples: 2,
        batch_size: cases.len(),
        max_concurrent: 4,
        ..RolloutOptions::default()
    };
    let rollout = Rollout {
        runtime,
        workflow,
        tokenizer: None,
        config: config(&fx, cases[0]),
        limits: Default::default(),
        options,
        provenance: BTreeMap::new(),
    };
    let tmp = tempfile::tempdir().expect("tmp");
    let mut dir = OutputDir::open(tmp.path()).expect("out dir");
    let stats = rollout
        .run(dataset, &mut dir, &mut |_| {})
        .await
        .expect("run");
    assert_eq!(stats.trajectories, 2 * cases.len(), "{stats:?}");
    let b = read_safetensors(&tmp.path().join("batch-000000.safetensors"), &Device::Cpu)
        .expect("batch");
    let offsets: Value = serde_json::from_str(&b.metadata["multi_modal_offsets"]).expect("JSON");
    let lines: Vec<Value> = serde_json::from_str(&b.metadata["trajectories"]).expect("lines");
    let pixels = b
        .get("multi_modal_input.pixel_values")
        .expect("pixel_values");
    let grids = b
        .get("multi_modal_input.image_grid_thw")
        .expect("image_grid_thw");
    let TensorData::F32(pv) = pixels.data().expect("data") else {
        panic!("pixel_values is f32")
    };
    let TensorData::I64(grid) = grids.data().expect("data") else {
        panic!("image_grid_thw is i64")
    };
    let width = pixels.shape()[1];
    let po: Vec<usize> = serde_json::from_value(offsets["multi_modal_input.pixel_values"].clone())
        .expect("pixel offsets");
    let go: Vec<usize> =
        serde_json::from_value(offsets["multi_modal_input.image_grid_thw"].clone())
            .expect("grid offsets");
    assert_eq!(po.len(), lines.len() + 1);
    assert_eq!(*po.last().expect("end"), pixels.shape()[0]);
    for (i, line) in lines.iter().enumerate() {
        let case = cases[line["row"].as_u64().expect("row") as usize];
        let want = &case["expected"];
        // This trajectory's rows: the same bytes AReaL's processor gave for its row.
        let rows = &pv[po[i] * width..po[i + 1] * width];
        let bytes: Vec<u8> = rows.iter().flat_map(|x| x.to_le_bytes()).collect();
        assert_eq!(
            json!(hex::encode(Sha256::digest(&bytes))),
            want["multi_modal_input.pixel_values"]["sha256"],
            "trajectory {i}"
        );
        assert_eq!(
            json!(grid[go[i] * 3..go[i + 1] * 3]),
            want["multi_modal_input.image_grid_thw"]["values"],
            "trajectory {i}"
        );
    }
    // A trainer reads it as safetensors with the offsets in the header.
    let summary = rollbox_tests::check_safetensors(&tmp.path().join("batch-000000.safetensors"));
    assert!(
        summary
            .to_string()
            .contains("multi_modal_input.pixel_values"),
        "{summary}"
    );
}
