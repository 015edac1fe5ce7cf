//! python-exec's program mode as competitive programs use it (issue 53), through the real
//! component: every way of reading stdin and writing stdout, `queue`, `threading` run to its end,
//! deep recursion, `atexit`; and for each surface the hostile counterpart: a program using it to
//! reach a file, another descriptor, the host's own streams, another case's input, or to outlive
//! its limits.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rollbox_runtime::{GuestFault, Limits, Runtime, ToolComponent, ToolInput};
use rollbox_tests::components as c;
use rollbox_tests::runtime;
use serde_json::{Value, json};

fn limits() -> Arc<Limits> {
    Arc::new(Limits {
        timeout: Duration::from_secs(3),
        max_memory: 512 << 20,
        max_boundary_bytes: 4 << 20,
        ..Limits::untrusted_call()
    })
}

async fn run(
    rt: &Runtime,
    tool: &ToolComponent,
    code: &str,
    stdin: &str,
) -> Result<Value, GuestFault> {
    let r = rt
        .call_once(
            tool,
            ToolInput::Call {
                name: "python".into(),
                args: json!({"code": code, "stdin": stdin}).to_string(),
            },
            limits(),
        )
        .await;
    r.result
        .map(|out| serde_json::from_str(&out).expect("python-exec returns JSON"))
}

/// Programs as competitive programmers write them, each with its input and the output CPython
/// gives (`python3 prog.py <input`).
fn programs() -> Vec<(&'static str, &'static str, &'static str, &'static str)> {
    vec![
        (
            "os.read with fstat (fast-I/O template)",
            "import os, io\ninput = io.BytesIO(os.read(0, os.fstat(0).st_size)).readline\nn = int(input())\nprint(sum(map(int, input().split())) * n)",
            "2\n1 2 3\n",
            "12\n",
        ),
        (
            "os.read by sys.stdin.fileno() in a loop",
            "import os, sys\nchunks = []\nwhile True:\n    b = os.read(sys.stdin.fileno(), 3)\n    if not b:\n        break\n    chunks.append(b)\nprint(sum(map(int, b''.join(chunks).split())))",
            "10 20 30 40\n",
            "100\n",
        ),
        (
            "open(0) read",
            "a, b = map(int, open(0).read().split())\nprint(a + b)",
            "4 5\n",
            "9\n",
        ),
        (
            "[*open(0)]",
            "n, *rows = [*open(0)]\nprint(int(n), len(rows), rows[-1].strip())",
            "2\nx\ny\n",
            "2 2 y\n",
        ),
        (
            "io.open(0, 'rb')",
            "import io\nprint(len(io.open(0, 'rb').read().split()))",
            "1 2 3 4\n",
            "4\n",
        ),
        (
            "os.fdopen(0)",
            "import os\nprint(os.fdopen(0).readline().strip()[::-1])",
            "abc\n",
            "cba\n",
        ),
        (
            "sys.stdin.buffer and sys.stdout.buffer",
            "import sys\nn = int(sys.stdin.buffer.readline())\nsys.stdout.buffer.write(str(n * n).encode() + b'\\n')",
            "7\n",
            "49\n",
        ),
        (
            // sys.stdin's buffer read ahead what os.read would have read, as under CPython.
            "one read position for every reader",
            "import os, sys\nfirst = sys.stdin.buffer.read(2)\nrest = os.read(0, 100)\nprint(first, rest)",
            "ab\ncd\n",
            "b'ab' b''\n",
        ),
        (
            "os.read first, then sys.stdin",
            "import os, sys\nfirst = os.read(0, 3)\nprint(first, sys.stdin.readline().strip())",
            "ab\ncd\n",
            "b'ab\\n' cd\n",
        ),
        (
            "os.write to fd 1, then print",
            "import os\nos.write(1, b'first\\n')\nprint('second')",
            "",
            "first\nsecond\n",
        ),
        (
            "a buffered stream of its own over os.read and os.write",
            "import os, sys, io\nclass Fast(io.IOBase):\n    def __init__(self, f):\n        self.fd = f.fileno()\n        self.out = 'r' not in f.mode\n        self.buf = io.BytesIO()\n    def fill(self):\n        while chunk := os.read(self.fd, max(os.fstat(self.fd).st_size, 4096)):\n            at = self.buf.tell()\n            self.buf.seek(0, 2)\n            self.buf.write(chunk)\n            self.buf.seek(at)\n    def readline(self):\n        if not self.buf.getbuffer().nbytes:\n            self.fill()\n        return self.buf.readline().decode()\n    def write(self, s):\n        return self.buf.write(s.encode())\n    def flush(self):\n        if self.out:\n            os.write(self.fd, self.buf.getvalue())\n            self.buf = io.BytesIO()\nsys.stdin, sys.stdout = Fast(sys.stdin), Fast(sys.stdout)\nn = int(sys.stdin.readline())\nprint(sum(int(sys.stdin.readline()) for _ in range(n)))",
            "3\n1\n2\n3\n",
            "6\n",
        ),
        (
            "from queue import deque",
            "from queue import deque, Queue\nq = deque([1, 2])\nQ = Queue()\nQ.put(5)\nprint(len(q), Q.get())",
            "",
            "2 5\n",
        ),
        (
            "main in a thread with a bigger stack",
            "import sys, threading\ndef main():\n    n = int(input())\n    def depth(k):\n        return 0 if k == 0 else 1 + depth(k - 1)\n    print(depth(n))\nsys.setrecursionlimit(1 << 25)\nthreading.stack_size(1 << 27)\nt = threading.Thread(target=main)\nt.start()\nt.join()\nprint(t.is_alive())",
            "50000\n",
            "50000\nFalse\n",
        ),
        (
            "an exception in a thread is reported and the program goes on",
            "import threading\ndef f():\n    raise ValueError('in the thread')\nt = threading.Thread(target=f)\nt.start()\nt.join()\nprint('after')",
            "",
            "after\n",
        ),
        (
            "deep recursion under setrecursionlimit(10**6)",
            "import sys\nsys.setrecursionlimit(10**6)\ndef f(n):\n    return 0 if n == 0 else 1 + f(n - 1)\nprint(f(200000))",
            "",
            "200000\n",
        ),
        (
            "atexit writes after the program",
            "import atexit, sys\nout = []\natexit.register(lambda: sys.stdout.write(''.join(out)))\nout.append('late\\n')\nprint('early')",
            "",
            "early\nlate\n",
        ),
        ("exit() after printing", "print(42)\nexit()", "", "42\n"),
        (
            "CRLF input is not translated (as CPython's stdin on Linux)",
            "print(repr(input()))",
            "ab\r\n",
            "'ab\\r'\n",
        ),
    ]
}

#[tokio::test]
async fn programs_read_and_write_as_under_cpython() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let rt = runtime();
    let tool = rt
        .load::<ToolComponent>(Path::new(c::PYTHON_EXEC_TOOL))
        .expect("python-exec loads");
    let mut failures = Vec::new();
    for (what, code, stdin, want) in programs() {
        match run(&rt, &tool, code, stdin).await {
            Ok(r) if r["ok"] == json!(true) && r["stdout"] == json!(want) => {}
            Ok(r) => failures.push(format!(
                "{what}: stdout {:?}, error {:?}",
                r["stdout"], r["error"]
            )),
            Err(f) => failures.push(format!("{what}: fault {f}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

/// SandboxFusion's stdin is a pipe (`"stdin_kind": "pipe"`): `os.fstat(0).st_size` is 0 there, and
/// a read returns at most a pipe's 64 KiB; a judge's is a file.
#[tokio::test]
async fn stdin_is_a_file_or_a_pipe() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let rt = runtime();
    let tool = rt
        .load::<ToolComponent>(Path::new(c::PYTHON_EXEC_TOOL))
        .expect("python-exec loads");
    let code = "import os, stat\nst = os.fstat(0)\nfirst = os.read(0, 1 << 20)\nprint(st.st_size, stat.S_ISFIFO(st.st_mode), len(first))";
    let stdin = "x".repeat(100_000);
    for (kind, want) in [
        ("file", "100000 False 100000\n"),
        ("pipe", "0 True 65536\n"),
    ] {
        let r = rt
            .call_once(
                &tool,
                ToolInput::Call {
                    name: "python".into(),
                    args: json!({"code": code, "stdin": stdin, "stdin_kind": kind}).to_string(),
                },
                limits(),
            )
            .await;
        let out: Value = serde_json::from_str(&r.result.expect("runs")).expect("JSON");
        assert_eq!(out["stdout"], json!(want), "{kind}: {out}");
    }
}

/// The same surfaces used to escape: each must end in the program's own error or a host
/// limit, never in a file's, another case's or the host's bytes.
#[tokio::test]
async fn the_same_surfaces_reach_nothing_else() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let rt = runtime();
    let tool = rt
        .load::<ToolComponent>(Path::new(c::PYTHON_EXEC_TOOL))
        .expect("python-exec loads");
    // Another case's input, run first in the same runtime: nothing of it may be read after.
    let secret = "the other case's input 8d1f\n";
    let r = run(&rt, &tool, "print(len(input()))", secret)
        .await
        .expect("runs");
    assert_eq!(r["stdout"], json!("27\n"));
    let errors: &[(&str, &str)] = &[
        ("os.read of fd 3", "import os\nos.read(3, 100)"),
        ("os.read of fd 100", "import os\nos.read(100, 100)"),
        ("open(3)", "open(3).read()"),
        ("io.open(4, 'rb')", "import io\nio.open(4, 'rb').read()"),
        ("os.fdopen(5)", "import os\nos.fdopen(5).read()"),
        ("open a path", "open('/etc/passwd').read()"),
        (
            "open a path in binary",
            "open('/proc/self/environ', 'rb').read()",
        ),
        ("os.fstat of fd 3", "import os\nos.fstat(3)"),
        ("a negative read", "import os\nos.read(0, -1)"),
        ("a bad mode on fd 0", "open(0, 'rz')"),
        ("writing to fd 0", "import os\nos.write(0, b'x')"),
        (
            "the real thread start",
            "import _thread\n_thread.start_new_thread(print, ('x',))",
        ),
    ];
    let mut failures = Vec::new();
    for (what, code) in errors {
        match run(&rt, &tool, code, "mine\n").await {
            Ok(r) if r["ok"] == json!(false) => {
                let text = format!("{}{}", r["stdout"], r["error"]);
                if text.contains("8d1f") || text.contains("root:") {
                    failures.push(format!("{what}: leaked {text}"));
                }
            }
            Ok(r) => failures.push(format!("{what}: ran: {r}")),
            Err(f) => failures.push(format!("{what}: fault {f}")),
        }
    }
    // The descriptors behind python-exec's own streams (the instance's WASI stdin, stdout):
    // empty, and what is written there never reaches the program's output or the host.
    let r = run(
        &rt,
        &tool,
        "import posix\nprint(repr(posix.read(0, 1 << 16)), posix.fstat(0).st_size)\nposix.write(1, b'to the real stdout\\n')",
        "mine\n",
    )
    .await;
    match r {
        Ok(r) if r["ok"] == json!(true) => {
            assert_eq!(
                r["stdout"],
                json!("b'' 0\n"),
                "the instance's own stdin is empty"
            );
        }
        Ok(r) if r["ok"] == json!(false) => {}
        other => failures.push(format!("posix fd 0/1: {other:?}")),
    }
    // Threads and exit handlers do not outlive the case's limits.
    for (what, code) in [
        (
            "a thread that never ends",
            "import threading\nthreading.Thread(target=lambda: next(x for x in iter(int, 1) if x), daemon=True).start()",
        ),
        (
            "an exit handler that never ends",
            "import atexit\natexit.register(lambda: next(x for x in iter(int, 1) if x))",
        ),
        (
            "a thread that waits for another",
            "import threading, queue\nq = queue.Queue()\nthreading.Thread(target=lambda: print(q.get())).start()\nq.put(1)",
        ),
    ] {
        match run(&rt, &tool, code, "").await {
            // A lock that can never be released ends the instance (CPython aborts: a panic).
            Err(
                GuestFault::Timeout { .. }
                | GuestFault::OutOfFuel { .. }
                | GuestFault::Panic { .. },
            ) => {}
            Ok(r) if r["ok"] == json!(false) => {}
            other => failures.push(format!("{what}: {other:?}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
