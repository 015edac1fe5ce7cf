//! Tool sessions: one python-exec instance kept across calls, its state persisting; another
//! session sees none of it; a fault ends the session and frees it; the per-runtime cap. Then
//! the same through the WIT `session` resource, opened by a workflow (`session_caller`): the
//! cap per call, the host's cap, and sessions a guest never drops closed with its episode.

use std::path::Path;

use std::sync::Arc;

use rollbox_runtime::{
    CallPolicy, EpisodeOutcome, EpisodeRequest, GuestFault, Limits, Scope, ToolComponent,
    ToolSession, WorkflowComponent,
};
use rollbox_tests::components as c;
use rollbox_tests::runtime;
use serde_json::{Value, json};

fn out(r: &rollbox_runtime::Called<String>) -> Value {
    let text = r.result.as_ref().expect("the call ran");
    serde_json::from_str(text).expect("python-exec answers JSON")
}

fn snippet(code: &str) -> String {
    json!({ "code": code }).to_string()
}

fn python(timeout_ms: u64) -> CallPolicy {
    CallPolicy {
        limits: Arc::new(Limits {
            timeout: std::time::Duration::from_millis(timeout_ms),
            ..Limits::untrusted_tool()
        }),
        ..CallPolicy::tool()
    }
}

#[tokio::test]
async fn a_session_keeps_its_state_and_shares_none() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let rt = runtime();
    rt.register::<ToolComponent>("python", Path::new(c::PYTHON_EXEC_TOOL), python(5_000))
        .expect("python-exec registers");
    let scope = Scope::default();
    let a = rt
        .open_session::<ToolSession>(&scope, "python")
        .await
        .expect("opens");
    let b = rt
        .open_session::<ToolSession>(&scope, "python")
        .await
        .expect("opens");
    // A module's attribute lives in the instance's memory: the next call on the same session
    // sees it, another session never does.
    let r = a
        .call(snippet("import sys\nsys.counter = 41\nsys.counter"))
        .await;
    assert_eq!(out(&r)["value"], "41", "{:?}", r.result);
    let r = a
        .call(snippet("import sys\nsys.counter += 1\nsys.counter"))
        .await;
    assert_eq!(out(&r)["value"], "42", "{:?}", r.result);
    let r = b.call(snippet("import sys\nhasattr(sys, 'counter')")).await;
    assert_eq!(out(&r)["value"], "False", "{:?}", r.result);
    // A fresh call (no session) sees nothing of either.
    let r = rt
        .call_tool(
            &scope,
            "python",
            snippet("import sys\nhasattr(sys, 'counter')"),
        )
        .await
        .expect("called");
    assert_eq!(
        serde_json::from_str::<Value>(r.result.as_ref().expect("ran")).expect("JSON")["value"],
        "False"
    );
    // Snippets of a session share one namespace: variables, functions and imports.
    a.call(snippet(
        "import fractions\ny = 5\ndef double(v):\n    return 2 * v",
    ))
    .await;
    let r = a.call(snippet("double(y), fractions.Fraction(1, 2)")).await;
    assert_eq!(out(&r)["value"], "(10, Fraction(1, 2))", "{:?}", r.result);
    let r = b.call(snippet("'y' in dir()")).await;
    assert_eq!(out(&r)["value"], "False", "{:?}", r.result);
    // What a call printed is its own.
    let r = a.call(snippet("print('one')")).await;
    assert_eq!(out(&r)["stdout"], "one\n");
    let r = a.call(snippet("print('two')")).await;
    assert_eq!(out(&r)["stdout"], "two\n");
}

#[tokio::test]
async fn a_faulted_session_ends_and_says_why() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let rt = runtime();
    rt.register::<ToolComponent>("python", Path::new(c::PYTHON_EXEC_TOOL), python(2_000))
        .expect("python-exec registers");
    let scope = Scope::default();
    let s = rt
        .open_session::<ToolSession>(&scope, "python")
        .await
        .expect("opens");
    let r = s.call(snippet("x = 1\nx")).await;
    assert_eq!(out(&r)["value"], "1");
    // Each call has the whole timeout: two calls of 1.1 s under a 2 s limit both run (0.9 s
    // of slack a call, so a loaded machine does not move the outcome).
    for _ in 0..2 {
        let r = s
            .call(snippet(
                "import time\nt = time.monotonic()\nwhile time.monotonic() - t < 1.1: pass\n1",
            ))
            .await;
        assert_eq!(out(&r)["value"], "1", "{:?}", r.result);
    }
    let r = s.call(snippet("while True: pass")).await;
    assert!(
        matches!(r.result, Err(GuestFault::Timeout { .. })),
        "{:?}",
        r.result
    );
    let r = s.call(snippet("1")).await;
    let err = r.result.expect_err("the session ended").to_string();
    assert!(
        err.contains("ended on an earlier call") && err.contains("open a new session"),
        "{err}"
    );
    // A memory bomb ends its session too, and a new session works.
    let s = rt
        .open_session::<ToolSession>(&scope, "python")
        .await
        .expect("opens");
    let r = s.call(snippet("x = bytearray(1 << 30)")).await;
    match &r.result {
        Ok(text) => assert!(text.contains("MemoryError"), "{text}"),
        Err(f) => assert!(f.kind() == "memory_limit" || f.kind() == "trap", "{f}"),
    }
    let s = rt
        .open_session::<ToolSession>(&scope, "python")
        .await
        .expect("opens");
    assert_eq!(out(&s.call(snippet("2 + 2")).await)["value"], "4");
    s.close().await;
    assert!(s.call(snippet("1")).await.result.is_err());
    // An unknown tool is named.
    let err = rt
        .open_session::<ToolSession>(&scope, "nope")
        .await
        .expect_err("unknown")
        .to_string();
    assert!(err.contains("no tool named `nope`"), "{err}");
}

/// A runtime holds a sixteenth of its instance slots in sessions (4 of the test runtime's 64):
/// the next is refused, naming the cap, until one is dropped.
#[tokio::test]
async fn sessions_past_the_cap_are_refused_until_one_ends() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let rt = runtime();
    rt.register::<ToolComponent>("python", Path::new(c::PYTHON_EXEC_TOOL), python(5_000))
        .expect("python-exec registers");
    let scope = Scope::default();
    let cap = rollbox_runtime::session::session_cap(64);
    assert_eq!(cap, 4);
    // A default runtime's cap, which `Services` holds until a runtime sets its own.
    let default = rollbox_runtime::RuntimeConfig::default().max_instances;
    assert_eq!(rollbox_runtime::session::session_cap(default), 62);
    let mut open = Vec::new();
    for _ in 0..cap {
        open.push(
            rt.open_session::<ToolSession>(&scope, "python")
                .await
                .expect("opens"),
        );
    }
    let err = rt
        .open_session::<ToolSession>(&scope, "python")
        .await
        .expect_err("over the cap")
        .to_string();
    assert!(err.contains("holds 4 tool sessions open"), "{err}");
    // Fresh calls still run beside the open sessions.
    let r = rt
        .call_tool(&scope, "python", snippet("1 + 1"))
        .await
        .expect("called");
    assert!(r.result.is_ok(), "{:?}", r.result);
    open.pop();
    let s = rt
        .open_session::<ToolSession>(&scope, "python")
        .await
        .expect("a place is free again");
    assert_eq!(out(&s.call(snippet("3 * 3")).await)["value"], "9");
}

/// One episode of `session_caller` with `row`; its metadata.
async fn episode(rt: &rollbox_runtime::Runtime, row: Value) -> Value {
    let caller = rt
        .load::<WorkflowComponent>(Path::new(c::SESSION_CALLER))
        .expect("loads");
    let report = rt
        .run_episode(
            &Scope::default(),
            &caller,
            EpisodeRequest::new("r0-s0", row),
            Arc::new(Limits::default()),
        )
        .await;
    match report.outcome {
        EpisodeOutcome::Accepted(out) => out.metadata(),
        other => panic!("the episode did not finish: {other:?}"),
    }
}

#[tokio::test]
async fn a_workflow_session_keeps_its_state_for_the_episode() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let rt = runtime();
    rt.register::<ToolComponent>("python", Path::new(c::PYTHON_EXEC_TOOL), python(2_000))
        .expect("python-exec registers");
    let calls = json!([{"code": "x = 41"}, {"code": "x += 1\nx"}, {"code": "while True: pass"}, {"code": "x"}]);
    let meta = episode(&rt, json!({"tool": "python", "calls": calls})).await;
    let calls = meta["calls"].as_array().expect("calls");
    let value = |i: usize| -> Value {
        serde_json::from_str::<Value>(calls[i]["output"].as_str().expect("an output"))
            .expect("JSON")["value"]
            .clone()
    };
    assert_eq!(value(1), "42", "{meta}");
    // A timeout ends the session: that call says so, the next is refused naming why.
    let timeout = calls[2]["error"].as_str().expect("an error");
    assert!(timeout.contains("Error::Timeout("), "{timeout}");
    let after = calls[3]["error"].as_str().expect("an error");
    assert!(
        after.contains("Error::LimitExceeded(") && after.contains("ended on an earlier call"),
        "{after}"
    );
    // The next episode's session starts from the tool's snapshot.
    let meta = episode(
        &rt,
        json!({"tool": "python", "calls": [{"code": "'x' in dir()"}]}),
    )
    .await;
    let out: Value =
        serde_json::from_str(meta["calls"][0]["output"].as_str().expect("output")).expect("JSON");
    assert_eq!(out["value"], "False", "{meta}");
    // A session that faults takes none of the episode's other sessions with it.
    let calls = json!([
        {"session": 0, "args": {"code": "a = 1"}},
        {"session": 1, "args": {"code": "b = 2"}},
        {"session": 0, "args": {"code": "x = bytearray(1 << 30)\nwhile True: pass"}},
        {"session": 1, "args": {"code": "b + 1"}},
        {"session": 0, "args": {"code": "a"}},
    ]);
    let meta = episode(&rt, json!({"tool": "python", "open": 2, "calls": calls})).await;
    let calls = meta["calls"].as_array().expect("calls");
    assert!(calls[2]["error"].is_string(), "{meta}");
    let out: Value =
        serde_json::from_str(calls[3]["output"].as_str().expect("output")).expect("JSON");
    assert_eq!(out["value"], "3", "{meta}");
    assert!(
        calls[4]["error"]
            .as_str()
            .expect("error")
            .contains("ended on an earlier call"),
        "{meta}"
    );
    // An unknown tool is named.
    let meta = episode(&rt, json!({"tool": "nope"})).await;
    let refused = meta["refused"][0].as_str().expect("refused");
    assert!(
        refused.contains("Error::Unknown(") && refused.contains("no tool named `nope`"),
        "{refused}"
    );
}

/// An episode holds at most 8 sessions; past the host's cap (4 here) opens are refused; the
/// sessions an episode never dropped are closed when it ends, so the next episodes open theirs.
#[tokio::test]
async fn guest_sessions_are_capped_and_closed_with_their_episode() {
    if !rollbox_tests::built(c::TOOL_ECHO) {
        return;
    }
    let rt = runtime();
    rt.register::<ToolComponent>("echo", Path::new(c::TOOL_ECHO), CallPolicy::tool())
        .expect("echo registers");
    for _ in 0..3 {
        let meta = episode(&rt, json!({"tool": "echo", "open": 6, "forget": true})).await;
        assert_eq!(meta["opened"], 4, "{meta}");
        let refused = meta["refused"][0].as_str().expect("refused");
        assert!(
            refused.contains("Error::LimitExceeded(")
                && refused.contains("holds 4 tool sessions open"),
            "{refused}"
        );
    }
    // The cap per episode, under a host that allows more (a sixteenth of 160 slots: 10).
    let rt = rollbox_runtime::Runtime::new(
        rollbox_runtime::RuntimeConfig {
            cache_dir: Some(rollbox_tests::test_cache_dir()),
            max_instances: 160,
            ..Default::default()
        },
        rollbox_runtime::Services::new(),
    )
    .expect("runtime starts");
    rt.register::<ToolComponent>("echo", Path::new(c::TOOL_ECHO), CallPolicy::tool())
        .expect("echo registers");
    let meta = episode(
        &rt,
        json!({"tool": "echo", "open": 9, "calls": [{"text": "hi"}]}),
    )
    .await;
    assert_eq!(meta["opened"], 8, "{meta}");
    let refused = meta["refused"][0].as_str().expect("refused");
    assert!(refused.contains("holds 8 open tool sessions"), "{refused}");
    assert!(meta["calls"][0]["output"].is_string(), "{meta}");
}
