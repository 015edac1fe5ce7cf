//! Registered rewards called from workflows and from the host: AsyncRewardWrapper semantics
//! (timeouts really stop the guest, retries, 0.0 after the last timeout), typed errors, limits.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollbox_runtime::{
    CallPolicy, EpisodeOutcome, EpisodeRequest, Limits, RewardCall, RewardComponent, Runtime,
    Scope, ToolComponent, WorkflowComponent,
};
use rollbox_tensor::TensorData;
use rollbox_tests::components as c;
use rollbox_tests::runtime;
use serde_json::json;

fn policy(timeout_ms: u64, retries: u32) -> CallPolicy {
    CallPolicy {
        limits: Arc::new(Limits {
            timeout: Duration::from_millis(timeout_ms),
            ..Limits::untrusted_call()
        }),
        retries,
    }
}

/// Run the echo workflow scoring with reward `name`; return the reward tensor and the report.
async fn echo_with_reward(
    rt: &Runtime,
    name: &str,
    row: serde_json::Value,
) -> rollbox_runtime::EpisodeReport {
    let echo = rt
        .load::<WorkflowComponent>(Path::new(c::WORKFLOW_ECHO))
        .expect("echo loads");
    let mut data = row;
    data["input_ids"] = json!([1, 2, 3]);
    rt.run_episode(
        &Scope::default(),
        &echo,
        EpisodeRequest {
            config: json!({"reward": name}).into(),
            ..EpisodeRequest::new("r0-s0", data)
        },
        Arc::new(Limits::default()),
    )
    .await
}

fn reward_of(r: &rollbox_runtime::EpisodeReport) -> f32 {
    match &r.outcome {
        EpisodeOutcome::Accepted(t) => match t
            .get("rewards")
            .expect("rewards")
            .data()
            .expect("tensor data")
        {
            TensorData::F32(v) => v[0],
            other => panic!("rewards dtype {other:?}"),
        },
        other => panic!(
            "accepted expected, got {} ({:?})",
            other.kind(),
            r.reward_calls
        ),
    }
}

#[tokio::test]
async fn workflow_scores_through_a_registered_reward() {
    let rt = runtime();
    rt.register::<RewardComponent>("faulty", Path::new(c::REWARD_FAULTY), CallPolicy::default())
        .expect("register");
    let r = echo_with_reward(&rt, "faulty", json!({"value": 0.75})).await;
    assert_eq!(reward_of(&r), 0.75);
    assert_eq!(r.reward_calls.len(), 1);
    assert_eq!(r.reward_calls[0].attempts, 1);
    assert!(r.reward_calls[0].peak_memory_bytes > 0);
}

#[tokio::test]
async fn a_spinning_reward_is_stopped_retried_and_scored_zero() {
    let rt = runtime();
    rt.register::<RewardComponent>("spin", Path::new(c::REWARD_SPIN), policy(200, 2))
        .expect("register");
    let start = Instant::now();
    let r = echo_with_reward(&rt, "spin", json!({})).await;
    let elapsed = start.elapsed();
    assert_eq!(reward_of(&r), 0.0);
    let call = &r.reward_calls[0];
    assert!(call.timed_out);
    assert_eq!(call.attempts, 3);
    // Three attempts of 200 ms, each really interrupted (+10 % and scheduling slack).
    assert!(call.wall_us >= 600_000, "{call:?}");
    // Bounded, not timed: a hang would run to the test runner's limit.
    assert!(elapsed < Duration::from_secs(60), "{elapsed:?}");
    // The pool slot is free again: a normal reward call right after works.
    rt.register::<RewardComponent>("ok", Path::new(c::REWARD_FAULTY), CallPolicy::default())
        .expect("register");
    assert_eq!(
        reward_of(&echo_with_reward(&rt, "ok", json!({"value": 1.0})).await),
        1.0
    );
}

#[tokio::test]
async fn failing_rewards_are_retried_then_reported_to_the_workflow() {
    let rt = runtime();
    rt.register::<RewardComponent>("faulty", Path::new(c::REWARD_FAULTY), policy(15_000, 1))
        .expect("register");
    for (mode, expect) in [
        ("panic", "trapped"),
        ("nan", "invalid_output"),
        ("err", "invalid_output"),
        ("alloc", "trapped"),
        ("huge", "invalid_output"),
    ] {
        let r = echo_with_reward(&rt, "faulty", json!({"mode": mode})).await;
        // The echo workflow propagates reward errors as its own error.
        let EpisodeOutcome::Failed(f) = &r.outcome else {
            panic!(
                "{mode}: expected the workflow to fail, got {}",
                r.outcome.kind()
            )
        };
        assert!(
            f.to_string()
                .contains("reward `faulty` failed on all 2 attempts"),
            "{mode}: {f}"
        );
        let call = &r.reward_calls[0];
        assert_eq!(call.attempts, 2, "{mode}");
        assert!(
            call.error.as_deref().unwrap_or("").starts_with(expect),
            "{mode}: {call:?}"
        );
    }
}

#[tokio::test]
async fn reward_sandbox_denies_files_env_and_sockets() {
    let rt = runtime();
    rt.register::<RewardComponent>("faulty", Path::new(c::REWARD_FAULTY), CallPolicy::default())
        .expect("register");
    assert_eq!(
        reward_of(&echo_with_reward(&rt, "faulty", json!({"mode": "snoop"})).await),
        1.0
    );
}

#[tokio::test]
async fn unknown_reward_names_list_the_registered_ones() {
    let rt = runtime();
    rt.register::<RewardComponent>("math", Path::new(c::REWARD_FAULTY), CallPolicy::default())
        .expect("register");
    let r = echo_with_reward(&rt, "nope", json!({})).await;
    let EpisodeOutcome::Failed(f) = &r.outcome else {
        panic!("expected failure")
    };
    assert!(
        f.to_string()
            .contains("no reward named `nope` is registered (registered: math)"),
        "{f}"
    );
    let err = rt
        .register::<RewardComponent>(
            "bad name!",
            Path::new(c::REWARD_FAULTY),
            CallPolicy::default(),
        )
        .expect_err("invalid name");
    assert!(err.to_string().contains("invalid"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pathological_reward_does_not_delay_the_others() {
    let rt = Arc::new(runtime());
    rt.register::<RewardComponent>("spin", Path::new(c::REWARD_SPIN), policy(1_000, 0))
        .expect("register");
    let fast = rt
        .load::<RewardComponent>(Path::new(c::REWARD_FAULTY))
        .expect("load");
    let slow = {
        let rt = rt.clone();
        tokio::spawn(async move { echo_with_reward(&rt, "spin", json!({})).await })
    };
    // 200 ordinary reward calls while the spinning one holds a core.
    let start = Instant::now();
    let mut handles = Vec::new();
    for i in 0..200 {
        let (rt, fast) = (rt.clone(), fast.clone());
        handles.push(tokio::spawn(async move {
            let call = RewardCall {
                data: json!({"value": i as f64}),
                ..RewardCall::default()
            };
            rt.call_once(&fast, call, Arc::new(Limits::untrusted_call()))
                .await
                .result
        }));
    }
    for (i, h) in handles.into_iter().enumerate() {
        assert_eq!(h.await.expect("join"), Ok(i as f64));
    }
    let fast_elapsed = start.elapsed();
    let slow = slow.await.expect("join");
    assert_eq!(reward_of(&slow), 0.0);
    assert!(slow.reward_calls[0].timed_out);
    // The ordinary calls finished while the spinning reward was still being interrupted.
    assert!(fast_elapsed < Duration::from_secs(30), "{fast_elapsed:?}");
}

/// GSM8K-like reward inputs with the expected score.
fn gsm8k_cases() -> Vec<(RewardCall, f64)> {
    let call = |completion: &str, answer: &str| RewardCall {
        completion: completion.into(),
        data: json!({"question": "q", "answer": answer}),
        ..RewardCall::default()
    };
    vec![
        (
            call(
                "48 / 2 = 24, and 48 + 24 = 72. \\boxed{72}",
                "Natalia sold 48+24 = 72 clips.\n#### 72",
            ),
            1.0,
        ),
        (call("The total is $1,234.", "1234"), 1.0),
        (call("\\boxed{\\frac{1}{2}}", "0.5"), 1.0),
        (call("\\boxed{71}", "#### 72"), 0.0),
        (call("no idea", "#### 72"), 0.0),
    ]
}

#[tokio::test]
async fn the_rust_math_reward_scores_gsm8k_answers() {
    let rt = runtime();
    let math = rt
        .load::<RewardComponent>(Path::new(c::REWARD_MATH))
        .expect("math reward loads");
    for (call, want) in gsm8k_cases() {
        let completion = call.completion.clone();
        let r = rt
            .call_once(&math, call, Arc::new(Limits::untrusted_call()))
            .await;
        assert_eq!(r.result, Ok(want), "{completion:?}");
    }
    // A row without a reference answer is the component's error, not a silent 0.
    let r = rt
        .call_once(
            &math,
            RewardCall {
                completion: "\\boxed{1}".into(),
                ..RewardCall::default()
            },
            Arc::new(Limits::untrusted_call()),
        )
        .await;
    assert_eq!(r.result.expect_err("no answer").kind(), "guest_error");
}

#[tokio::test]
async fn the_python_reward_runs_sandboxed_and_scores_like_the_rust_one() {
    if !rollbox_tests::built(c::PYTHON_REWARD) {
        return;
    }
    let rt = runtime();
    let info = rt.inspect(Path::new(c::PYTHON_REWARD)).expect("inspect");
    assert!(
        info.imports
            .iter()
            .all(|i| i.starts_with("rollbox:workflow/")),
        "--stub-wasi leaves no WASI imports: {:?}",
        info.imports
    );
    rt.register::<RewardComponent>("py", Path::new(c::PYTHON_REWARD), CallPolicy::default())
        .expect("register");
    let reg = rt.registries().reward("py").expect("registered");
    for (call, want) in gsm8k_cases() {
        let completion = call.completion.clone();
        let r = rt
            .call_once(reg.component(), call, Arc::new(Limits::untrusted_call()))
            .await;
        assert_eq!(r.result, Ok(want), "{completion:?}: {}", r.stderr);
    }
    // Each call's instance (13 MiB of linear memory) is torn down on the reaper thread: were
    // any left behind, the test runtime's pool (64 instances, 512 core instances: 14 of these
    // 36-module components) would refuse a call well before the 60th.
    let (call, want) = gsm8k_cases().remove(0);
    for i in 0..60 {
        let r = rt
            .call_once(
                reg.component(),
                call.clone(),
                Arc::new(Limits::untrusted_call()),
            )
            .await;
        assert!(
            r.peak_memory_bytes >= rollbox_runtime::calls::DEFERRED_TEARDOWN_BYTES,
            "the reaper path is taken"
        );
        assert_eq!(r.result, Ok(want), "call {i}: {}", r.stderr);
    }
    // Through a workflow, with the registry's retries and accounting.
    let r = echo_with_reward(&rt, "py", json!({"answer": "0"})).await;
    assert_eq!(reward_of(&r), 0.0);
    assert_eq!(r.reward_calls[0].attempts, 1);
    let r = echo_with_reward(&rt, "py", json!({})).await;
    assert_eq!(
        r.outcome.kind(),
        "guest_error",
        "a row without `answer` is reported"
    );
}

#[tokio::test]
async fn workflows_call_a_sandboxed_calculator_tool() {
    let rt = runtime();
    rt.register::<ToolComponent>("calc", Path::new(c::TOOL_CALCULATOR), CallPolicy::default())
        .expect("register");
    let caller = rt
        .load::<WorkflowComponent>(Path::new(c::TOOL_CALLER))
        .expect("caller loads");
    let scope = Scope::default();
    let call = |args: serde_json::Value, tool: &str| {
        rt.run_episode(
            &scope,
            &caller,
            EpisodeRequest::new("r0-s0", json!({"tool": tool, "args": args})),
            Arc::new(Limits::default()),
        )
    };
    let meta = |r: &rollbox_runtime::EpisodeReport| match &r.outcome {
        EpisodeOutcome::Accepted(t) => t.metadata(),
        other => panic!("accepted expected, got {}", other.kind()),
    };
    let r = call(json!({"expression": "2 * (3 + 4) ^ 2"}), "calc").await;
    assert_eq!(meta(&r)["output"], json!("{\"result\":98.0}"));
    assert_eq!(meta(&r)["attempts"], json!(1));
    let r = call(json!({"expression": "1 / 0"}), "calc").await;
    let err = meta(&r)["error"].as_str().expect("error").to_string();
    assert!(
        err.contains("InvalidOutput") && err.contains("division by zero"),
        "{err}"
    );
    let r = call(json!({}), "nope").await;
    let err = meta(&r)["error"].as_str().expect("error").to_string();
    assert!(
        err.contains("no tool named `nope` is registered (registered: calc)"),
        "{err}"
    );
}

/// The recorded parity corpus as reward calls: (the JSON line, the call, AReaL's score).
fn corpus() -> Vec<(String, RewardCall, f64)> {
    let text = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/fixtures/rewards/math_corpus.jsonl"
    ))
    .expect("the corpus");
    text.lines()
        .map(|line| {
            let row: serde_json::Value = serde_json::from_str(line).expect("JSON line");
            let call = RewardCall {
                completion: row["completion"].as_str().expect("completion").into(),
                data: json!({"answer": row["answer"]}),
                ..RewardCall::default()
            };
            (
                line.to_string(),
                call,
                row["areal"].as_f64().expect("areal"),
            )
        })
        .collect()
}

/// The Rust math reward, as the component users load (its arena allocator, the guest build),
/// gives AReaL's score on every pair of the recorded corpus, each call a fresh sandbox.
#[tokio::test]
async fn the_math_component_scores_the_whole_corpus_as_areal_does() {
    let rt = runtime();
    let math = rt
        .load::<RewardComponent>(Path::new(c::REWARD_MATH))
        .expect("math reward loads");
    let corpus = corpus();
    let mut misses = Vec::new();
    for (line, call, areal) in &corpus {
        let r = rt
            .call_once(&math, call.clone(), Arc::new(Limits::untrusted_call()))
            .await;
        if r.result != Ok(*areal) {
            misses.push(format!("{line}: {:?}", r.result));
        }
    }
    assert!(corpus.len() >= 5_000, "{} pairs", corpus.len());
    assert!(misses.is_empty(), "{} misses: {misses:#?}", misses.len());
}

/// The real math-verify (AReaL's `gsm8k_reward_fn` in a componentize-py component) agrees with
/// AReaL's own scores on a sample of the recorded corpus (every 40th pair: all classes), each
/// call in a fresh sandbox with the default reward limits.
#[tokio::test]
async fn the_math_verify_component_scores_as_areal_does() {
    if !rollbox_tests::built(c::MATH_VERIFY_REWARD) {
        return;
    }
    let rt = runtime();
    let mv = rt
        .load::<RewardComponent>(Path::new(c::MATH_VERIFY_REWARD))
        .expect("the math-verify reward loads");
    let mut n = 0;
    for (line, call, areal) in corpus().into_iter().step_by(40) {
        let r = rt
            .call_once(&mv, call, Arc::new(Limits::untrusted_call()))
            .await;
        assert_eq!(r.result, Ok(areal), "{line}: {}", r.stderr);
        n += 1;
    }
    assert!(n >= 140, "{n} pairs");
    // A row without a reference is the component's error, naming the keys.
    let r = rt
        .call_once(
            &mv,
            RewardCall {
                completion: "\\boxed{1}".into(),
                ..RewardCall::default()
            },
            Arc::new(Limits::untrusted_call()),
        )
        .await;
    let err = r.result.expect_err("no reference").to_string();
    assert!(err.contains("answer") && err.contains("solution"), "{err}");
}

/// sympy on a pathological input is stopped by the host's reward timeout (AReaL's worker would
/// block on it; here the instance is interrupted and dropped).
#[tokio::test]
async fn a_pathological_sympy_input_is_stopped_by_the_timeout() {
    if !rollbox_tests::built(c::MATH_VERIFY_REWARD) {
        return;
    }
    let rt = runtime();
    let mv = rt
        .load::<RewardComponent>(Path::new(c::MATH_VERIFY_REWARD))
        .expect("the math-verify reward loads");
    let limits = Limits {
        timeout: Duration::from_secs(2),
        ..Limits::untrusted_call()
    };
    let start = Instant::now();
    let r = rt
        .call_once(
            &mv,
            RewardCall {
                completion: "\\boxed{9^{9^{9}}}".into(),
                data: json!({"answer": "18"}),
                ..RewardCall::default()
            },
            Arc::new(limits),
        )
        .await;
    let fault = r.result.expect_err("times out");
    assert_eq!(fault.kind(), "timeout", "{fault}");
    eprintln!("timed out after {:?}", start.elapsed());
}

/// Completions built to blow the Rust math reward's parser (a 50,000-term sum in a box, 20,000
/// nested parentheses, 200,000 digits, 20,000 boxes, a 50,000-sign prefix) score 0 through the
/// real boundary, under the default reward limits: no stack overflow, no timeout.
#[tokio::test]
async fn hostile_completions_score_zero_in_the_math_reward() {
    let rt = runtime();
    let math = rt
        .load::<RewardComponent>(Path::new(c::REWARD_MATH))
        .expect("math reward loads");
    let completions = [
        format!("\\boxed{{{}1}}", "1+".repeat(50_000)),
        format!("\\boxed{{{}1{}}}", "(".repeat(20_000), ")".repeat(20_000)),
        "9".repeat(200_000),
        "\\boxed{1} ".repeat(20_000),
        format!("\\boxed{{{}1}}", "-".repeat(50_000)),
        format!("The answer is {}18", "(".repeat(5_000)),
    ];
    for completion in completions {
        let head: String = completion.chars().take(40).collect();
        let start = Instant::now();
        let r = rt
            .call_once(
                &math,
                RewardCall {
                    completion,
                    data: json!({"answer": "#### 18"}),
                    ..RewardCall::default()
                },
                Arc::new(Limits::untrusted_call()),
            )
            .await;
        assert_eq!(r.result, Ok(0.0), "{head}...: {}", r.stderr);
        // A score at all (not a timeout at the 15 s limit) is what shows the parse is
        // bounded; the time is printed (load moves it, issue 52).
        eprintln!("{head}: {:?}", start.elapsed());
    }
}

/// The GSM8K answer matchers written in Python, JavaScript and C (the same rules: last box,
/// else `####`, else the last number; 6 significant digits) give the same score on every 5th
/// pair of the parity corpus, and each refuses a row without an `answer` with its message.
#[tokio::test]
async fn the_gsm8k_rewards_agree_across_languages() {
    let rt = runtime();
    let rewards: Vec<(&str, RewardComponent)> = [
        ("python", c::PYTHON_REWARD),
        ("js", c::JS_REWARD),
        ("c", c::C_REWARD),
    ]
    .into_iter()
    .filter(|(_, path)| rollbox_tests::built(path))
    .map(|(lang, path)| {
        let reward = rt.load::<RewardComponent>(Path::new(path));
        (lang, reward.expect("loads"))
    })
    .collect();
    let mut differ = Vec::new();
    let mut n = 0;
    for (line, call, _) in corpus().into_iter().step_by(5) {
        let mut scores = Vec::new();
        for (lang, reward) in &rewards {
            let r = rt
                .call_once(reward, call.clone(), Arc::new(Limits::untrusted_call()))
                .await;
            scores.push((*lang, r.result));
        }
        if scores.iter().any(|(_, s)| *s != scores[0].1) {
            differ.push(format!("{line}: {scores:?}"));
        }
        n += 1;
    }
    assert!(n > 1_000, "{n} pairs");
    assert!(differ.is_empty(), "{} differ: {differ:#?}", differ.len());
    for (lang, reward) in &rewards {
        let r = rt
            .call_once(
                reward,
                RewardCall {
                    completion: "\\boxed{1}".into(),
                    data: json!({"question": "?"}),
                    ..RewardCall::default()
                },
                Arc::new(Limits::untrusted_call()),
            )
            .await;
        let err = r.result.expect_err("no answer").to_string();
        assert!(err.contains("answer"), "{lang}: {err}");
    }
}

/// A caller's fuel cap on a runtime built without fuel metering is refused as `unenforceable`
/// for scores, tool calls and episodes alike, before anything runs: never silently ignored
/// (a tenant's `limits = { fuel = N }` on a server started without any fuel setting).
#[tokio::test]
async fn a_fuel_cap_the_runtime_cannot_meter_is_refused() {
    let rt = runtime();
    assert!(!rt.config().fuel, "the test runtime meters no fuel");
    rt.register::<RewardComponent>("spin", Path::new(c::REWARD_SPIN), CallPolicy::default())
        .expect("register");
    rt.register::<ToolComponent>("calc", Path::new(c::TOOL_CALCULATOR), CallPolicy::tool())
        .expect("register");
    let mut fuel = rollbox_runtime::LimitSpec::default();
    fuel.set(
        "fuel",
        rollbox_runtime::limits::LimitValue::Number(1_000_000),
    )
    .expect("a key");
    let capped = Scope::default().capped(&rollbox_runtime::Caps {
        limits: fuel,
        retries: None,
    });
    let kind = |r: &Result<f64, rollbox_runtime::GuestFault>| {
        r.as_ref().err().map(|f| f.kind().to_string())
    };
    let scored = rt
        .score(&capped, "spin", RewardCall::default())
        .await
        .expect("a registered reward");
    assert_eq!(kind(&scored.result), Some("unenforceable".into()));
    assert_eq!(scored.attempts, 0, "nothing ran");
    let called = rt
        .call_tool(&capped, "calc", r#"{"expression": "1+1"}"#.into())
        .await
        .expect("a registered tool");
    let err = called.result.expect_err("refused");
    assert_eq!(err.kind(), "unenforceable", "{err}");
    let workflow = rt
        .load::<WorkflowComponent>(Path::new(c::TOOL_CALLER))
        .expect("loads");
    let report = rt
        .run_episode(
            &capped,
            &workflow,
            EpisodeRequest::new("e0", json!({"tool": "calc", "args": {}})),
            Arc::new(Limits::default()),
        )
        .await;
    match &report.outcome {
        EpisodeOutcome::Failed(f) => assert_eq!(f.kind(), "unenforceable", "{f}"),
        other => panic!("refused expected, got {}", other.kind()),
    }
    // Uncapped, the same tool runs.
    let called = rt
        .call_tool(&Scope::default(), "calc", r#"{"expression": "1+1"}"#.into())
        .await
        .expect("a registered tool");
    assert!(called.result.is_ok(), "{:?}", called.result);
}
