//! Tools through the real guest boundary (issue 21): the python-exec tool against hostile
//! snippets, tool schemas (`describe`, `tools.schemas`), components built before WIT 0.1.1,
//! and `tools.call-many`.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rollbox_runtime::{
    CallPolicy, GuestFault, Limits, RewardComponent, Runtime, Scope, ToolComponent, ToolInput,
    WorkflowComponent,
};
use rollbox_tests::components as c;
use rollbox_tests::runtime;
use serde_json::{Value, json};

/// The limits hostile snippets run under: the tools' defaults (128 MiB), with a 2 s timeout
/// instead of 5 s so the suite's busy loops end sooner.
fn exec_limits() -> Arc<Limits> {
    Arc::new(Limits {
        timeout: Duration::from_secs(2),
        max_memory: 128 << 20,
        ..Limits::untrusted_call()
    })
}

/// What a snippet may end in. Every outcome is typed: a Python exception the snippet sees
/// (`Error`), a host limit (`Stopped`), or a normal result checked by a predicate (`Ok`).
enum Expect {
    /// `ok: false` with an exception type in this list (empty: any).
    Error(&'static [&'static str]),
    /// The host stopped it: timeout, memory limit, stack overflow or a trap.
    Stopped,
    /// Either of the two above.
    ErrorOrStopped,
    /// `ok: true` and the check holds on the result object.
    Ok(fn(&Value) -> bool),
}

const FS: &[&str] = &[
    "FileNotFoundError",
    "PermissionError",
    "OSError",
    "NotADirectoryError",
    "IsADirectoryError",
];
const MISSING: &[&str] = &["ModuleNotFoundError", "ImportError"];
const UNSUPPORTED: &[&str] = &[
    "AttributeError",
    "OSError",
    "NotImplementedError",
    "ModuleNotFoundError",
    "ImportError",
    "RuntimeError",
    "PermissionError",
];

fn hostile() -> Vec<(&'static str, &'static str, Expect)> {
    use Expect::*;
    vec![
        // Time.
        ("busy loop", "while True: pass", Stopped),
        ("long range", "for i in range(10**12): pass", Stopped),
        (
            "itertools.count",
            "import itertools\nfor _ in itertools.count(): pass",
            Stopped,
        ),
        (
            "loop that swallows exceptions",
            "while True:\n    try:\n        while True: pass\n    except BaseException:\n        pass",
            Stopped,
        ),
        ("sleep", "import time\ntime.sleep(100)", ErrorOrStopped),
        ("huge power", "x = 7 ** (10 ** 9)", ErrorOrStopped),
        (
            "regex backtracking",
            "import re\nre.match(r'(a+)+$', 'a' * 40 + 'b')",
            Stopped,
        ),
        (
            "clock spin",
            "import time\nwhile True: time.time()",
            Stopped,
        ),
        (
            "factorial",
            "import math\nmath.factorial(10**7)",
            ErrorOrStopped,
        ),
        // Recursion.
        (
            "recursion",
            "def f(n): return f(n + 1)\nf(0)",
            Error(&["RecursionError"]),
        ),
        (
            "recursion with a raised limit",
            "import sys\nsys.setrecursionlimit(10**6)\ndef f(n): return f(n + 1)\nf(0)",
            ErrorOrStopped,
        ),
        (
            "lambda recursion",
            "x = lambda: x()\nx()",
            Error(&["RecursionError"]),
        ),
        (
            "nested parentheses",
            "eval('(' * 100000 + ')' * 100000)",
            Error(&["SyntaxError", "RecursionError", "MemoryError"]),
        ),
        (
            "deep JSON",
            "import json\njson.loads('[' * 100000 + ']' * 100000)",
            ErrorOrStopped,
        ),
        (
            "deep list repr",
            "l = []\nfor _ in range(100000): l = [l]\nrepr(l)",
            ErrorOrStopped,
        ),
        (
            "self-containing list",
            "a = []\na.append(a)\na",
            Ok(|r| r["value"] == "[[...]]"),
        ),
        // Memory.
        (
            "huge string",
            "x = 'a' * (10**10)",
            Error(&["MemoryError", "OverflowError"]),
        ),
        ("huge list", "x = [0] * (10**9)", ErrorOrStopped),
        (
            "growing list",
            "x = []\nwhile True: x.append('x' * 10**6)",
            ErrorOrStopped,
        ),
        ("huge bytearray", "bytearray(2**31)", ErrorOrStopped),
        (
            "doubling string",
            "s = 'a'\nwhile True: s += s",
            ErrorOrStopped,
        ),
        ("huge dict", "{i: i for i in range(10**8)}", ErrorOrStopped),
        ("huge value", "'x' * 10**8", ErrorOrStopped),
        // Files.
        ("read /etc/passwd", "open('/etc/passwd').read()", Error(FS)),
        ("write /tmp", "open('/tmp/x', 'w').write('x')", Error(FS)),
        ("list /", "import os\nos.listdir('/')", Error(FS)),
        (
            "remove a file",
            "import os\nos.remove('/etc/hosts')",
            Error(FS),
        ),
        (
            "read /proc",
            "open('/proc/self/environ', 'rb').read()",
            Error(FS),
        ),
        ("read a relative path", "open('app.py').read()", Error(FS)),
        ("io.open", "import io\nio.open('/etc/passwd')", Error(FS)),
        (
            "os.open",
            "import os\nos.open('/etc/passwd', os.O_RDONLY)",
            Error(FS),
        ),
        (
            "rmtree",
            "import shutil\nshutil.rmtree('/')",
            Error(MISSING),
        ),
        (
            "pathlib",
            "import pathlib\npathlib.Path('/etc/passwd').read_text()",
            Error(MISSING),
        ),
        // Processes.
        (
            "os.system",
            "import os\nos.system('ls')",
            Error(UNSUPPORTED),
        ),
        (
            "subprocess",
            "import subprocess\nsubprocess.run(['ls'])",
            Error(UNSUPPORTED),
        ),
        ("fork", "import os\nos.fork()", Error(UNSUPPORTED)),
        (
            "fork bomb",
            "import os\nwhile True: os.fork()",
            Error(UNSUPPORTED),
        ),
        (
            "exec a shell",
            "import os\nos.execv('/bin/sh', ['sh'])",
            Error(UNSUPPORTED),
        ),
        ("kill", "import os\nos.kill(1, 9)", Error(UNSUPPORTED)),
        (
            "multiprocessing",
            "import multiprocessing\nmultiprocessing.Process(target=print).start()",
            Error(UNSUPPORTED),
        ),
        // No thread starts: the target runs to its end in the instance's one thread.
        (
            "thread",
            "import threading\nthreading.Thread(target=print, args=('ran',)).start()\nthreading.active_count()",
            Ok(|r| r["stdout"] == "ran\n" && r["value"] == "1"),
        ),
        (
            "raw thread",
            "import _thread\n_thread.start_new_thread(print, ('x',))",
            Error(UNSUPPORTED),
        ),
        (
            "popen",
            "import os\nos.popen('id').read()",
            Error(UNSUPPORTED),
        ),
        // Network.
        (
            "socket",
            "import socket\nsocket.create_connection(('example.com', 80))",
            Error(UNSUPPORTED),
        ),
        (
            "urllib",
            "import urllib.request\nurllib.request.urlopen('http://example.com')",
            Error(UNSUPPORTED),
        ),
        ("ssl", "import ssl", Error(MISSING)),
        // Native code and missing modules.
        ("ctypes", "import ctypes", Error(MISSING)),
        ("cffi", "import cffi", Error(MISSING)),
        ("numpy", "import numpy", Error(MISSING)),
        (
            "missing module",
            "import nonexistent_module_xyz",
            Error(MISSING),
        ),
        // The environment.
        (
            "environment",
            "import os\ndict(os.environ)",
            Ok(|r| r["value"] == "{}"),
        ),
        (
            "HOME",
            "import os\nos.getenv('HOME')",
            Ok(|r| r["value"].is_null()),
        ),
        // Output.
        (
            "huge print",
            "print('x' * 10**7)",
            Ok(|r| {
                r["truncated"] == true && r["stdout"].as_str().is_some_and(|s| s.len() < 20_000)
            }),
        ),
        ("print forever", "while True: print('spam')", Stopped),
        (
            "real stdout",
            "import sys\nsys.__stdout__.write('x' * 10**7)",
            Ok(|r| r["value"] == "10000000"),
        ),
        (
            "os.write",
            "import os\nos.write(1, b'x' * 10**7)",
            Ok(|r| r["value"].is_string()),
        ),
        (
            "stdout replaced",
            "import sys\nsys.stdout = None\nprint(1)",
            Ok(|r| r["stdout"] == ""),
        ),
        // Exits and signals.
        (
            "sys.exit",
            "import sys\nsys.exit(3)",
            Error(&["SystemExit"]),
        ),
        (
            "raise SystemExit",
            "raise SystemExit",
            Error(&["SystemExit"]),
        ),
        (
            "KeyboardInterrupt",
            "raise KeyboardInterrupt",
            Error(&["KeyboardInterrupt"]),
        ),
        ("os._exit", "import os\nos._exit(1)", ErrorOrStopped),
        (
            "alarm",
            "import signal\nsignal.signal(signal.SIGALRM, lambda *a: None)\nsignal.alarm(1)",
            Error(UNSUPPORTED),
        ),
        (
            "raise_signal",
            "import signal\nsignal.raise_signal(signal.SIGINT)",
            ErrorOrStopped,
        ),
        // Tampering with the interpreter.
        (
            "clear sys.modules",
            "import sys\nsys.modules.clear()",
            Ok(|_| true),
        ),
        (
            "patch json.dumps",
            "import json\njson.dumps = None",
            Ok(|_| true),
        ),
        (
            "patch builtins",
            "import builtins\nbuiltins.repr = None\n1",
            Error(&["TypeError"]),
        ),
        (
            "the component's own log import",
            "from wit_world.imports import log\nfor i in range(100000): log.log(log.Level.INFO, 'x' * 1000)",
            Ok(|_| true),
        ),
        (
            "compile a huge program",
            "compile('x = 1\\n' * 10**6, 'a', 'exec')",
            ErrorOrStopped,
        ),
    ]
}

/// A call's outcome as (`ok`, the result object) or the host's fault.
async fn exec(rt: &Runtime, tool: &ToolComponent, code: &str) -> Result<Value, GuestFault> {
    let r = rt
        .call_once(
            tool,
            ToolInput::Call {
                name: "python".into(),
                args: json!({"code": code}).to_string(),
            },
            exec_limits(),
        )
        .await;
    r.result
        .map(|out| serde_json::from_str(&out).expect("python-exec returns JSON"))
}

fn stopped(f: &GuestFault) -> bool {
    matches!(
        f,
        GuestFault::Timeout { .. }
            | GuestFault::MemoryLimit { .. }
            | GuestFault::StackOverflow
            | GuestFault::OutOfFuel { .. }
            | GuestFault::LimitExceeded { .. }
            | GuestFault::Panic { .. }
            | GuestFault::Trap { .. }
            | GuestFault::Exit { .. }
            | GuestFault::BoundaryLimit { .. }
            | GuestFault::GuestError { .. }
    )
}

#[tokio::test]
async fn python_exec_contains_every_hostile_snippet() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let rt = runtime();
    let tool = rt
        .load::<ToolComponent>(Path::new(c::PYTHON_EXEC_TOOL))
        .expect("python-exec loads");
    let cases = hostile();
    assert!(cases.len() >= 50, "{} snippets", cases.len());
    let mut failures = Vec::new();
    for (what, code, expect) in &cases {
        let got = exec(&rt, &tool, code).await;
        let readable = match &got {
            Ok(r) if r["ok"] == false => r["error"].as_str().is_some_and(|e| !e.is_empty()),
            Ok(_) => true,
            Err(f) => !f.to_string().is_empty(),
        };
        let pass = readable
            && match (expect, &got) {
                (Expect::Error(types), Ok(r)) => {
                    r["ok"] == false
                        && (types.is_empty() || types.iter().any(|t| r["error_type"] == *t))
                }
                (Expect::Stopped, Err(f)) => stopped(f),
                (Expect::ErrorOrStopped, Ok(r)) => r["ok"] == false,
                (Expect::ErrorOrStopped, Err(f)) => stopped(f),
                (Expect::Ok(check), Ok(r)) => r["ok"] == true && check(r),
                _ => false,
            };
        let shown = match &got {
            Ok(r) => format!("{}: {}", r["error_type"], crate_text(&r["error"])),
            Err(f) => format!("fault {f}"),
        };
        eprintln!("{what:32} {}", shown);
        if !pass {
            failures.push(format!("{what}: {shown} / {got:?}"));
        }
        // Whatever the snippet did, the next call in a fresh instance works.
        let next = exec(&rt, &tool, "print(sum(range(1000)))").await;
        match next {
            Ok(r) if r["stdout"] == "499500\n" && r["ok"] == true => {}
            other => failures.push(format!("{what}: the next call failed: {other:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

fn crate_text(v: &Value) -> String {
    v.as_str().unwrap_or_default().chars().take(120).collect()
}

#[tokio::test]
async fn python_exec_runs_the_standard_library_and_keeps_no_state() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let rt = runtime();
    let tool = rt
        .load::<ToolComponent>(Path::new(c::PYTHON_EXEC_TOOL))
        .expect("python-exec loads");
    let ok = |code: &'static str| {
        let rt = &rt;
        let tool = &tool;
        async move {
            let r = exec(rt, tool, code).await.expect("runs");
            assert_eq!(r["ok"], true, "{code}: {r}");
            r
        }
    };
    let r = ok("from fractions import Fraction\nprint(Fraction(1, 3) + Fraction(1, 6))\nFraction(3, 4) * 2").await;
    assert_eq!(
        (r["stdout"].as_str(), r["value"].as_str()),
        (Some("1/2\n"), Some("Fraction(3, 2)"))
    );
    let r = ok("import math, statistics, itertools, decimal, re, json, collections, heapq, functools, random\nmath.comb(10, 3), statistics.mean([1, 2, 3, 4]), len(list(itertools.permutations(range(4)))), str(decimal.Decimal('1.1') + decimal.Decimal('2.2')), re.findall(r'\\d+', 'a1b22'), json.dumps({'a': 1}), collections.Counter('aab').most_common(1)").await;
    assert_eq!(
        r["value"],
        "(120, 2.5, 24, '3.3', ['1', '22'], '{\"a\": 1}', [('a', 2)])"
    );
    let r = ok("import hashlib, base64, struct, difflib\nhashlib.sha256(b'a').hexdigest()[:8], base64.b64encode(b'hi').decode(), struct.pack('<H', 258), difflib.SequenceMatcher(None, 'abc', 'abd').ratio()").await;
    assert_eq!(
        r["value"],
        "('ca978112', 'aGk=', b'\\x02\\x01', 0.6666666666666666)"
    );
    let r = exec(&rt, &tool, "1 / 0").await.expect("runs");
    assert_eq!(
        (r["ok"].clone(), r["error_type"].clone()),
        (json!(false), json!("ZeroDivisionError"))
    );
    assert!(
        r["error"]
            .as_str()
            .is_some_and(|e| e.contains("division by zero")),
        "{r}"
    );
    let r = exec(&rt, &tool, "def f(:\n  pass").await.expect("runs");
    assert_eq!(r["error_type"], "SyntaxError", "{r}");
    // A fresh interpreter per call: nothing set by one call is seen by the next.
    ok("import builtins, sys\nbuiltins.LEAK = 1\nsys.modules['math'].pi = 3\nX = 5").await;
    let r =
        ok("import builtins, math\n(hasattr(builtins, 'LEAK'), math.pi, 'X' in globals())").await;
    assert_eq!(r["value"], "(False, 3.141592653589793, False)");
    // Bad arguments are the tool's error, readable.
    let r = rt
        .call_once(
            &tool,
            ToolInput::Call {
                name: "python".into(),
                args: "{\"src\": 1}".into(),
            },
            exec_limits(),
        )
        .await;
    assert!(
        matches!(&r.result, Err(GuestFault::GuestError { message }) if message.contains("`code`")),
        "{:?}",
        r.result
    );
}

#[tokio::test]
async fn tools_describe_themselves_and_old_components_still_load() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let rt = runtime();
    let calc = rt
        .load::<ToolComponent>(Path::new(c::TOOL_CALCULATOR))
        .expect("calculator");
    assert!(calc.describes());
    let d = rt
        .call_once(
            &calc,
            ToolInput::Describe,
            Arc::new(Limits::untrusted_call()),
        )
        .await
        .result
        .expect("describe");
    let d: Value = serde_json::from_str(&d).expect("JSON");
    assert_eq!(d["parameters"]["required"], json!(["expression"]));
    let py = rt
        .load::<ToolComponent>(Path::new(c::PYTHON_EXEC_TOOL))
        .expect("python-exec");
    let d = rt
        .call_once(&py, ToolInput::Describe, exec_limits())
        .await
        .result
        .expect("describe");
    assert!(d.contains("\"code\""), "{d}");

    // A tool built against WIT 0.1.0: exports `call` only, imports log@0.1.0.
    let old = old_tool();
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("old.wasm");
    std::fs::write(&path, old).expect("write");
    let tool = rt.load::<ToolComponent>(&path).expect("a 0.1.0 tool loads");
    assert!(!tool.describes());
    let r = rt
        .call_once(
            &tool,
            ToolInput::Call {
                name: "old".into(),
                args: "{}".into(),
            },
            Arc::new(Limits::untrusted_call()),
        )
        .await;
    assert_eq!(r.result, Ok("old-tool".to_string()));
    rt.register::<ToolComponent>("old", &path, CallPolicy::default())
        .expect("registers");
    rt.register::<ToolComponent>(
        "calculator",
        Path::new(c::TOOL_CALCULATOR),
        CallPolicy::default(),
    )
    .expect("registers");
    let schemas = rt.tool_schemas(&Scope::default()).await.expect("schemas");
    assert_eq!(schemas.as_array().map(Vec::len), Some(2), "{schemas}");
    assert_eq!(schemas[0]["function"]["name"], "calculator");
    assert_eq!(schemas[0]["type"], "function");
    assert!(
        schemas[0]["function"]["description"]
            .as_str()
            .is_some_and(|d| d.contains("arithmetic"))
    );
    assert_eq!(
        schemas[1]["function"],
        json!({"name": "old", "description": "", "parameters": {"type": "object"}})
    );
}

/// A tool component as a 0.1.0 toolchain built it: the 0.1.0 tool world (no `describe`), a
/// core module whose `call` returns `ok("old-tool")`.
fn old_tool() -> Vec<u8> {
    let wit = r#"
package rollbox:workflow@0.1.0;
interface log {
    enum level { trace, debug, info, warn, error }
    log: func(level: level, message: string);
    stat: func(key: string, value: f64);
}
world tool {
    import log;
    export call: func(name: string, args: string) -> result<string, string>;
}
"#;
    let module = wat::parse_str(
        r#"(module
            (memory (export "memory") 1)
            (global $next (mut i32) (i32.const 4096))
            (data (i32.const 16) "old-tool")
            (func (export "cabi_realloc") (param i32 i32 i32 i32) (result i32)
                (local $p i32)
                (local.set $p (i32.and (i32.add (global.get $next) (i32.const 7)) (i32.const -8)))
                (global.set $next (i32.add (local.get $p) (local.get 3)))
                (local.get $p))
            (func (export "call") (param i32 i32 i32 i32) (result i32)
                (i32.store8 (i32.const 64) (i32.const 0))
                (i32.store (i32.const 68) (i32.const 16))
                (i32.store (i32.const 72) (i32.const 8))
                (i32.const 64)))"#,
    )
    .expect("wat");
    rollbox_tests::component_from_wit(module, wit, "tool").expect("a 0.1.0 tool component")
}

/// Fair shares (issue 31): one episode whose `call-many` floods the untrusted pool with tool
/// calls that spin to their timeout does not starve other episodes' rewards (before, 15 of 15
/// episodes beside such a flood lost their reward): 16 episodes scoring beside it each get
/// theirs well within their 20 s deadline, and the flood's own calls are held to the episode's
/// share.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tool_flood_does_not_starve_rewards() {
    use rollbox_runtime::{EpisodeOutcome, EpisodeRequest};
    let rt = Arc::new(runtime());
    let spin = CallPolicy {
        limits: Arc::new(Limits {
            timeout: Duration::from_secs(2),
            ..Limits::untrusted_tool()
        }),
        retries: 0,
    };
    rt.register::<ToolComponent>("spin", Path::new(c::TOOL_SPIN), spin)
        .expect("register spin");
    rt.register::<RewardComponent>("faulty", Path::new(c::REWARD_FAULTY), CallPolicy::default())
        .expect("register reward");
    let caller = Arc::new(
        rt.load::<WorkflowComponent>(Path::new(c::TOOL_CALLER))
            .expect("loads"),
    );
    let echo = Arc::new(
        rt.load::<WorkflowComponent>(Path::new(c::WORKFLOW_ECHO))
            .expect("loads"),
    );
    let flood = {
        let (rt, caller) = (rt.clone(), caller.clone());
        tokio::spawn(async move {
            let row = json!({"tool": "spin", "args": {}, "many": 64});
            let limits = Limits {
                timeout: Duration::from_secs(300),
                ..Limits::default()
            };
            rt.run_episode(
                &Scope::default(),
                &caller,
                EpisodeRequest::new("flood", row),
                Arc::new(limits),
            )
            .await
        })
    };
    // The flood's calls are queued or spinning before the others start.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let start = std::time::Instant::now();
    let episodes: Vec<_> = (0..16)
        .map(|i| {
            let (rt, echo) = (rt.clone(), echo.clone());
            tokio::spawn(async move {
                let row = json!({"value": 0.75, "input_ids": [1, 2, 3]});
                let request = EpisodeRequest {
                    config: json!({"reward": "faulty"}).into(),
                    ..EpisodeRequest::new(format!("r{i}-s0"), row)
                };
                let limits = Limits {
                    timeout: Duration::from_secs(20),
                    ..Limits::default()
                };
                rt.run_episode(&Scope::default(), &echo, request, Arc::new(limits))
                    .await
            })
        })
        .collect();
    for e in episodes {
        let r = e.await.expect("episode task");
        assert!(
            matches!(r.outcome, EpisodeOutcome::Accepted(_)),
            "{}: {} after {:?} ({:?})",
            r.id,
            r.outcome.kind(),
            start.elapsed(),
            r.reward_calls
        );
        assert_eq!(r.reward_calls[0].value, Some(0.75), "{:?}", r.reward_calls);
    }
    assert!(
        !flood.is_finished(),
        "the flood is still running (64 x 2 s)"
    );
    flood.abort();
}
