//! Adversarial guests: each must end in its typed fault and leave the host serving the next
//! normal episode.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollbox_runtime::{
    EpisodeOutcome, EpisodeReport, EpisodeRequest, GuestFault, Limits, RewardComponent, Runtime,
    Scope, Setting, WorkflowComponent,
};
use rollbox_tensor::TensorData;
use rollbox_tests::components as c;
use rollbox_tests::{runtime, runtime_with};
use serde_json::json;

fn load(rt: &Runtime, path: &str) -> WorkflowComponent {
    rt.load(Path::new(path)).expect("component loads")
}

async fn run(
    rt: &Runtime,
    w: &WorkflowComponent,
    data: serde_json::Value,
    limits: Limits,
) -> EpisodeReport {
    rt.run_episode(
        &Scope::default(),
        w,
        EpisodeRequest::new("r0-s0", data),
        Arc::new(limits),
    )
    .await
}

fn fault(r: &EpisodeReport) -> &GuestFault {
    match &r.outcome {
        EpisodeOutcome::Failed(f) => f,
        other => panic!(
            "expected a failure, got {} (stderr: {})",
            other.kind(),
            r.stderr
        ),
    }
}

/// The host still runs a normal episode to completion after whatever came before.
async fn assert_serves_next(rt: &Runtime) {
    let echo = load(rt, c::WORKFLOW_ECHO);
    let r = run(
        rt,
        &echo,
        json!({"input_ids": [1, 2, 3]}),
        Limits::default(),
    )
    .await;
    match &r.outcome {
        EpisodeOutcome::Accepted(t) => {
            let ids = t.get("input_ids").expect("input_ids");
            assert_eq!(
                ids.data().expect("tensor data"),
                TensorData::I32(vec![1, 2, 3, 7, 8, 2])
            );
        }
        other => panic!("the next episode should be accepted, got {}", other.kind()),
    }
}

#[tokio::test]
async fn echo_episode_returns_areal_layout_with_versions() {
    let rt = runtime();
    rt.services().set_version(3);
    let echo = load(&rt, c::WORKFLOW_ECHO);
    let r = run(&rt, &echo, json!({"input_ids": [5, 6]}), Limits::default()).await;
    let EpisodeOutcome::Accepted(t) = &r.outcome else {
        panic!("accepted expected, got {}", r.outcome.kind())
    };
    assert_eq!(t.get("input_ids").expect("ids").shape(), &[1, 5]);
    assert_eq!(
        t.get("loss_mask")
            .expect("mask")
            .data()
            .expect("tensor data"),
        TensorData::I32(vec![0, 0, 1, 1, 1])
    );
    assert_eq!(
        t.get("logprobs").expect("lp").data().expect("tensor data"),
        TensorData::F32(vec![0.0, 0.0, -0.1, -0.2, -0.3])
    );
    assert_eq!(
        t.get("versions").expect("v").data().expect("tensor data"),
        TensorData::I32(vec![-1, -1, 3, 3, 3])
    );
    assert_eq!(t.get("rewards").expect("r").shape(), &[1]);
    assert_eq!(
        t.get("is_truncated")
            .expect("t")
            .data()
            .expect("tensor data"),
        TensorData::Bool(vec![false])
    );
    assert_eq!(t.metadata()["stop_reason"], "stop");
    assert_eq!(r.generate_calls, 1);
    assert_eq!(r.generated_tokens, 3);
    assert_eq!(r.stats, vec![("reward".to_string(), 0.0)]);
}

#[tokio::test]
async fn max_tokens_clamps_and_marks_truncation() {
    let rt = runtime();
    let echo = load(&rt, c::WORKFLOW_ECHO);
    let r = rt
        .run_episode(
            &Scope::default(),
            &echo,
            EpisodeRequest {
                config: json!({"max_new_tokens": 2}).into(),
                ..EpisodeRequest::new("r1-s0", json!({"input_ids": [1]}))
            },
            Arc::new(Limits::default()),
        )
        .await;
    let EpisodeOutcome::Accepted(t) = &r.outcome else {
        panic!("accepted expected, got {}", r.outcome.kind())
    };
    assert_eq!(
        t.get("input_ids")
            .expect("ids")
            .data()
            .expect("tensor data"),
        TensorData::I32(vec![1, 7, 8])
    );
    assert_eq!(
        t.get("is_truncated")
            .expect("t")
            .data()
            .expect("tensor data"),
        TensorData::Bool(vec![true])
    );
}

#[tokio::test]
async fn infinite_loop_is_interrupted_at_the_deadline() {
    let rt = runtime();
    let w = load(&rt, c::ADV_LOOP);
    let start = Instant::now();
    let r = run(
        &rt,
        &w,
        json!({}),
        Limits {
            timeout: Duration::from_millis(300),
            ..Limits::default()
        },
    )
    .await;
    assert_eq!(fault(&r), &GuestFault::Timeout { limit_ms: 300 });
    // Really stopped, not abandoned: the call returned long before any outer safety net.
    assert!(
        start.elapsed() < Duration::from_secs(60),
        "took {:?}",
        start.elapsed()
    );
    assert_serves_next(&rt).await;
}

#[tokio::test]
async fn infinite_loop_runs_out_of_fuel() {
    let rt = runtime_with(
        Some(Arc::new(rollbox_tests::fixed_backend(Duration::ZERO))),
        true,
    );
    let w = load(&rt, c::ADV_LOOP);
    let r = run(
        &rt,
        &w,
        json!({}),
        Limits {
            fuel: Some(5_000_000),
            ..Limits::default()
        },
    )
    .await;
    assert_eq!(fault(&r), &GuestFault::OutOfFuel { fuel: 5_000_000 });
    assert!(r.fuel_consumed.expect("metered") >= 5_000_000);
    assert_serves_next(&rt).await;
}

/// A fuel budget on a runtime built without fuel metering is refused, never ignored: the
/// episode fails at once (`unenforceable`, naming the fix) and a fuel registration is an error.
#[tokio::test]
async fn fuel_on_an_unmetered_runtime_is_refused_not_ignored() {
    let rt = runtime();
    let w = load(&rt, c::ADV_LOOP);
    let start = Instant::now();
    let r = run(
        &rt,
        &w,
        json!({}),
        Limits {
            fuel: Some(5_000_000),
            timeout: Duration::from_secs(30),
            ..Limits::default()
        },
    )
    .await;
    // Refused before it ran: long before its 30 s timeout.
    assert!(start.elapsed() < Duration::from_secs(25));
    match fault(&r) {
        GuestFault::Unenforceable { message } => {
            assert!(message.contains("fuel: true"), "{message}")
        }
        other => panic!("expected unenforceable, got {other:?}"),
    }
    let policy = rollbox_runtime::CallPolicy {
        limits: Arc::new(Limits {
            fuel: Some(1000),
            ..Limits::untrusted_call()
        }),
        retries: 0,
    };
    let err = rt
        .register::<RewardComponent>("spin", Path::new(c::REWARD_SPIN), policy)
        .expect_err("a fuel registration on an unmetered runtime");
    assert!(format!("{err:#}").contains("without fuel"), "{err:#}");
    assert_serves_next(&rt).await;
}

#[tokio::test]
async fn memory_bomb_hits_the_memory_limit() {
    let rt = runtime();
    let w = load(&rt, c::ADV_MEMORY);
    let r = run(
        &rt,
        &w,
        json!({}),
        Limits {
            max_memory: 64 << 20,
            ..Limits::default()
        },
    )
    .await;
    let f = fault(&r);
    assert_eq!(f.kind(), "memory_limit", "{f}");
    assert_eq!(f.setting(), Some(Setting::Limit("max_memory")), "{f}");
    assert!(r.peak_memory_bytes <= 64 << 20);
    assert_serves_next(&rt).await;
}

#[tokio::test]
async fn deep_recursion_overflows_the_guest_stack() {
    let rt = runtime();
    let w = load(&rt, c::ADV_RECURSION);
    let r = run(&rt, &w, json!({}), Limits::default()).await;
    assert_eq!(fault(&r), &GuestFault::StackOverflow);
    assert_serves_next(&rt).await;
}

#[tokio::test]
async fn panic_is_reported_with_its_message() {
    let rt = runtime();
    let w = load(&rt, c::ADV_PANIC);
    let r = run(&rt, &w, json!({}), Limits::default()).await;
    let f = fault(&r);
    assert_eq!(f.kind(), "panic");
    assert!(
        f.to_string().contains("workflow blew up on row r0-s0"),
        "{f}"
    );
    assert_serves_next(&rt).await;
}

#[tokio::test]
async fn one_gib_string_is_contained() {
    let rt = runtime();
    let w = load(&rt, c::ADV_BIG_STRING);
    // Under the default 512 MiB memory limit the guest cannot even build it.
    let r = run(&rt, &w, json!({}), Limits::default()).await;
    assert_eq!(fault(&r).kind(), "memory_limit");
    // With memory to spare, the boundary limit stops it on the way out.
    let r = run(
        &rt,
        &w,
        json!({}),
        Limits {
            max_memory: 3 << 30,
            ..Limits::default()
        },
    )
    .await;
    assert_eq!(fault(&r), &GuestFault::BoundaryLimit { limit: 64 << 20 });
    // And a small limit catches a small string the same way.
    let r = run(
        &rt,
        &w,
        json!({"bytes": 2 << 20}),
        Limits {
            max_boundary_bytes: 1 << 20,
            ..Limits::default()
        },
    )
    .await;
    assert_eq!(fault(&r), &GuestFault::BoundaryLimit { limit: 1 << 20 });
    assert_serves_next(&rt).await;
}

#[tokio::test]
async fn a_million_tensor_handles_hit_the_handle_limit() {
    let rt = runtime();
    let w = load(&rt, c::ADV_HANDLES);
    let r = run(&rt, &w, json!({}), Limits::default()).await;
    let f = fault(&r);
    assert_eq!(f.kind(), "limit_exceeded", "{f}");
    assert!(f.to_string().contains("(`max_handles`)"), "{f}");
    assert_eq!(f.setting(), Some(Setting::Limit("max_handles")), "{f}");
    // Under the limit the same guest succeeds.
    let r = run(&rt, &w, json!({"count": 100}), Limits::default()).await;
    assert_eq!(r.outcome.kind(), "accepted");
    assert_serves_next(&rt).await;
}

#[tokio::test]
async fn generate_flood_hits_the_call_limit() {
    let rt = runtime();
    let w = load(&rt, c::ADV_GENERATE);
    let r = run(
        &rt,
        &w,
        json!({}),
        Limits {
            max_generate_calls: 100,
            ..Limits::default()
        },
    )
    .await;
    let f = fault(&r);
    assert_eq!(f.kind(), "limit_exceeded", "{f}");
    assert!(f.to_string().contains("(`max_generate_calls`)"), "{f}");
    assert_eq!(
        f.setting(),
        Some(Setting::Limit("max_generate_calls")),
        "{f}"
    );
    assert_eq!(r.generate_calls, 100);
    assert_serves_next(&rt).await;
}

/// A request's `messages_chat` metadata (chat messages for chat-completions servers) that is
/// not a list is refused as the call's error, before any budget is reserved; a list passes.
#[tokio::test]
async fn chat_messages_in_request_metadata_must_be_a_list() {
    let rt = runtime();
    let w = load(&rt, c::ADV_GENERATE);
    for bad in [json!("a string"), json!({"role": "user"}), json!(7)] {
        let r = run(
            &rt,
            &w,
            json!({"metadata": {"messages_chat": bad}}),
            Limits::default(),
        )
        .await;
        let f = fault(&r).to_string();
        assert!(
            f.contains("InvalidArgument") && f.contains("metadata.messages_chat must be a list"),
            "{f}"
        );
        assert_eq!(r.generated_tokens, 0, "nothing reserved or generated");
    }
    let ok = json!({"messages_chat": [{"role": "user", "content": "hi"}]});
    let r = run(&rt, &w, json!({"metadata": ok}), Limits::default()).await;
    assert!(
        fault(&r).to_string().contains("one call: Ok("),
        "{}",
        fault(&r)
    );
    // Metadata that is not JSON, or has no messages_chat, is passed by as before.
    let r = run(
        &rt,
        &w,
        json!({"metadata": "not json {"}),
        Limits::default(),
    )
    .await;
    assert!(
        fault(&r).to_string().contains("one call: Ok("),
        "{}",
        fault(&r)
    );
}

#[tokio::test]
async fn episode_token_budget_is_enforced() {
    let rt = runtime();
    let w = load(&rt, c::ADV_GENERATE);
    let r = run(
        &rt,
        &w,
        json!({"calls": 50}),
        Limits {
            max_episode_tokens: 10,
            ..Limits::default()
        },
    )
    .await;
    assert_eq!(fault(&r).kind(), "limit_exceeded");
    assert!(r.generated_tokens <= 10, "{}", r.generated_tokens);
}

#[tokio::test]
async fn files_sockets_env_and_args_are_denied() {
    let rt = runtime();
    let w = load(&rt, c::ADV_WASI);
    let r = run(&rt, &w, json!({}), Limits::default()).await;
    let EpisodeOutcome::Accepted(t) = &r.outcome else {
        panic!("accepted expected, got {} ({})", r.outcome.kind(), r.stderr)
    };
    let m = &t.metadata();
    for key in ["file", "dir", "write", "tcp", "udp", "dns"] {
        assert_eq!(m[key], json!(false), "{key} should be denied: {m}");
    }
    assert_eq!(m["env"], json!(0));
    assert_eq!(m["args"], json!(0));
    assert!(!Path::new("/tmp/rollbox-escape").exists());
}

#[tokio::test]
async fn stdout_flood_is_truncated_without_hurting_the_guest() {
    let rt = runtime();
    let w = load(&rt, c::ADV_STDOUT);
    let r = run(&rt, &w, json!({}), Limits::default()).await;
    assert_eq!(r.outcome.kind(), "rejected", "the guest finishes normally");
    assert_eq!(r.stdout.len(), 64 << 10);
    assert!(r.stderr.len() <= 64 << 10);
    assert!(r.output_dropped_bytes > 16 << 20);
    assert_serves_next(&rt).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_episodes_do_not_share_global_state() {
    let rt = Arc::new(runtime_with(
        Some(Arc::new(rollbox_tests::fixed_backend(
            Duration::from_millis(200),
        ))),
        false,
    ));
    let w = load(&rt, c::GLOBAL_STATE);
    let spawn = |tag: &'static str| {
        let (rt, w) = (rt.clone(), w.clone());
        tokio::spawn(async move {
            rt.run_episode(
                &Scope::default(),
                &w,
                EpisodeRequest::new(tag, json!({"tag": tag})),
                Arc::new(Limits::default()),
            )
            .await
        })
    };
    let (a, b) = (spawn("alpha"), spawn("beta"));
    for (r, tag) in [
        (a.await.expect("join"), "alpha"),
        (b.await.expect("join"), "beta"),
    ] {
        let EpisodeOutcome::Accepted(t) = &r.outcome else {
            panic!("accepted expected, got {}", r.outcome.kind())
        };
        assert_eq!(
            t.metadata()["calls"],
            json!(1),
            "a fresh instance per episode"
        );
        assert_eq!(t.metadata()["before"], json!(""));
        assert_eq!(t.metadata()["after"], json!(tag));
    }
}

#[tokio::test]
async fn guest_errors_and_rejections_are_classified() {
    let rt = runtime_with(None, false);
    let echo = load(&rt, c::WORKFLOW_ECHO);
    // No engine configured: the workflow gets `unavailable` and returns it as its error.
    let r = run(&rt, &echo, json!({"input_ids": [1]}), Limits::default()).await;
    let f = fault(&r);
    assert_eq!(f.kind(), "guest_error");
    assert!(
        f.to_string().contains("this host has no inference engine"),
        "{f}"
    );
    let r = run(&rt, &echo, json!({"text": "no ids"}), Limits::default()).await;
    assert!(fault(&r).to_string().contains("input_ids"));
    let trivial = load(&rt, c::TRIVIAL);
    assert_eq!(
        run(&rt, &trivial, json!({}), Limits::default())
            .await
            .outcome
            .kind(),
        "rejected"
    );
}

#[tokio::test]
async fn standard_keys_are_validated_at_the_boundary() {
    let rt = runtime();
    let w = load(&rt, c::BAD_KEYS);
    let r = run(&rt, &w, json!({}), Limits::default()).await;
    let f = fault(&r);
    assert_eq!(f.kind(), "invalid_output");
    let msg = f.to_string();
    assert!(
        msg.contains("`loss_mask`")
            && msg.contains("expected i32 [B, L]")
            && msg.contains("got i64 [1, 3]"),
        "{msg}"
    );
    // Multi-modal inputs in a trajectory of two rows could not be split back per trajectory.
    let r = run(
        &rt,
        &w,
        json!({"case": "multi_modal_rows"}),
        Limits::default(),
    )
    .await;
    let f = fault(&r);
    assert_eq!(f.kind(), "invalid_output");
    let msg = f.to_string();
    assert!(
        msg.contains("`multi_modal_input.pixel_values`") && msg.contains("with B = 2"),
        "{msg}"
    );
}
