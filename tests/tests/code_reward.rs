//! The `code` reward through the real boundary: the reward component, the host's `tools` for
//! rewards, and the python-exec tool running each test case in a fresh CPython instance.
//! Honest programs score as verl's `prime_code` scores them; programs that try to fool the
//! grader (objects whose `__eq__` is always true, exiting after printing case 1's answer,
//! patching `print`) score what an honest grader gives; a looping program ends at the per-case
//! timeout; and the next call works.

use std::path::Path;
use std::time::{Duration, Instant};

use rollbox_runtime::{CallPolicy, RewardCall, RewardComponent, Runtime, Scope};
use rollbox_tests::components as c;
use rollbox_tests::runtime;
use serde_json::{Value, json};

/// The code reward, and python-exec as its runner with a 1 s per-case timeout.
fn code_runtime() -> Option<Runtime> {
    rollbox_tests::built(c::PYTHON_EXEC_TOOL)
        .then(|| rollbox_tests::code_runtime(Duration::from_secs(1)))
}

fn stdio(inputs: &[&str], outputs: &[&str]) -> Value {
    json!({"reward_model": {"ground_truth": json!({"inputs": inputs, "outputs": outputs}).to_string()}})
}

async fn score(rt: &Runtime, completion: &str, row: Value) -> f64 {
    rollbox_tests::score_code(rt, completion, row)
        .await
        .unwrap_or_else(|f| panic!("the code reward faulted: {f}"))
}

fn fenced(code: &str) -> String {
    format!("Here is my solution.\n```python\n{code}\n```\n")
}

const ADD: &[&str] = &["1 2\n", "10 20\n"];
const SUMS: &[&str] = &["3\n", "30\n"];

#[tokio::test(flavor = "multi_thread")]
async fn honest_programs_score_as_prime_code_does() {
    let Some(rt) = code_runtime() else { return };
    let row = stdio(ADD, SUMS);
    let judge = {
        let mut r = row.clone();
        r["code_reward"] = json!({"semantics": "judge"});
        r
    };
    // (program, verl's prime_code score, `judge`'s): where they differ, verl's harness is the
    // reason (python-exec's prime_harness.py).
    let cases: &[(&str, f64, f64)] = &[
        ("a, b = map(int, input().split())\nprint(a + b)", 1.0, 1.0),
        // verl's stdin is an io.StringIO: no `buffer`.
        (
            "import sys\nprint(sum(map(int, sys.stdin.buffer.read().split())))",
            0.0,
            1.0,
        ),
        (
            "for line in sys.stdin:\n    print(sum(map(int, line.split())))",
            1.0,
            1.0,
        ),
        ("a, b = map(int, input().split())\nprint(a * b)", 0.0, 0.0),
        (
            "a, b = map(int, input().split())\nprint(a + b if a < 5 else 0)",
            0.5,
            0.5,
        ),
        (
            "a, b = map(int, input().split())\nprint(a + b, '')",
            1.0,
            1.0,
        ),
        ("def f(:\n    pass", 0.0, 0.0),
        ("raise ValueError('no')", 0.0, 0.0),
        // The APPS harness's imports come first (`sqrt` from `from math import *`).
        (
            "print(int(sqrt(16)) - 4 + sum(map(int, input().split())))",
            1.0,
            1.0,
        ),
        // `from sys import *` binds the streams of the time the harness's imports ran: in
        // verl the worker's, whose `readline` was patched to give the input's lines and whose
        // stdout writes nowhere; `judge` runs the imports just before the program.
        (
            "a, b = map(int, stdin.readline().split())\nstdout.write(str(a + b) + '\\n')",
            0.0,
            1.0,
        ),
        (
            "a, b = map(int, stdin.readline().split())\nprint(a + b)",
            1.0,
            1.0,
        ),
        // ... and its recursion limit.
        (
            "def f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\nprint(f(3000) - 3000 + sum(map(int, input().split())))",
            1.0,
            1.0,
        ),
        // A `from __future__` import after the harness's imports does not compile.
        (
            "from __future__ import annotations\na, b = map(int, input().split())\nprint(a + b)",
            0.0,
            0.0,
        ),
        // verl set `exit` to None; a judge's `exit()` ends the program.
        (
            "a, b = map(int, input().split())\nprint(a + b)\nexit()",
            0.0,
            1.0,
        ),
        // verl's wrapper makes top-level names locals of `code()`: `global` finds nothing.
        (
            "t = 0\ndef add(x):\n    global t\n    t += x\nfor v in map(int, input().split()):\n    add(v)\nprint(t)",
            0.0,
            1.0,
        ),
    ];
    for (code, prime, judged) in cases {
        let got = score(&rt, &fenced(code), row.clone()).await;
        assert_eq!(got, *prime, "prime_code: {code}");
        let got = score(&rt, &fenced(code), judge.clone()).await;
        assert_eq!(got, *judged, "judge: {code}");
    }
    // No fence: the whole completion is the program, as prime_code takes it.
    let bare = score(&rt, "a, b = map(int, input().split())\nprint(a + b)", row).await;
    assert_eq!(bare, 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn call_based_problems_compare_json_values_outside_the_program() {
    let Some(rt) = code_runtime() else { return };
    let row = json!({"reward_model": {"ground_truth": json!({
        "fn_name": "pair",
        "inputs": ["1\n2", "3\n4"],
        "outputs": ["[1, 2]", "[3, 4]"],
    }).to_string()}});
    let honest = "class Solution:\n    def pair(self, a, b):\n        return (a, b)";
    assert_eq!(score(&rt, &fenced(honest), row.clone()).await, 1.0);
    let function = "def pair(a, b):\n    return [a, b]";
    assert_eq!(score(&rt, &fenced(function), row.clone()).await, 1.0);
    // Objects that claim to equal anything: not JSON, so the case fails.
    let liar = "class Any:\n    def __eq__(self, o): return True\n    def __ne__(self, o): return False\ndef pair(a, b):\n    return Any()";
    assert_eq!(score(&rt, &fenced(liar), row.clone()).await, 0.0);
    // A list subclass whose __eq__ lies: judged on its JSON, the wrong elements.
    let sub = "class L(list):\n    def __eq__(self, o): return True\ndef pair(a, b):\n    return L([0, 0])";
    assert_eq!(score(&rt, &fenced(sub), row.clone()).await, 0.0);
    let endless = "def pair(a, b):\n    while True:\n        yield a";
    assert_eq!(score(&rt, &fenced(endless), row.clone()).await, 0.0);
    let missing = "def other(a, b):\n    return [a, b]";
    assert_eq!(score(&rt, &fenced(missing), row).await, 0.0);
    // Big integers compare exactly, in both semantics; a string dressed as the grader's own
    // form of one (NUL, `int:`, the digits, in any JSON spelling) is not taken for it.
    for semantics in ["prime_code", "sandbox_fusion"] {
        let big = json!({"code_reward": {"semantics": semantics}, "reward_model": {"ground_truth": json!({
            "fn_name": "fib",
            "inputs": ["100"],
            "outputs": ["354224848179261915075"],
        }).to_string()}});
        let honest = "def fib(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a";
        assert_eq!(
            score(&rt, &fenced(honest), big.clone()).await,
            1.0,
            "{semantics}"
        );
        let off = "def fib(n):\n    return 354224848179261915076";
        assert_eq!(
            score(&rt, &fenced(off), big.clone()).await,
            0.0,
            "{semantics}"
        );
        for forged in [
            "def fib(n):\n    return chr(0) + 'int:354224848179261915075'",
            "def fib(n):\n    return [chr(0) + 'int:354224848179261915075']",
        ] {
            assert_eq!(
                score(&rt, &fenced(forged), big.clone()).await,
                0.0,
                "{semantics}: {forged}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn cheats_score_what_an_honest_grader_gives() {
    let Some(rt) = code_runtime() else { return };
    let row = stdio(ADD, SUMS);
    // Prints case 1's answer and exits for every case: right once.
    let exit = "import sys\nprint(3)\nsys.exit(0)";
    assert_eq!(score(&rt, &fenced(exit), row.clone()).await, 0.5);
    // Writes the right answer to a stdout of its own: only what reached the real one counts.
    let patch = "import builtins, sys, io\nmine = io.StringIO()\nsys.stdout = mine\nprint(sum(map(int, input().split())))\nbuiltins.print = lambda *a, **k: None";
    assert_eq!(score(&rt, &fenced(patch), row.clone()).await, 0.0);
    // Looks for the expected outputs in the instance's memory: they are never there.
    let snoop = "import gc\ntargets = {str(n) + chr(10) for n in (3, 30)}\nfound = 'none'\nfor o in gc.get_objects():\n    vals = o.values() if isinstance(o, dict) else o if isinstance(o, (list, tuple)) else ()\n    for v in vals:\n        if isinstance(v, str) and v in targets:\n            found = v\nprint(found, end='')";
    assert_eq!(score(&rt, &fenced(snoop), row.clone()).await, 0.0);
    // Computes the answer but prints nothing, and patches json so a reply would claim it did:
    // the reply is built with the harness's own copy.
    let json_patch = "import json\nans = sum(map(int, input().split()))\njson.dumps = lambda *a, **k: json.JSONEncoder().encode({'ok': True, 'phase': 'run', 'stdout': f'{ans}\\n', 'truncated': False})";
    assert_eq!(score(&rt, &fenced(json_patch), row.clone()).await, 0.0);
    // The next call works.
    let honest = "a, b = map(int, input().split())\nprint(a + b)";
    assert_eq!(score(&rt, &fenced(honest), row).await, 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_looping_program_ends_at_the_per_case_timeout() {
    let Some(rt) = code_runtime() else { return };
    let row = stdio(ADD, SUMS);
    let start = Instant::now();
    assert_eq!(
        score(&rt, &fenced("while True:\n    pass"), row.clone()).await,
        0.0
    );
    let took = start.elapsed();
    // Two cases, 1 s each, run concurrently: about 1 s, not prime_code's 5 + 10 + 10 = 25
    // (the bound leaves room for any load, issue 52).
    assert!(took < Duration::from_secs(20), "{took:?}");
    let honest = "a, b = map(int, input().split())\nprint(a + b)";
    assert_eq!(score(&rt, &fenced(honest), row).await, 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn sandbox_fusion_semantics_are_exact_and_need_a_fence() {
    let Some(rt) = code_runtime() else { return };
    let mut row = stdio(ADD, SUMS);
    row["code_reward"] = json!({"semantics": "sandbox_fusion"});
    let honest = "a, b = map(int, input().split())\nprint(a + b)";
    assert_eq!(score(&rt, &fenced(honest), row.clone()).await, 1.0);
    let trailing = "a, b = map(int, input().split())\nprint(a + b, '')";
    assert_eq!(score(&rt, &fenced(trailing), row.clone()).await, 0.0);
    assert_eq!(score(&rt, honest, row.clone()).await, 0.0, "no code block");
    let plain = format!("```\n{honest}\n```");
    assert_eq!(score(&rt, &plain, row).await, 1.0);
}

#[tokio::test(flavor = "multi_thread")]
async fn without_a_runner_the_error_names_the_fix() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let rt = runtime();
    rt.register::<RewardComponent>(
        "code",
        Path::new(c::REWARD_CODE),
        CallPolicy {
            retries: 0,
            ..CallPolicy::default()
        },
    )
    .expect("code reward");
    let called = rt
        .score(
            &Scope::default(),
            "code",
            RewardCall {
                prompt: String::new(),
                completion: fenced("print(3)"),
                prompt_ids: vec![],
                completion_ids: vec![],
                data: stdio(ADD, SUMS),
            },
        )
        .await
        .expect("registered");
    let err = called.result.expect_err("no runner").to_string();
    assert!(err.contains("--tool python=python_exec.wasm"), "{err}");
    let bad = rt
        .score(
            &Scope::default(),
            "code",
            RewardCall {
                prompt: String::new(),
                completion: fenced("print(3)"),
                prompt_ids: vec![],
                completion_ids: vec![],
                data: json!({"answer": "3"}),
            },
        )
        .await
        .expect("registered");
    let err = bad.result.expect_err("no tests").to_string();
    assert!(err.contains("no test cases"), "{err}");
}

#[tokio::test(flavor = "multi_thread")]
async fn more_cases_than_one_call_many_takes_all_run() {
    let Some(rt) = code_runtime() else { return };
    // 300 cases, all scored (`continuous: false`): past the 256 calls one `call-many` takes.
    let n = 300;
    let inputs: Vec<String> = (0..n).map(|i| format!("{i} 1\n")).collect();
    let outputs: Vec<String> = (0..n).map(|i| format!("{}\n", i + 1)).collect();
    let mut row = json!({"reward_model": {"ground_truth":
        json!({"inputs": inputs, "outputs": outputs}).to_string()}});
    row["code_reward"] = json!({"semantics": "sandbox_fusion", "continuous": false});
    let honest = "a, b = map(int, input().split())\nprint(a + b)";
    assert_eq!(score(&rt, &fenced(honest), row.clone()).await, 1.0);
    // Only the last case wrong: the fraction over all 300.
    let last_wrong = "a, b = map(int, input().split())\nprint(a + b if a < 299 else 0)";
    assert_eq!(score(&rt, &fenced(last_wrong), row).await, 299.0 / 300.0);
}
