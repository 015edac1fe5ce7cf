//! Tool sessions: one python-exec instance kept across calls, its state persisting; another
//! session sees none of it; a fault ends the session and frees it; the per-runtime cap.

use std::path::Path;

use rollbox_runtime::{CallPolicy, GuestFault, Limits, Scope, ToolComponent};
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
        limits: std::sync::Arc::new(Limits {
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
    let a = rt.open_session(&scope, "python").await.expect("opens");
    let b = rt.open_session(&scope, "python").await.expect("opens");
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
    let s = rt.open_session(&scope, "python").await.expect("opens");
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
    let s = rt.open_session(&scope, "python").await.expect("opens");
    let r = s.call(snippet("x = bytearray(1 << 30)")).await;
    match &r.result {
        Ok(text) => assert!(text.contains("MemoryError"), "{text}"),
        Err(f) => assert!(f.kind() == "memory_limit" || f.kind() == "trap", "{f}"),
    }
    let s = rt.open_session(&scope, "python").await.expect("opens");
    assert_eq!(out(&s.call(snippet("2 + 2")).await)["value"], "4");
    s.close().await;
    assert!(s.call(snippet("1")).await.result.is_err());
    // An unknown tool is named.
    let err = rt
        .open_session(&scope, "nope")
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
    let mut open = Vec::new();
    for _ in 0..cap {
        open.push(rt.open_session(&scope, "python").await.expect("opens"));
    }
    let err = rt
        .open_session(&scope, "python")
        .await
        .expect_err("over the cap")
        .to_string();
    assert!(err.contains("4 tool sessions are open"), "{err}");
    // Fresh calls still run beside the open sessions.
    let r = rt
        .call_tool(&scope, "python", snippet("1 + 1"))
        .await
        .expect("called");
    assert!(r.result.is_ok(), "{:?}", r.result);
    open.pop();
    let s = rt
        .open_session(&scope, "python")
        .await
        .expect("a place is free again");
    assert_eq!(out(&s.call(snippet("3 * 3")).await)["value"], "9");
}
