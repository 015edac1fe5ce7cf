//! The embedding API (issue 33): a host built from a `HostSpec` enforces every limit key of the
//! runtime's table (`LIMIT_KEYS`, the keys the CLI, the config file, Python and JSON specs all
//! take). For each key, one hostile guest runs twice through `HostSpec::build_with_engine` and
//! the real sandbox: with the defaults, and with that one key tightened; the two episodes must
//! end differently. A key added to the table without a case here fails the test.

use std::sync::Arc;
use std::time::Duration;

use rollbox_host::HostSpec;
use rollbox_runtime::limits::LIMIT_KEYS;
use rollbox_runtime::{EpisodeOutcome, EpisodeReport, EpisodeRequest, Setting};
use rollbox_tests::components as c;
use serde_json::{Value, json};

/// One key's case: the guest, its row, the tightened value, and the engine's delay.
struct Case {
    key: &'static str,
    value: &'static str,
    program: &'static str,
    data: Value,
    tokenizer: bool,
    /// Register the built-in `math` reward.
    reward: bool,
    delay: Duration,
}

fn cases() -> Vec<Case> {
    let case = |key, value, program, data| Case {
        key,
        value,
        program,
        data,
        tokenizer: false,
        reward: false,
        delay: Duration::ZERO,
    };
    let big_string = json!({"bytes": 32 << 20});
    let generate = json!({"calls": 5});
    let handles = json!({"count": 50});
    vec![
        case("max_memory", "16MiB", c::ADV_BIG_STRING, big_string.clone()),
        case("max_boundary_bytes", "1MiB", c::ADV_BIG_STRING, big_string),
        Case {
            delay: Duration::from_millis(100),
            ..case("timeout", "150ms", c::ADV_GENERATE, generate.clone())
        },
        case("fuel", "1000", c::ADV_GENERATE, generate.clone()),
        case("max_handles", "10", c::ADV_HANDLES, handles.clone()),
        case("max_tensor_bytes", "64", c::ADV_HANDLES, handles),
        case("max_generate_calls", "2", c::ADV_GENERATE, generate.clone()),
        case("max_episode_tokens", "6", c::ADV_GENERATE, generate),
        Case {
            reward: true,
            ..case(
                "max_reward_calls",
                "2",
                c::ADV_HOST_CALLS,
                json!({"attack": "score_flood", "n": 5, "reward": "math"}),
            )
        },
        case(
            "max_output_bytes",
            "1KiB",
            c::ADV_STDOUT,
            json!({"bytes": 4096}),
        ),
        Case {
            tokenizer: true,
            ..case(
                "max_tokenizer_bytes",
                "4KiB",
                c::TOKENIZE,
                json!({
                    "text": "hello world ".repeat(700),
                    "messages": [{"role": "user", "content": "hi"}],
                }),
            )
        },
    ]
}

/// What an episode did, for comparing two runs: its outcome and fault, calls, tokens, output.
fn fingerprint(r: &EpisodeReport) -> String {
    let outcome = match &r.outcome {
        EpisodeOutcome::Accepted(_) => "accepted".to_string(),
        EpisodeOutcome::Rejected => "rejected".to_string(),
        EpisodeOutcome::Failed(f) => {
            let text = f.to_string();
            format!("{} {}", f.kind(), &text[..text.len().min(120)])
        }
    };
    format!(
        "{outcome}; {} generate calls, {} tokens, {} stdout bytes, {} stderr bytes",
        r.generate_calls,
        r.generated_tokens,
        r.stdout.len(),
        r.stderr.len()
    )
}

async fn run(case: &Case, tightened: bool) -> EpisodeReport {
    let mut spec = HostSpec::new(case.program);
    if case.tokenizer {
        spec.tokenizer = Some(rollbox_tests::model_path());
    }
    if case.reward {
        spec.rewards
            .insert("math".into(), rollbox_host::ComponentSpec::new("math"));
    }
    if tightened {
        spec.limits
            .set_text(case.key, case.value)
            .unwrap_or_else(|e| panic!("{}: {e}", case.key));
    }
    let host = spec
        .build_with_engine(Arc::new(rollbox_tests::fixed_backend(case.delay)))
        .unwrap_or_else(|e| panic!("{}: {e:#}", case.key));
    host.run_episode(EpisodeRequest::new("e0", case.data.clone()))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_limit_key_changes_what_an_episode_may_do() {
    let cases = cases();
    for k in LIMIT_KEYS {
        assert!(
            cases.iter().any(|c| c.key == k.key),
            "no case for the limit `{}`: add one that it changes",
            k.key
        );
    }
    let mut named = 0;
    for case in &cases {
        let free = fingerprint(&run(case, false).await);
        let tight = run(case, true).await;
        // A fault caused by a limit names it, for the entry point to phrase the hint.
        if let EpisodeOutcome::Failed(f) = &tight.outcome
            && let Some(setting) = f.setting()
        {
            assert_eq!(setting, Setting::Limit(case.key), "{}: {f}", case.key);
            named += 1;
        }
        let tight = fingerprint(&tight);
        assert_ne!(
            free, tight,
            "{}={} changed nothing: {free}",
            case.key, case.value
        );
        println!(
            "{}={}\n  default: {free}\n  tight:   {tight}",
            case.key, case.value
        );
    }
    // All but max_output_bytes (output is cut, the episode goes on) and max_tokenizer_bytes
    // (the guest returns the refusal as its own error).
    assert_eq!(named, 9, "faults that name their limit");
}

/// The spec decides fuel metering: a reward's `fuel` alone turns it on (no episode limit sets
/// fuel), and a reward that loops forever ends out of fuel long before its 60 s timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rewards_fuel_alone_turns_metering_on() {
    let mut spec: HostSpec = serde_json::from_value(json!({
        "workflow": c::WORKFLOW_RLVR,
        "rewards": {"math": {"path": c::REWARD_SPIN, "fuel": 10_000_000, "timeout": "60s", "retries": 0}},
        "config": {"reward": "math", "gconfig": {"max_new_tokens": 2}},
    }))
    .expect("spec");
    spec.tokenizer = Some(rollbox_tests::model_path());
    assert!(spec.wants_fuel());
    let host = spec
        .build_with_engine(Arc::new(rollbox_tests::fixed_backend(Duration::ZERO)))
        .expect("host");
    let start = std::time::Instant::now();
    let report = host
        .run_episode(EpisodeRequest::new(
            "e0",
            json!({"messages": [{"role": "user", "content": "1 + 1?"}], "answer": "2"}),
        ))
        .await;
    assert!(start.elapsed() < Duration::from_secs(20), "{report:?}");
    let calls = format!("{:?}", report.reward_calls);
    assert!(
        calls.contains("out of fuel"),
        "{calls} {}",
        fingerprint(&report)
    );
}

/// Rewards and tools without a workflow (`HostSpec::build_components`, what `rollbox.verl` and
/// `rollbox.trl` call): a reward scores under its call policy; one that never returns is a
/// timeout fault after every attempt, not a 0.0 and not a hang; a tool answers; unknown names
/// are errors listing the registered ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn components_score_and_call_outside_any_episode() {
    let spec: HostSpec = serde_json::from_value(json!({
        "workflow": "",
        "rewards": {
            "math": "math",
            "spin": {"path": c::REWARD_SPIN, "timeout": "200ms", "retries": 1},
        },
        "tools": {"calc": "calculator"},
    }))
    .expect("spec");
    let components = spec.build_components().expect("components");
    let call = |completion: &str| rollbox_runtime::RewardCall {
        prompt: String::new(),
        completion: completion.into(),
        prompt_ids: vec![],
        completion_ids: vec![],
        data: json!({"reward_model": {"ground_truth": "72"}}),
    };
    let right = components
        .score("math", call("so \\boxed{72}"))
        .await
        .expect("math");
    assert_eq!((right.result.expect("scored"), right.attempts), (1.0, 1));
    let wrong = components.score("math", call("71")).await.expect("math");
    assert_eq!(wrong.result.expect("scored"), 0.0);

    let start = std::time::Instant::now();
    let spin = components.score("spin", call("x")).await.expect("spin");
    assert!(
        matches!(
            spin.result,
            Err(rollbox_runtime::GuestFault::Timeout { limit_ms: 200 })
        ),
        "{spin:?}"
    );
    assert_eq!(spin.attempts, 2);
    assert!(start.elapsed() < Duration::from_secs(60), "{spin:?}");

    let calc = components
        .call_tool("calc", r#"{"expression": "2 ^ 10"}"#.into())
        .await
        .expect("calc");
    assert_eq!(calc.result.expect("called"), r#"{"result":1024.0}"#);

    let e = components
        .score("nope", call("x"))
        .await
        .expect_err("unknown");
    assert!(e.to_string().contains("registered: math, spin"), "{e}");
    let e = components
        .call_tool("nope", "{}".into())
        .await
        .expect_err("unknown");
    assert!(e.to_string().contains("registered: calc"), "{e}");
    assert_eq!(components.reward_names(), ["math", "spin"]);
}

/// Two hosts in one process, two budgets (issue 54): each `max_host_memory` is its host's own,
/// not the process's, so building a second host with a large budget leaves the first one's
/// small budget in force (before, the last host built set one process-wide budget), and a
/// host that sets none keeps the process default.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_host_has_its_own_memory_budget() {
    let build = |budget: Option<u64>| {
        let mut spec = HostSpec::new(c::ADV_BIG_STRING);
        spec.max_host_memory = budget;
        spec.build_with_engine(Arc::new(rollbox_tests::fixed_backend(Duration::ZERO)))
            .expect("builds")
    };
    let small = build(Some(8 << 20));
    let large = build(Some(4 << 30));
    let default = build(None);
    let budget = |h: &rollbox_host::Host| h.runtime().services().host_memory().limit();
    assert_eq!(budget(&small), 8 << 20);
    assert_eq!(budget(&large), 4 << 30);
    assert_eq!(budget(&default), rollbox_runtime::budget::default_budget());
    // 32 MiB of linear memory: past the small host's budget, well within the large one's.
    let row = json!({"bytes": 32 << 20});
    let refused = small
        .run_episode(EpisodeRequest::new("e0", row.clone()))
        .await;
    match &refused.outcome {
        EpisodeOutcome::Failed(f) => {
            assert_eq!(f.setting(), Some(Setting::HostMemory), "{f}")
        }
        other => panic!("the 8 MiB host refuses 32 MiB: {}", other.kind()),
    }
    let ran = large.run_episode(EpisodeRequest::new("e0", row)).await;
    assert!(
        !matches!(&ran.outcome, EpisodeOutcome::Failed(f) if f.setting() == Some(Setting::HostMemory)),
        "the 4 GiB host is not held to the other's budget: {}",
        fingerprint(&ran)
    );
    assert_eq!(
        small.runtime().services().host_memory().used(),
        0,
        "the refused episode gave back what it held"
    );
}
