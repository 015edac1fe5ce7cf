//! The tool-agent workflow end to end (issue 21): recorded conversations on the replay engine
//! with real tool components (python-exec, calculator) and the math reward, checked tensor by
//! tensor and against the template-equality rule: the trajectory's ids are the whole
//! conversation through the chat template, never re-tokenised.
//!
//! The recordings in `tests/fixtures/tool-agent/` come from a scripted engine (the outputs
//! below, tokenised once) through the recording backend; `ROLLBOX_RECORD_TOOL_AGENT=1`
//! writes them again. A replay answers only the exact prompt it recorded, so any change in the
//! ids the workflow sends fails here.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rollbox_engines::replay::{RecordingBackend, ReplayBackend};
use rollbox_engines::{
    EngineError, GenerateRequest, GenerateResponse, InferenceBackend, StopReason,
};
use rollbox_runtime::{
    CallPolicy, EpisodeOutcome, EpisodeReport, Limits, Runtime, RuntimeConfig, Scope, Services,
    ToolComponent, Trajectory, WorkflowComponent,
};
use rollbox_tensor::TensorData;
use rollbox_tests::components as c;
use rollbox_tokenizer::{ChatOptions, HostTokenizer};
use serde_json::{Value, json};

/// Answers each request with the next scripted output, whatever the prompt; each output's
/// versions are its index.
struct Scripted {
    outputs: Vec<(Vec<u32>, StopReason)>,
    next: Mutex<usize>,
}

#[async_trait::async_trait]
impl InferenceBackend for Scripted {
    fn name(&self) -> &'static str {
        "scripted"
    }

    async fn generate(&self, _: GenerateRequest) -> Result<GenerateResponse, EngineError> {
        let mut next = self.next.lock().expect("lock");
        let (tokens, stop) = self
            .outputs
            .get(*next)
            .cloned()
            .ok_or(EngineError::Config {
                path: "scripted".into(),
                message: "the script is over".into(),
            })?;
        let turn = *next as i32;
        *next += 1;
        Ok(GenerateResponse {
            output_logprobs: logprobs(turn, tokens.len()),
            output_versions: Some(vec![turn + 3; tokens.len()]),
            output_tokens: tokens,
            stop_reason: stop,
            ttft: None,
        })
    }
}

/// The logprobs scripted for output `turn`.
fn logprobs(turn: i32, n: usize) -> Vec<f32> {
    (0..n)
        .map(|i| -0.01 * (i as f32 + 1.0) - turn as f32)
        .collect()
}

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/tool-agent")
        .join(name)
}

/// The SmolLM2 tokenizer, or the same vocabulary with the Hermes-layout tool template.
fn tokenizer(hermes_template: bool) -> Arc<HostTokenizer> {
    let tok = HostTokenizer::load(&rollbox_tests::model_path()).expect("tokenizer");
    if !hermes_template {
        return Arc::new(tok);
    }
    let template =
        std::fs::read_to_string(fixture("hermes-template.jinja")).expect("template fixture");
    Arc::new(tok.with_chat_template(&template).expect("template"))
}

/// A runtime on `backend` with python-exec as `python` (the tool defaults, or a 1 s timeout
/// with `short_timeout`), the calculator as `calculator` and the math reward.
fn runtime(
    tok: &Arc<HostTokenizer>,
    backend: Arc<dyn InferenceBackend>,
    short_timeout: bool,
) -> Runtime {
    let rt = rollbox_tests::workflow_runtime(tok, backend);
    let mut python = CallPolicy::tool();
    if short_timeout {
        python.limits = Arc::new(Limits {
            timeout: std::time::Duration::from_secs(1),
            ..Limits::untrusted_tool()
        });
    }
    rt.register::<ToolComponent>("python", Path::new(c::PYTHON_EXEC_TOOL), python)
        .expect("python-exec");
    rt.register::<ToolComponent>(
        "calculator",
        Path::new(c::TOOL_CALCULATOR),
        CallPolicy::tool(),
    )
    .expect("calculator");
    rt
}

/// Run one episode on the recording `name` (or record it from `script` first).
async fn episode(
    tok: &Arc<HostTokenizer>,
    name: &str,
    script: &[(&str, StopReason)],
    config: Value,
) -> (EpisodeReport, Vec<Vec<u32>>) {
    let eos = tok.special().eos.expect("eos");
    let outputs: Vec<(Vec<u32>, StopReason)> = script
        .iter()
        .map(|(text, stop)| {
            let mut ids = tok.encode(text, false).expect("encode");
            if *stop == StopReason::Stop && !text.ends_with("```python") && !text.ends_with("```") {
                ids.push(eos);
            }
            (ids, *stop)
        })
        .collect();
    let path = fixture(name);
    if std::env::var_os("ROLLBOX_RECORD_TOOL_AGENT").is_some() {
        let _ = std::fs::remove_file(&path);
        let scripted = Arc::new(Scripted {
            outputs: outputs.clone(),
            next: Mutex::new(0),
        });
        let recording = RecordingBackend::new(scripted, &path).expect("record file");
        let rt = runtime(tok, Arc::new(recording), true);
        run(&rt, config.clone()).await;
    }
    let replay = ReplayBackend::from_file(&path)
        .expect("the recording (ROLLBOX_RECORD_TOOL_AGENT=1 writes it)");
    let rt = runtime(tok, Arc::new(replay), true);
    let report = run(&rt, config).await;
    (report, outputs.into_iter().map(|o| o.0).collect())
}

async fn run(rt: &Runtime, config: Value) -> EpisodeReport {
    let data = json!({"question": "What is 6 times 7?", "answer": "42"});
    let w = rt
        .load::<WorkflowComponent>(Path::new(c::WORKFLOW_TOOL_AGENT))
        .expect("tool-agent loads");
    rt.run_episode(
        &Scope::default(),
        &w,
        rollbox_runtime::EpisodeRequest {
            config: config.into(),
            ..rollbox_runtime::EpisodeRequest::new("r0-s0", data)
        },
        Arc::new(Limits::default()),
    )
    .await
}

fn accepted(r: &EpisodeReport) -> &Trajectory {
    match &r.outcome {
        EpisodeOutcome::Accepted(t) => t,
        other => panic!(
            "accepted expected, got {} ({:?}; {:?})",
            other.kind(),
            other,
            r.logs
        ),
    }
}

fn ints(t: &Trajectory, key: &str) -> Vec<i32> {
    match t.get(key).expect(key).data().expect("data") {
        TensorData::I32(v) => v,
        other => panic!("{key}: {other:?}"),
    }
}

fn floats(t: &Trajectory, key: &str) -> Vec<f32> {
    match t.get(key).expect(key).data().expect("data") {
        TensorData::F32(v) => v,
        other => panic!("{key}: {other:?}"),
    }
}

/// Check the tensors against the scripted outputs: every output appears in order with loss
/// mask 1, its logprobs, versions and turn id; everything else is context (mask 0, logprob 0,
/// version -1, turn -1). Returns where each output starts.
fn check_tensors(t: &Trajectory, outputs: &[Vec<u32>]) -> Vec<usize> {
    let ids = ints(t, "input_ids");
    let mask = ints(t, "loss_mask");
    let lp = floats(t, "logprobs");
    let versions = ints(t, "versions");
    let turns = ints(t, "turn_ids");
    let n = ids.len();
    for v in [&mask, &versions, &turns] {
        assert_eq!(v.len(), n);
    }
    assert_eq!(lp.len(), n);
    let mut starts = Vec::new();
    let mut pos = 0;
    for (turn, out) in outputs.iter().enumerate() {
        // The output starts at the first trained token after `pos`.
        let start = (pos..n).find(|&i| mask[i] == 1).expect("an output");
        for i in pos..start {
            assert_eq!(
                (mask[i], lp[i], versions[i], turns[i]),
                (0, 0.0, -1, -1),
                "context at {i}"
            );
        }
        let got: Vec<u32> = ids[start..start + out.len()]
            .iter()
            .map(|&i| i as u32)
            .collect();
        assert_eq!(&got, out, "output {turn}");
        let want_lp = logprobs(turn as i32, out.len());
        for (k, i) in (start..start + out.len()).enumerate() {
            assert_eq!(mask[i], 1);
            assert_eq!(lp[i], want_lp[k]);
            assert_eq!(versions[i], turn as i32 + 3);
            assert_eq!(turns[i], turn as i32);
        }
        starts.push(start);
        pos = start + out.len();
    }
    assert!(
        mask[pos..].iter().all(|&m| m == 0),
        "context after the last output"
    );
    starts
}

/// The episode's counts and why it ended, from its metadata.
fn check_counts(meta: &Value, turns: u64, tool_calls: u64, invalid_calls: u64, end: &str) {
    assert_eq!(
        (
            &meta["turns"],
            &meta["tool_calls"],
            &meta["invalid_calls"],
            &meta["end"]
        ),
        (
            &json!(turns),
            &json!(tool_calls),
            &json!(invalid_calls),
            &json!(end)
        ),
        "{meta}"
    );
}

/// The template-equality rule: the ids are the conversation (metadata) through the template,
/// up to what the template puts after the final end-of-turn token.
fn check_template_equality(tok: &HostTokenizer, t: &Trajectory, options: &ChatOptions) {
    let ids: Vec<u32> = ints(t, "input_ids").iter().map(|&i| i as u32).collect();
    let conversation = &t.metadata()["conversation"];
    let whole = tok
        .apply_chat_template(
            conversation,
            &ChatOptions {
                add_generation_prompt: false,
                ..options.clone()
            },
        )
        .expect("template");
    assert!(
        whole.starts_with(&ids),
        "the ids are not the conversation through the template:\nids:   {}\nwhole: {}",
        tok.decode(&ids, false).unwrap_or_default(),
        tok.decode(&whole, false).unwrap_or_default()
    );
    let rest = tok.decode(&whole[ids.len()..], false).expect("decode");
    assert!(rest.trim().is_empty(), "after the last turn: {rest:?}");
}

const SCRIPT: &[(&str, StopReason)] = &[
    (
        "I will use Python.\n<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"print(6 * 7)\"}}\n</tool_call>",
        StopReason::Stop,
    ),
    (
        "Let me check with the calculator.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"6 * 7\"}}\n</tool_call>",
        StopReason::Stop,
    ),
    (
        "Once more.\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {expression: 6 * 7}}\n</tool_call>",
        StopReason::Stop,
    ),
    (
        "Both tools agree. The answer is \\boxed{42}.",
        StopReason::Stop,
    ),
];

async fn hermes_episode(hermes_template: bool, recording: &str) {
    let tok = tokenizer(hermes_template);
    let (report, outputs) = episode(&tok, recording, SCRIPT, json!({"max_turns": 5})).await;
    let t = accepted(&report);
    check_tensors(t, &outputs);
    let meta = t.metadata();
    check_counts(&meta, 4, 2, 1, "answer");
    let tool_messages: Vec<&Value> = meta["conversation"]
        .as_array()
        .expect("conversation")
        .iter()
        .filter(|m| m["role"] == "tool")
        .collect();
    assert_eq!(tool_messages.len(), 3, "{meta}");
    let py: Value = serde_json::from_str(tool_messages[0]["content"].as_str().expect("text"))
        .expect("python-exec output");
    assert_eq!((&py["ok"], &py["stdout"]), (&json!(true), &json!("42\n")));
    assert_eq!(tool_messages[1]["content"], "{\"result\":42.0}");
    assert!(
        tool_messages[2]["content"]
            .as_str()
            .is_some_and(|c| c.starts_with("error: invalid_json: ")),
        "{}",
        tool_messages[2]
    );
    assert_eq!(floats(t, "rewards"), vec![1.0]);
    let stats: std::collections::HashMap<_, _> = report.stats.iter().cloned().collect();
    assert_eq!(stats["turns"], 4.0);
    assert_eq!(stats["tool_calls"], 2.0);
    assert_eq!(stats["invalid_calls"], 1.0);
    assert!(stats["tool_ms"] > 0.0);
    let options = ChatOptions {
        add_generation_prompt: true,
        tools: if hermes_template {
            Some(tool_schemas().await)
        } else {
            None
        },
        extra: Some(json!({"enable_thinking": false})),
    };
    check_template_equality(&tok, t, &options);
}

/// The schemas the workflow passed: python-exec's and the calculator's, as the host gives them.
async fn tool_schemas() -> Value {
    let rt = Runtime::new(RuntimeConfig::default(), Services::new()).expect("runtime");
    rt.register::<ToolComponent>(
        "calculator",
        Path::new(c::TOOL_CALCULATOR),
        CallPolicy::default(),
    )
    .expect("calculator");
    rt.register::<ToolComponent>(
        "python",
        Path::new(c::PYTHON_EXEC_TOOL),
        CallPolicy::default(),
    )
    .expect("python");
    rt.tool_schemas(&Scope::default()).await.expect("schemas")
}

#[tokio::test(flavor = "multi_thread")]
async fn hermes_on_the_smollm2_template() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    hermes_episode(false, "hermes-smollm2.jsonl").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn hermes_on_a_qwen25_style_tool_template() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    hermes_episode(true, "hermes-qwen25-style.jsonl").await;
}

#[tokio::test(flavor = "multi_thread")]
async fn stop_markers_run_the_block_and_append_its_output_inline() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let tok = tokenizer(false);
    let script: &[(&str, StopReason)] = &[
        ("Let me compute it.\n```python", StopReason::Stop),
        ("\nprint(6 * 7)\n```", StopReason::Stop),
        ("\nSo the answer is \\boxed{42}.", StopReason::Stop),
    ];
    let (report, outputs) = episode(
        &tok,
        "stop-markers-smollm2.jsonl",
        script,
        json!({"parser": "stop-markers", "tools": ["python"]}),
    )
    .await;
    let t = accepted(&report);
    let starts = check_tensors(t, &outputs);
    let ids = ints(t, "input_ids");
    // Between the code and the answer: the tool output, inline, as its own tokens.
    let between: Vec<u32> = ids[starts[1] + outputs[1].len()..starts[2]]
        .iter()
        .map(|&i| i as u32)
        .collect();
    let text = tok.decode(&between, false).expect("decode");
    assert!(
        text.starts_with("```output\n{\"ok\": true, \"stdout\": \"42\\n\""),
        "{text:?}"
    );
    assert_eq!(between, tok.encode(&text, false).expect("encode"));
    let meta = t.metadata();
    assert_eq!(
        (&meta["tool_calls"], &meta["end"]),
        (&json!(1), &json!("answer")),
        "{meta}"
    );
    assert_eq!(floats(t, "rewards"), vec![1.0]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_call_cut_by_length_ends_the_episode_truncated() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let tok = tokenizer(false);
    let script: &[(&str, StopReason)] = &[(
        "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expr",
        StopReason::Length,
    )];
    let (report, outputs) = episode(&tok, "length-in-call-smollm2.jsonl", script, json!({})).await;
    let t = accepted(&report);
    check_tensors(t, &outputs);
    assert_eq!(t.metadata()["end"], "length_in_tool_call");
    assert_eq!(t.metadata()["tool_calls"], 0);
    match t
        .get("is_truncated")
        .expect("is_truncated")
        .data()
        .expect("data")
    {
        TensorData::Bool(v) => assert_eq!(v, vec![true]),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn limits_and_failures_are_observations() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let tok = tokenizer(false);
    let script: &[(&str, StopReason)] = &[
        (
            "Three at once.\n<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"print('x' * 5000)\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"1 + 1\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"1\"}}\n</tool_call>",
            StopReason::Stop,
        ),
        (
            "<tool_call>\n{\"name\": \"search\", \"arguments\": {\"q\": \"6*7\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"python\", \"arguments\": {\"code\": \"while True: pass\"}}\n</tool_call>",
            StopReason::Stop,
        ),
        (
            "<tool_call>\n{\"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": \"python\", \"arguments\": [1]}\n</tool_call>",
            StopReason::Stop,
        ),
    ];
    let (report, outputs) = episode(
        &tok,
        "limits-smollm2.jsonl",
        script,
        json!({"max_parallel_calls": 2, "max_invalid_calls": 2, "max_tool_output_chars": 64, "max_turns": 6}),
    )
    .await;
    let t = accepted(&report);
    check_tensors(t, &outputs);
    let meta = t.metadata();
    check_counts(&meta, 3, 3, 3, "max_invalid_calls");
    let observed: Vec<String> = meta["conversation"]
        .as_array()
        .expect("conversation")
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().expect("text").to_string())
        .collect();
    // Turn 1: two calls run, the third is over max_parallel_calls; the long output is cut in
    // the middle to 64 characters plus the marker.
    assert_eq!(observed.len(), 5, "{observed:?}");
    assert_eq!(
        observed[0].chars().count(),
        64 + "...(truncated)...".len(),
        "{}",
        observed[0]
    );
    assert!(
        observed[0].starts_with("{\"ok\": true, \"stdout\": \"xxx")
            && observed[0].contains("...(truncated)...")
    );
    assert_eq!(observed[1], "{\"result\":2.0}");
    assert!(
        observed[2].starts_with("error: limit_exceeded: at most 2 tool call(s) run per turn"),
        "{}",
        observed[2]
    );
    // Turn 2: an unknown tool, and a snippet stopped by the tool's 1 s timeout.
    assert!(
        observed[3].starts_with(
            "error: unknown_tool: no tool named `search`; the tools are: calculator, python"
        ),
        "{}",
        observed[3]
    );
    assert!(
        observed[4].starts_with(
            "error: timeout: tool `python` failed on all 1 attempts: timed out after 1000 ms"
        ),
        "{}",
        observed[4]
    );
    // Turn 3: two more invalid calls are one past max_invalid_calls: the episode ends there,
    // with no tool turn after the last output.
    assert_eq!(
        ints(t, "loss_mask").last(),
        Some(&1),
        "ends on the model's output"
    );
    let tool_ms = report
        .stats
        .iter()
        .find(|(k, _)| k == "tool_ms")
        .map(|s| s.1);
    assert!(tool_ms.is_some_and(|ms| ms >= 1000.0), "{tool_ms:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_assistant_token_budget_ends_the_episode() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let tok = tokenizer(false);
    let first = "<tool_call>\n{\"name\": \"calculator\", \"arguments\": {\"expression\": \"6 * 7\"}}\n</tool_call>";
    let budget = tok.encode(first, false).expect("encode").len() + 1;
    let script: &[(&str, StopReason)] = &[(first, StopReason::Stop)];
    let (report, outputs) = episode(
        &tok,
        "budget-smollm2.jsonl",
        script,
        json!({"max_new_tokens_total": budget}),
    )
    .await;
    let t = accepted(&report);
    check_tensors(t, &outputs);
    let meta = t.metadata();
    assert_eq!(
        (&meta["end"], &meta["tool_calls"]),
        (&json!("max_new_tokens_total"), &json!(1)),
        "{meta}"
    );
    match t
        .get("is_truncated")
        .expect("is_truncated")
        .data()
        .expect("data")
    {
        TensorData::Bool(v) => assert_eq!(v, vec![true]),
        other => panic!("{other:?}"),
    }
    // The tool turn after the call is context, and no second generation was asked for.
    assert_eq!(ints(t, "loss_mask").last(), Some(&0));
}

/// With `sessions: ["python"]`, the episode's python-exec calls run in one instance: the second
/// block reads the variable the first defined (a fresh instance per call says `NameError`).
#[tokio::test(flavor = "multi_thread")]
async fn a_session_keeps_the_interpreters_state_across_blocks() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let tok = tokenizer(false);
    let script: &[(&str, StopReason)] = &[
        ("Let me compute it.\n```python", StopReason::Stop),
        ("\nx = 6 * 7\n```", StopReason::Stop),
        ("\nNow print it.\n```python", StopReason::Stop),
        ("\nprint(x)\n```", StopReason::Stop),
        ("\nSo the answer is \\boxed{42}.", StopReason::Stop),
    ];
    let config = json!({"parser": "stop-markers", "tools": ["python"], "sessions": ["python"], "max_turns": 4});
    let (report, outputs) = episode(&tok, "session-smollm2.jsonl", script, config).await;
    let t = accepted(&report);
    let starts = check_tensors(t, &outputs);
    let ids = ints(t, "input_ids");
    let between: Vec<u32> = ids[starts[3] + outputs[3].len()..starts[4]]
        .iter()
        .map(|&i| i as u32)
        .collect();
    let text = tok.decode(&between, false).expect("decode");
    assert!(
        text.starts_with("```output\n{\"ok\": true, \"stdout\": \"42\\n\""),
        "{text:?}"
    );
    let meta = t.metadata();
    assert_eq!(
        (&meta["tool_calls"], &meta["end"]),
        (&json!(2), &json!("answer")),
        "{meta}"
    );
    assert_eq!(floats(t, "rewards"), vec![1.0]);
}
