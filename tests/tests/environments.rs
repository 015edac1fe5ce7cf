//! Environments (the WIT `environment` world): the code-interpreter reference environment runs
//! an episode whose Python keeps its state from step to step in one python-exec session, and
//! scores its `\boxed{}` answer; each episode is a fresh instance; a hostile environment that
//! loops, allocates without bound or answers something invalid is stopped with a typed fault
//! that ends its episode, and takes no other episode with it.

use std::path::Path;
use std::sync::Arc;

use rollbox_runtime::{
    CallPolicy, EnvSession, EnvTarget, EnvironmentComponent, GuestFault, Limits, Scope,
    ToolComponent,
};
use rollbox_tests::components as c;
use rollbox_tests::runtime;
use serde_json::json;

fn limits(timeout_ms: u64) -> Arc<Limits> {
    Arc::new(Limits {
        timeout: std::time::Duration::from_millis(timeout_ms),
        ..Limits::untrusted_tool()
    })
}

#[tokio::test]
async fn a_code_interpreter_episode_keeps_its_python_state_and_scores_the_answer() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let rt = runtime();
    let python = CallPolicy {
        limits: limits(2_000),
        ..CallPolicy::tool()
    };
    rt.register::<ToolComponent>("python", Path::new(c::PYTHON_EXEC_TOOL), python)
        .expect("python-exec registers");
    let env = rt
        .load::<EnvironmentComponent>(Path::new(c::ENVIRONMENT_CODE_INTERPRETER))
        .expect("the environment loads");
    let scope = Scope::default();
    let target = || EnvTarget {
        name: "code",
        component: &env,
        limits: limits(10_000),
    };
    let e: EnvSession = rt.open_session(&scope, target()).await.expect("opens");
    let row = json!({"question": "What is 6 * 7 + 1?", "answer": "43"}).to_string();
    let obs = e.reset(row.clone()).await.result.expect("reset");
    assert_eq!(obs, "What is 6 * 7 + 1?");
    let s = e
        .step("Let me compute.\n```python\nx = 6 * 7\nprint(x)\n```".into())
        .await
        .result
        .expect("a step");
    assert_eq!(
        (s.observation.as_str(), s.reward, s.done),
        ("42\n", 0.0, false)
    );
    let s = e
        .step("```python\nx + 1\n```".into())
        .await
        .result
        .expect("step");
    assert_eq!(s.observation, "43", "the interpreter kept x");
    // A block that loops times out in python-exec: observed, and the next block starts afresh.
    let s = e
        .step("```python\nwhile True: pass\n```".into())
        .await
        .result
        .expect("step");
    assert!(
        s.observation.starts_with("error: ") && s.observation.contains("Timeout"),
        "{s:?}"
    );
    let s = e
        .step("```python\nx\n```".into())
        .await
        .result
        .expect("step");
    assert!(s.observation.contains("NameError"), "{s:?}");
    let s = e
        .step("So it is \\boxed{43}.".into())
        .await
        .result
        .expect("step");
    assert_eq!((s.reward, s.done), (1.0, true));
    assert_eq!(s.metadata["answer"], "43");
    // The next episode is a fresh instance: a wrong answer scores 0.
    let e: EnvSession = rt.open_session(&scope, target()).await.expect("opens");
    e.reset(row).await.result.expect("reset");
    let s = e.step("\\boxed{41}".into()).await.result.expect("step");
    assert_eq!((s.reward, s.done), (0.0, true));
    // A row without a question is the environment's error, named.
    let err = e.reset("{}".into()).await.result.expect_err("no question");
    assert!(err.to_string().contains("no `question`"), "{err}");
}

#[tokio::test]
async fn a_hostile_environment_is_stopped_and_its_episode_ends() {
    let rt = runtime();
    let env = rt
        .load::<EnvironmentComponent>(Path::new(c::ENV_HOSTILE))
        .expect("loads");
    let scope = Scope::default();
    let open = || {
        let target = EnvTarget {
            name: "hostile",
            component: &env,
            limits: limits(1_000),
        };
        rt.open_session::<EnvSession>(&scope, target)
    };
    let e = open().await.expect("opens");
    let other = open().await.expect("opens");
    assert_eq!(
        e.reset("{\"a\": 1}".into()).await.result.expect("reset"),
        "reset with {\"a\":1}"
    );
    assert_eq!(
        e.step("go".into()).await.result.expect("step").observation,
        "step 1"
    );
    // Its own error is an answer: the episode goes on.
    let err = e.step("err".into()).await.result.expect_err("refused");
    assert!(matches!(err, GuestFault::GuestError { .. }), "{err}");
    assert_eq!(
        e.step("go".into()).await.result.expect("step").observation,
        "step 2"
    );
    // A loop is stopped at the per-call timeout, and ends the episode.
    let err = e.step("loop".into()).await.result.expect_err("stopped");
    assert!(matches!(err, GuestFault::Timeout { .. }), "{err}");
    let err = e.step("go".into()).await.result.expect_err("ended");
    assert!(
        err.to_string().contains("ended on an earlier call"),
        "{err}"
    );
    // The other episode is untouched: its own instance, its own count.
    assert_eq!(
        other
            .step("go".into())
            .await
            .result
            .expect("step")
            .observation,
        "step 1"
    );
    // Unbounded allocation stops at the memory limit.
    let e = open().await.expect("opens");
    let err = e.step("alloc".into()).await.result.expect_err("stopped");
    assert!(
        matches!(
            err,
            GuestFault::MemoryLimit { .. } | GuestFault::Trap { .. }
        ),
        "{err}"
    );
    // A NaN reward or metadata that is not an object is refused, and ends the episode.
    for action in ["nan", "list-metadata"] {
        let e = open().await.expect("opens");
        let err = e.step(action.into()).await.result.expect_err("refused");
        assert!(
            matches!(err, GuestFault::InvalidOutput { .. }),
            "{action}: {err}"
        );
        assert!(e.step("go".into()).await.result.is_err(), "{action}");
    }
}

/// A repo episode: files in memory, the visible tests failing then passing after a fix, the
/// hidden tests deciding the reward in a fresh session; a program that patches unittest to
/// pass scores 0, and the hidden tests are never readable.
#[tokio::test]
async fn a_repo_episode_is_graded_by_its_hidden_tests() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let rt = runtime();
    let python = CallPolicy {
        limits: limits(5_000),
        ..CallPolicy::tool()
    };
    rt.register::<ToolComponent>("python", Path::new(c::PYTHON_EXEC_TOOL), python)
        .expect("python-exec registers");
    let env = rt
        .load::<EnvironmentComponent>(Path::new(c::ENVIRONMENT_REPO))
        .expect("the environment loads");
    let scope = Scope::default();
    let row = json!({
        "task": "Fix add().",
        "files": {
            "calc.py": "def add(a, b):\n    return a - b\n",
            "test_calc.py": "import unittest\nfrom calc import add\n\nclass T(unittest.TestCase):\n    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n",
        },
        "tests": ["test_calc"],
        "hidden_files": {
            "test_hidden.py": "import unittest\nfrom calc import add\n\nclass H(unittest.TestCase):\n    def test_negative(self):\n        self.assertEqual(add(-1, 1), 0)\n\n    def test_big(self):\n        self.assertEqual(add(10**20, 1), 10**20 + 1)\n",
        },
        "hidden_tests": ["test_hidden"],
    });
    let call = |name: &str, args: serde_json::Value| {
        format!(
            "<tool_call>{}</tool_call>",
            json!({"name": name, "arguments": args})
        )
    };
    let open = || {
        let target = EnvTarget {
            name: "repo",
            component: &env,
            limits: limits(20_000),
        };
        rt.open_session::<EnvSession>(&scope, target)
    };
    let e = open().await.expect("opens");
    let obs = e.reset(row.to_string()).await.result.expect("reset");
    assert!(
        obs.starts_with("Fix add().") && obs.contains("calc.py\ntest_calc.py"),
        "{obs}"
    );
    let step = |a: String| {
        let e = &e;
        async move { e.step(a).await.result.expect("a step") }
    };
    assert_eq!(
        step(call("list_files", json!({}))).await.observation,
        "calc.py\ntest_calc.py"
    );
    let hidden = step(call("read_file", json!({"path": "test_hidden.py"}))).await;
    assert_eq!(hidden.observation, "error: no file `test_hidden.py`");
    let run = step(call("run_tests", json!({}))).await;
    assert!(
        run.observation.starts_with("1 tests, 1 failures, 0 errors"),
        "{}",
        run.observation
    );
    let fix = "def add(a, b):\n    return a + b\n";
    step(call(
        "write_file",
        json!({"path": "calc.py", "content": fix}),
    ))
    .await;
    let run = step(call("run_tests", json!({}))).await;
    assert!(
        run.observation.starts_with("1 tests, 0 failures, 0 errors"),
        "{}",
        run.observation
    );
    let done = step(call("submit", json!({}))).await;
    assert_eq!((done.reward, done.done), (1.0, true), "{:?}", done.metadata);
    assert_eq!(
        done.metadata["hidden_tests"]["tests"], 2,
        "{:?}",
        done.metadata
    );

    // A program that patches unittest passes the visible run and scores 0.
    let e = open().await.expect("opens");
    e.reset(row.to_string()).await.result.expect("reset");
    let cheat = "import unittest\nunittest.TestCase.assertEqual = lambda *a, **k: None\n\ndef add(a, b):\n    return 0\n";
    let step = |a: String| {
        let e = &e;
        async move { e.step(a).await.result.expect("a step") }
    };
    step(call(
        "write_file",
        json!({"path": "calc.py", "content": cheat}),
    ))
    .await;
    let run = step(call("run_tests", json!({}))).await;
    assert!(
        run.observation.starts_with("1 tests, 0 failures"),
        "{}",
        run.observation
    );
    let done = step(call("submit", json!({}))).await;
    assert_eq!(done.reward, 0.0, "{:?}", done.metadata);
    assert_eq!(
        done.metadata["hidden_tests"]["tampered"], true,
        "{:?}",
        done.metadata
    );
    // Bad calls are observations; a path outside the project is refused.
    let e = open().await.expect("opens");
    e.reset(row.to_string()).await.result.expect("reset");
    let out = e
        .step("<tool_call>{oops</tool_call>".into())
        .await
        .result
        .expect("step");
    assert!(
        out.observation
            .starts_with("error: the tool call is not JSON"),
        "{}",
        out.observation
    );
    let up = call("write_file", json!({"path": "../x.py", "content": ""}));
    let out = e.step(up).await.result.expect("step");
    assert_eq!(
        out.observation,
        "error: `../x.py` is not a valid project path"
    );
}
