//! The reference workflows end to end on the replay engine, the host SmolLM2 tokenizer and the
//! sandboxed math reward: AReaL's RLVR layout and MultiTurn retry/discount/turn-id rules.

use std::path::Path;
use std::sync::Arc;

use rollbox_runtime::{
    EpisodeOutcome, EpisodeReport, EpisodeRequest, Limits, Runtime, Scope, Trajectory,
    WorkflowComponent,
};
use rollbox_tensor::TensorData;
use rollbox_tests::components as c;
use rollbox_tokenizer::{ChatOptions, HostTokenizer};
use serde_json::{Value, json};

fn chat_options() -> ChatOptions {
    ChatOptions {
        add_generation_prompt: true,
        tools: None,
        extra: Some(json!({"enable_thinking": false})),
    }
}

use rollbox_tests::{replay_record as record, replay_runtime as runtime, tokenizer};

async fn run(rt: &Runtime, workflow: &str, data: Value, config: Value) -> EpisodeReport {
    rollbox_tests::run_workflow(rt, workflow, data, config).await
}

fn accepted(r: &EpisodeReport) -> &Trajectory {
    match &r.outcome {
        EpisodeOutcome::Accepted(t) => t,
        other => panic!(
            "accepted expected, got {} ({:?})",
            other.kind(),
            r.reward_calls
        ),
    }
}

fn i32s(t: &Trajectory, key: &str) -> Vec<i32> {
    match t
        .get(key)
        .unwrap_or_else(|| panic!("missing {key}"))
        .data()
        .expect("tensor data")
    {
        TensorData::I32(v) => v,
        other => panic!("{key} should be i32, got {other:?}"),
    }
}

fn f32s(t: &Trajectory, key: &str) -> Vec<f32> {
    match t
        .get(key)
        .unwrap_or_else(|| panic!("missing {key}"))
        .data()
        .expect("tensor data")
    {
        TensorData::F32(v) => v,
        other => panic!("{key} should be f32, got {other:?}"),
    }
}

fn bools(t: &Trajectory, key: &str) -> Vec<bool> {
    match t
        .get(key)
        .unwrap_or_else(|| panic!("missing {key}"))
        .data()
        .expect("tensor data")
    {
        TensorData::Bool(v) => v,
        other => panic!("{key} should be bool, got {other:?}"),
    }
}

fn row() -> Value {
    json!({
        "messages": [{"role": "user", "content": "Natalia sold 48 clips in April and half as many in May. How many in total?"}],
        "answer": "Natalia sold 48+24 = 72 clips.\n#### 72"
    })
}

#[tokio::test]
async fn rlvr_produces_areal_layout_scored_by_the_sandboxed_reward() {
    let tok = tokenizer();
    let prompt = tok
        .apply_chat_template(&row()["messages"], &chat_options())
        .expect("prompt");
    let right = tok
        .encode("48 / 2 = 24, 48 + 24 = 72. \\boxed{72}<|im_end|>", false)
        .expect("right");
    let wrong = tok
        .encode("The total is \\boxed{71}<|im_end|>", false)
        .expect("wrong");
    assert_eq!(right.last(), Some(&2), "ends with <|im_end|>");
    let rt = runtime(
        &tok,
        &[
            record(&prompt, &right, "stop"),
            record(&prompt, &wrong, "stop"),
        ],
    );
    rt.services().set_version(7);

    let r = run(&rt, c::WORKFLOW_RLVR, row(), json!({"reward": "math"})).await;
    let t = accepted(&r);
    let (p, o) = (prompt.len(), right.len());
    let ids: Vec<i32> = prompt.iter().chain(&right).map(|&x| x as i32).collect();
    assert_eq!(i32s(t, "input_ids"), ids);
    assert_eq!(t.get("input_ids").expect("ids").shape(), &[1, p + o]);
    assert_eq!(i32s(t, "loss_mask"), [vec![0; p], vec![1; o]].concat());
    let lp = f32s(t, "logprobs");
    assert!(lp[..p].iter().all(|&x| x == 0.0));
    assert_eq!(
        lp[p..].to_vec(),
        (0..o).map(|i| -0.1 * (i + 1) as f32).collect::<Vec<_>>()
    );
    assert_eq!(i32s(t, "versions"), [vec![-1; p], vec![7; o]].concat());
    assert_eq!(bools(t, "attention_mask"), vec![true; p + o]);
    assert_eq!(f32s(t, "rewards"), vec![1.0]);
    assert_eq!(t.get("rewards").expect("rewards").shape(), &[1]);
    assert_eq!(bools(t, "is_truncated"), vec![false]);
    assert!(t.get("turn_ids").is_none(), "RLVR has no turn_ids");
    assert_eq!(r.stats, vec![("reward".to_string(), 1.0)]);
    assert_eq!(
        t.metadata()["prompt"],
        json!(tok.decode(&prompt, false).expect("decode"))
    );
    assert!(
        t.metadata()["completion"]
            .as_str()
            .expect("completion")
            .ends_with("<|im_end|>"),
        "stop tokens kept"
    );
    assert_eq!(r.reward_calls.len(), 1);

    // The second recorded answer for the same prompt, sample 1's, is wrong.
    let w = rt
        .load::<WorkflowComponent>(std::path::Path::new(c::WORKFLOW_RLVR))
        .expect("loads");
    let request = rollbox_runtime::EpisodeRequest {
        config: json!({"reward": "math"}).into(),
        sample_index: 1,
        ..rollbox_runtime::EpisodeRequest::new("r0-s1", row())
    };
    let r = rt
        .run_episode(
            &Scope::default(),
            &w,
            request,
            std::sync::Arc::new(Default::default()),
        )
        .await;
    assert_eq!(f32s(accepted(&r), "rewards"), vec![0.0]);

    // A short budget cuts the answer: stop reason `length`, `is_truncated` true.
    let r = run(
        &rt,
        c::WORKFLOW_RLVR,
        row(),
        json!({"reward": "math", "gconfig": {"max_new_tokens": 3}}),
    )
    .await;
    let t = accepted(&r);
    assert_eq!(bools(t, "is_truncated"), vec![true]);
    assert_eq!(t.metadata()["stop_reason"], "length");
    assert_eq!(i32s(t, "loss_mask").iter().filter(|&&m| m == 1).count(), 3);
}

#[tokio::test]
async fn rlvr_reports_bad_rows_and_configs() {
    let tok = tokenizer();
    let rt = runtime(&tok, &[]);
    let r = run(
        &rt,
        c::WORKFLOW_RLVR,
        json!({"text": "no prompt column"}),
        json!({}),
    )
    .await;
    assert!(
        matches!(&r.outcome, EpisodeOutcome::Failed(f) if f.to_string().contains("`question`") && f.to_string().contains("prompt_key")),
        "{:?}",
        r.outcome
    );
    let r = run(
        &rt,
        c::WORKFLOW_RLVR,
        row(),
        json!({"gconfig": {"tempreature": 0.5}}),
    )
    .await;
    assert!(
        matches!(&r.outcome, EpisodeOutcome::Failed(f) if f.to_string().contains("unknown gconfig field `tempreature`"))
    );
}

/// GSM8K's own rows (`question`, `answer` = the whole solution) through rlvr, with AReaL's
/// instruction suffix and a system prompt; a label column named by `answer_key`.
#[tokio::test]
async fn rlvr_reads_gsm8k_rows_as_they_ship() {
    let tok = tokenizer();
    let suffix = "\nPlease put your final answer within \\boxed{}.";
    let question = "Natalia sold 48 clips in April and half as many in May. How many in total?";
    let messages = json!([
        {"role": "system", "content": "You are a careful solver."},
        {"role": "user", "content": format!("{question}{suffix}")}
    ]);
    let prompt = tok
        .apply_chat_template(&messages, &chat_options())
        .expect("prompt");
    let answer = tok
        .encode("48 + 24 = 72. \\boxed{72}<|im_end|>", false)
        .expect("answer");
    let rt = runtime(&tok, &[record(&prompt, &answer, "stop")]);
    let config = json!({
        "reward": "math",
        "prompt_suffix": suffix,
        "system_prompt": "You are a careful solver."
    });
    let gsm8k = json!({"question": question, "answer": "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 clips altogether.\n#### 72"});
    let r = run(&rt, c::WORKFLOW_RLVR, gsm8k, config.clone()).await;
    let t = accepted(&r);
    assert_eq!(
        i32s(t, "input_ids")[..prompt.len()],
        prompt.iter().map(|&x| x as i32).collect::<Vec<_>>()[..],
        "the prompt is the question with the suffix, after the system prompt"
    );
    assert_eq!(f32s(t, "rewards"), vec![1.0]);
    // The reference under another column, named by answer_key.
    let labelled = json!({"question": question, "label": "72"});
    let mut cfg = config.clone();
    cfg["answer_key"] = json!("label");
    let r = run(&rt, c::WORKFLOW_RLVR, labelled.clone(), cfg).await;
    assert_eq!(f32s(accepted(&r), "rewards"), vec![1.0]);
    let mut cfg = config;
    cfg["answer_key"] = json!("gold_label");
    let r = run(&rt, c::WORKFLOW_RLVR, labelled, cfg).await;
    assert!(
        matches!(&r.outcome, EpisodeOutcome::Failed(f) if f.to_string().contains("gold_label")),
        "{:?}",
        r.outcome
    );
}

/// Feedback-turn tokens exactly as the multi-turn workflow computes them.
fn feedback_ids(tok: &HostTokenizer, feedback: &str) -> Vec<u32> {
    let a = tok
        .apply_chat_template(
            &json!([{"role": "assistant", "content": "placeholder answer."}]),
            &ChatOptions {
                add_generation_prompt: false,
                ..chat_options()
            },
        )
        .expect("a");
    let b = tok
        .apply_chat_template(
            &json!([{"role": "assistant", "content": "placeholder answer."}, {"role": "user", "content": feedback}]),
            &chat_options(),
        )
        .expect("b");
    assert!(b.starts_with(&a));
    b[a.len()..].to_vec()
}

#[tokio::test]
async fn multi_turn_retries_discounts_and_tags_turns() {
    let tok = tokenizer();
    let feedback = "Wrong, try again.";
    let fb = feedback_ids(&tok, feedback);
    let p1 = tok
        .apply_chat_template(&row()["messages"], &chat_options())
        .expect("prompt");
    // Turn 1: wrong and cut off (no eos): the workflow appends eos, then the feedback turn.
    let out1 = tok.encode("I think it is 71", false).expect("out1");
    let p2: Vec<u32> = [p1.clone(), out1.clone(), vec![2], fb.clone()].concat();
    let out2 = tok
        .encode("Sorry: \\boxed{72}<|im_end|>", false)
        .expect("out2");
    let rt = runtime(
        &tok,
        &[record(&p1, &out1, "length"), record(&p2, &out2, "stop")],
    );
    let config =
        json!({"reward": "math", "max_turns": 3, "turn_discount": 0.5, "feedback": feedback});
    let r = run(&rt, c::WORKFLOW_MULTI_TURN, row(), config.clone()).await;
    let t = accepted(&r);
    let ids: Vec<i32> = p2.iter().chain(&out2).map(|&x| x as i32).collect();
    assert_eq!(i32s(t, "input_ids"), ids);
    let (n1, n2, nfb, np) = (out1.len(), out2.len(), fb.len() + 1, p1.len());
    assert_eq!(
        i32s(t, "loss_mask"),
        [vec![0; np], vec![1; n1], vec![0; nfb], vec![1; n2]].concat()
    );
    assert_eq!(
        i32s(t, "turn_ids"),
        [vec![-1; np], vec![0; n1], vec![-1; nfb], vec![1; n2]].concat()
    );
    assert_eq!(f32s(t, "rewards"), vec![0.5], "1.0 x 0.5^(2-1)");
    assert_eq!(bools(t, "is_truncated"), vec![false]);
    assert_eq!(
        r.stats,
        vec![("reward".to_string(), 0.5), ("num_turns".to_string(), 2.0)]
    );

    // Right at once: one turn, no discount.
    let out_ok = tok.encode("\\boxed{72}<|im_end|>", false).expect("ok");
    let rt = runtime(&tok, &[record(&p1, &out_ok, "stop")]);
    let r = run(&rt, c::WORKFLOW_MULTI_TURN, row(), config.clone()).await;
    assert_eq!(f32s(accepted(&r), "rewards"), vec![1.0]);
    assert_eq!(r.stats[1], ("num_turns".to_string(), 1.0));

    // Wrong on every turn: max_turns attempts, reward 0.
    let wrong = tok.encode("\\boxed{70}<|im_end|>", false).expect("wrong");
    let q2: Vec<u32> = [p1.clone(), wrong.clone(), fb.clone()].concat();
    let rt = runtime(
        &tok,
        &[record(&p1, &wrong, "stop"), record(&q2, &wrong, "stop")],
    );
    let r = run(
        &rt,
        c::WORKFLOW_MULTI_TURN,
        row(),
        json!({"max_turns": 2, "feedback": feedback}),
    )
    .await;
    let t = accepted(&r);
    assert_eq!(f32s(t, "rewards"), vec![0.0]);
    assert_eq!(r.stats[1], ("num_turns".to_string(), 2.0));
    assert_eq!(*i32s(t, "turn_ids").iter().max().expect("turns"), 1);

    // Invalid settings are the workflow's error.
    for bad in [
        json!({"max_turns": 0}),
        json!({"turn_discount": 0.0}),
        json!({"turn_discount": 1.5}),
    ] {
        let r = run(&rt, c::WORKFLOW_MULTI_TURN, row(), bad.clone()).await;
        assert_eq!(r.outcome.kind(), "guest_error", "{bad}");
    }
}

/// RLVR output for recorded responses equals the layout AReaL's RLVRWorkflow builds
/// (fixture by scripts/fixtures/record_rlvr_fixture.py: prompts from transformers, AReaL's rules).
#[tokio::test]
async fn rlvr_matches_the_areal_layout_fixture() {
    let tok = tokenizer();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/rlvr/areal_layout.json");
    let fixture: Value =
        serde_json::from_str(&std::fs::read_to_string(path).expect("fixture")).expect("json");
    for (i, case) in fixture["cases"]
        .as_array()
        .expect("cases")
        .iter()
        .enumerate()
    {
        let rt = runtime(&tok, &[case["record"].to_string()]);
        rt.services()
            .set_version(case["version"].as_i64().expect("version") as i32);
        let r = run(
            &rt,
            c::WORKFLOW_RLVR,
            case["row"].clone(),
            json!({"reward": "math"}),
        )
        .await;
        let t = accepted(&r);
        let expected = case["expected"].as_object().expect("expected");
        let mut keys: Vec<&str> = t.tensors.iter().map(|(k, _)| k.as_str()).collect();
        keys.sort_unstable();
        let mut want: Vec<&str> = expected.keys().map(String::as_str).collect();
        want.sort_unstable();
        assert_eq!(keys, want, "case {i}: keys");
        for (key, e) in expected {
            let tensor = t.get(key).expect("key");
            let shape: Vec<usize> = e["shape"]
                .as_array()
                .expect("shape")
                .iter()
                .map(|d| d.as_u64().expect("dim") as usize)
                .collect();
            assert_eq!(tensor.shape(), shape.as_slice(), "case {i}: {key} shape");
            let data = e["data"].as_array().expect("data");
            match tensor.data().expect("tensor data") {
                TensorData::I32(v) => {
                    let w: Vec<i32> = data
                        .iter()
                        .map(|x| x.as_i64().expect("int") as i32)
                        .collect();
                    assert_eq!(v, w, "case {i}: {key}");
                }
                TensorData::F32(v) => {
                    let w: Vec<f32> = data
                        .iter()
                        .map(|x| x.as_f64().expect("float") as f32)
                        .collect();
                    assert_eq!(v, w, "case {i}: {key}");
                }
                TensorData::Bool(v) => {
                    let w: Vec<bool> = data.iter().map(|x| x.as_bool().expect("bool")).collect();
                    assert_eq!(v, w, "case {i}: {key}");
                }
                other => panic!("case {i}: {key} has an unexpected dtype {other:?}"),
            }
        }
    }
}

#[tokio::test]
async fn merged_rows_are_padded_and_carry_rollout_reward_when_rewards_differ() {
    let rt = rollbox_tests::runtime();
    let w = rt
        .load::<WorkflowComponent>(Path::new(c::MULTI_ROW))
        .expect("loads");
    let r = rt
        .run_episode(
            &Scope::default(),
            &w,
            EpisodeRequest::new("r0-s0", json!({"rewards": [1.0, 0.0]})),
            Arc::new(Limits::default()),
        )
        .await;
    let t = accepted(&r);
    assert_eq!(t.get("input_ids").expect("ids").shape(), &[2, 5]);
    assert_eq!(i32s(t, "input_ids"), vec![1, 2, 3, 4, 5, 1, 2, 6, 0, 0]);
    assert_eq!(i32s(t, "loss_mask"), vec![0, 0, 1, 1, 1, 0, 0, 1, 0, 0]);
    assert_eq!(
        i32s(t, "versions"),
        vec![-1, -1, 4, 4, 4, -1, -1, 4, 0, 0],
        "versions pad with 0, as AReaL"
    );
    assert_eq!(
        bools(t, "attention_mask"),
        vec![true, true, true, true, true, true, true, true, false, false]
    );
    assert_eq!(f32s(t, "rewards"), vec![1.0, 0.0]);
    assert_eq!(f32s(t, "rollout_reward"), vec![0.5, 0.5]);
    assert_eq!(bools(t, "is_truncated"), vec![false, false]);
    // Equal rewards: no rollout_reward.
    let r = rt
        .run_episode(
            &Scope::default(),
            &w,
            EpisodeRequest::new("r0-s1", json!({"rewards": [1.0, 1.0]})),
            Arc::new(Limits::default()),
        )
        .await;
    assert!(accepted(&r).get("rollout_reward").is_none());
}
