//! `rollbox serve` end to end: episodes answered as one safetensors batch (loaded with the
//! `safetensors` Python package), the policy version, health, metrics, and the request limits.

use std::process::Command;

use rollbox_tests::components as c;
use serde_json::{Value, json};

/// One HTTP/1.1 request on loopback; returns the status code and the body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, Vec<u8>) {
    let (status, _, body) = http_with(addr, method, path, &[], body);
    (status, body)
}

/// [`http`] with extra header lines (`Name: value`); returns the status, the response's
/// header block and its body.
fn http_with(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[&str],
    body: &str,
) -> (u16, String, Vec<u8>) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    let extra: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
    .expect("send");
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).expect("read");
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("headers end");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .expect("status")
        .parse()
        .expect("code");
    assert!(
        !head
            .to_ascii_lowercase()
            .contains("transfer-encoding: chunked"),
        "{head}"
    );
    (status, head, raw[split + 4..].to_vec())
}

/// Send `request` as is, half-close, and return what the server answered (lossy text; empty
/// when it closed without answering).
fn raw_exchange(addr: &str, request: &str) -> String {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    s.set_read_timeout(Some(std::time::Duration::from_secs(30)))
        .expect("timeout");
    s.write_all(request.as_bytes()).expect("send");
    let _ = s.shutdown(std::net::Shutdown::Write);
    let mut raw = Vec::new();
    let _ = s.read_to_end(&mut raw);
    String::from_utf8_lossy(&raw).into_owned()
}

/// `rollbox serve` over real HTTP: health, version, episodes (a safetensors batch Python
/// loads), metrics.
#[test]
fn serve_answers_episodes_version_health_and_metrics() {
    let tmp = tempfile::tempdir().expect("tmp");
    let reward = format!("math={}", c::REWARD_MATH);
    let echo = format!("echo={}", c::WORKFLOW_ECHO);
    let (mut child, addr) = start_serve(
        &[
            "--extra-workflow",
            &echo,
            "--workflow",
            c::WORKFLOW_RLVR,
            "--reward",
            &reward,
            "--n-samples",
            "2",
            "--config",
            r#"{"reward": "math", "gconfig": {"greedy": true, "max_new_tokens": 4}}"#,
        ],
        tmp.path(),
    );
    let result = std::panic::catch_unwind(|| {
        assert_eq!(http(&addr, "GET", "/healthz", ""), (200, b"ok".to_vec()));
        let (code, body) = http(&addr, "POST", "/v1/version", r#"{"version": 7}"#);
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        let rows = json!({"rows": [
            {"messages": [{"role": "user", "content": "What is 2 + 2?"}], "answer": "4"},
            {"messages": [{"role": "user", "content": "What is 3 + 3?"}], "answer": "6"}
        ]});
        let (code, body) = http(&addr, "POST", "/v1/episodes", &rows.to_string());
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        let batch = tmp.path().join("served.safetensors");
        std::fs::write(&batch, &body).expect("write");
        let loaded: Value = rollbox_tests::check_safetensors(&batch);
        assert_eq!(
            loaded["tensors"]["input_ids"]["shape"][0], 4,
            "2 rows x 2 samples"
        );
        // Generated tokens carry the version set over HTTP.
        let versions: Vec<i64> = loaded["tensors"]["versions"]["data"]
            .as_array()
            .expect("versions")
            .iter()
            .map(|v| v.as_i64().expect("int"))
            .collect();
        assert!(versions.contains(&7), "{versions:?}");
        let stats: Value =
            serde_json::from_str(loaded["metadata"]["stats"].as_str().expect("stats"))
                .expect("JSON");
        assert_eq!(stats["episodes"]["accepted"], 4);
        let default_sha = loaded["metadata"]["workflow_sha256"].clone();
        assert!(default_sha.is_string(), "{}", loaded["metadata"]);
        let (code, body) = http(&addr, "POST", "/v1/episodes", r#"{"rows": 3}"#);
        assert_eq!(code, 400, "{}", String::from_utf8_lossy(&body));
        let (code, body) = http(&addr, "GET", "/metrics", "");
        assert_eq!(code, 200);
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("rollbox_episodes_accepted_total 4"), "{text}");
        assert!(text.contains("rollbox_policy_version 7"), "{text}");
        // A request's own group size and config keys (over the server's --config).
        let own = json!({
            "rows": [{"messages": [{"role": "user", "content": "What is 2 + 2?"}], "answer": "4"}],
            "n_samples": 3,
            "config": {"gconfig": {"greedy": true, "max_new_tokens": 2}}
        });
        let (code, body) = http(&addr, "POST", "/v1/episodes", &own.to_string());
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        std::fs::write(&batch, &body).expect("write");
        let loaded: Value = rollbox_tests::check_safetensors(&batch);
        assert_eq!(loaded["tensors"]["input_ids"]["shape"][0], 3, "n_samples 3");
        let stats: Value =
            serde_json::from_str(loaded["metadata"]["stats"].as_str().expect("stats"))
                .expect("JSON");
        assert_eq!(stats["episodes"]["accepted"], 3);
        assert!(
            stats["generated_tokens"].as_u64().expect("tokens") <= 6,
            "max_new_tokens 2 from the request's config: {stats}"
        );
        // A request naming another workflow the server was started with.
        let echo = json!({
            "rows": [{"input_ids": [1, 2, 3], "answer": "4"}],
            "workflow": "echo",
            "n_samples": 1,
            "config": {"max_new_tokens": 2}
        });
        let (code, body) = http(&addr, "POST", "/v1/episodes", &echo.to_string());
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        std::fs::write(&batch, &body).expect("write");
        let loaded: Value = rollbox_tests::check_safetensors(&batch);
        assert_eq!(loaded["metadata"]["workflow"], "echo");
        assert!(loaded["metadata"]["workflow_sha256"].is_string());
        assert_ne!(loaded["metadata"]["workflow_sha256"], default_sha);
        assert_eq!(loaded["tensors"]["input_ids"]["shape"][0], 1);
        let (code, body) = http(
            &addr,
            "POST",
            "/v1/episodes",
            &json!({"rows": [], "workflow": "nope"}).to_string(),
        );
        let text = String::from_utf8_lossy(&body).into_owned();
        assert_eq!(code, 404, "{text}");
        assert!(text.contains("default, echo"), "{text}");
        for (bad, says) in [
            (
                json!({"rows": [], "workflow": "a b"}),
                "`workflow` must be a name",
            ),
            (json!({"rows": [], "n_samples": 0}), "n_samples"),
            (json!({"rows": [], "config": [1]}), "must be a JSON object"),
        ] {
            let (code, body) = http(&addr, "POST", "/v1/episodes", &bad.to_string());
            let text = String::from_utf8_lossy(&body).into_owned();
            assert_eq!(code, 400, "{text}");
            assert!(text.contains(says), "{text}");
        }
        // 100 rows x 1,024 samples: refused before any episode runs.
        let many = json!({"rows": vec![json!({"x": 1}); 100], "n_samples": 1024});
        let (code, body) = http(&addr, "POST", "/v1/episodes", &many.to_string());
        let text = String::from_utf8_lossy(&body).into_owned();
        assert_eq!(code, 413, "{text}");
        assert!(
            text.contains("at most 65536 episodes per request"),
            "{text}"
        );
        // Hostile clients (issue 15): a negative version, a declared body over the cap
        // (refused before it is sent), a body shorter than declared, and a connection that
        // never sends its headers (closed after the header-read timeout).
        let (code, body) = http(&addr, "POST", "/v1/version", r#"{"version": -1}"#);
        assert_eq!(code, 400, "{}", String::from_utf8_lossy(&body));
        assert!(String::from_utf8_lossy(&body).contains("negative"));
        let head = raw_exchange(
            &addr,
            "POST /v1/episodes HTTP/1.1\r\nHost: x\r\nContent-Length: 100000000\r\n\r\n",
        );
        assert!(head.starts_with("HTTP/1.1 413"), "{head}");
        let head = raw_exchange(
            &addr,
            "POST /v1/version HTTP/1.1\r\nHost: x\r\nContent-Length: 50\r\nConnection: close\r\n\r\n{\"version\"",
        );
        assert!(
            head.is_empty() || head.starts_with("HTTP/1.1 400"),
            "{head}"
        );
        let idle = std::net::TcpStream::connect(&addr).expect("connect");
        let start = std::time::Instant::now();
        let mut buf = [0u8; 1];
        // A read timeout far past the server's 10 s, so that only the server's close (not
        // the machine's load) decides the outcome: closed, not timed out here.
        idle.set_read_timeout(Some(std::time::Duration::from_secs(300)))
            .expect("timeout");
        let read = std::io::Read::read(&mut &idle, &mut buf);
        let held = start.elapsed();
        assert!(
            matches!(read, Ok(0)),
            "the server closed the idle connection: {read:?} after {held:?}"
        );
        assert!(
            held >= std::time::Duration::from_secs(9),
            "closed after {held:?}, before the header-read timeout of 10 s"
        );
        let many = json!({"rows": vec![json!({}); 16_385]}).to_string();
        let (code, body) = http(&addr, "POST", "/v1/episodes", &many);
        assert_eq!(code, 413, "{}", String::from_utf8_lossy(&body));
        assert!(String::from_utf8_lossy(&body).contains("at most 16384"));
        assert_eq!(http(&addr, "GET", "/healthz", ""), (200, b"ok".to_vec()));
    });
    child.kill().expect("stop serve");
    child.wait().expect("reaped");
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// `rollbox serve --listen 127.0.0.1:0 ARGS...` started; returns it and the address it
/// printed.
fn start_serve(args: &[&str], cache: &std::path::Path) -> (std::process::Child, String) {
    use std::io::BufRead;
    let mut child = Command::new(env!("CARGO_BIN_EXE_rollbox"))
        .args(["serve", "--listen", "127.0.0.1:0"])
        .args(args)
        .env("ROLLBOX_CACHE_DIR", cache)
        .env("CANDLE_NUM_THREADS", "1")
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("listening line");
    let addr = line
        .trim()
        .strip_prefix("listening on http://")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    (child, addr)
}

/// `serve --fuel` and a reward's `fuel=N` under `serve` are enforced (issues 31 and 33): a
/// workflow and a reward that loop forever end out of fuel in a moment, not at their 60 s
/// timeouts, and the server goes on serving.
#[test]
fn serve_enforces_fuel_for_workflows_and_rewards() {
    let tmp = tempfile::tempdir().expect("tmp");
    let spin = format!(
        "math={},fuel=10000000,timeout=60s,retries=0",
        c::REWARD_SPIN
    );
    let config = r#"{"reward": "math", "gconfig": {"greedy": true, "max_new_tokens": 2}}"#;
    for (what, args, accepted) in [
        (
            "workflow",
            vec!["--workflow", c::ADV_LOOP, "--fuel", "10000000"],
            0,
        ),
        (
            "reward",
            vec!["--reward", spin.as_str(), "--config", config],
            0,
        ),
    ] {
        let mut args = args;
        args.extend([
            "--engine",
            "embedded",
            "--timeout",
            "60s",
            "--n-samples",
            "2",
        ]);
        let (mut child, addr) = start_serve(&args, tmp.path());
        let result = std::panic::catch_unwind(|| {
            let start = std::time::Instant::now();
            let rows = json!({"rows": [{"messages": [{"role": "user", "content": "1 + 1?"}], "answer": "2"}]});
            let (code, _) = http(&addr, "POST", "/v1/episodes", &rows.to_string());
            let took = start.elapsed();
            eprintln!("{what}: answered {code} after {took:?}");
            let (code, body) = http(&addr, "GET", "/metrics", "");
            assert_eq!(code, 200);
            let text = String::from_utf8_lossy(&body);
            assert!(text.contains("rollbox_episodes_total 2"), "{what}: {text}");
            assert!(
                text.contains(&format!("rollbox_episodes_accepted_total {accepted}")),
                "{what}: {text}"
            );
            assert_eq!(http(&addr, "GET", "/healthz", ""), (200, b"ok".to_vec()));
        });
        child.kill().expect("stop serve");
        child.wait().expect("reaped");
        if let Err(e) = result {
            std::panic::resume_unwind(e);
        }
    }
}

/// Milliseconds one `GET /healthz` takes on a new connection (`None`: no `200 ok`).
fn health_probe(addr: &str) -> Option<f64> {
    use std::io::{Read, Write};
    let start = std::time::Instant::now();
    let mut s = std::net::TcpStream::connect(addr).ok()?;
    s.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .ok()?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .ok()?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).ok()?;
    let text = String::from_utf8_lossy(&raw);
    (text.starts_with("HTTP/1.1 200") && text.ends_with("ok"))
        .then(|| start.elapsed().as_secs_f64() * 1e3)
}

/// `n` health probes 20 ms apart; returns (failures, p50 ms, p99 ms).
fn probe_health(addr: &str, n: usize) -> (usize, f64, f64) {
    let mut times = Vec::new();
    let mut failed = 0;
    for _ in 0..n {
        match health_probe(addr) {
            Some(ms) => times.push(ms),
            None => failed += 1,
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    times.sort_by(f64::total_cmp);
    let at = |q: f64| {
        times
            .get(((times.len() as f64 - 1.0) * q) as usize)
            .copied()
    };
    (
        failed,
        at(0.5).unwrap_or(f64::NAN),
        at(0.99).unwrap_or(f64::NAN),
    )
}

/// Issues 32 and 52: two clients sending 64 MiB bodies without end (one row holding millions
/// of values, or millions of rows) and a flood of 1,080 half-open connections from nine other
/// addresses, reopened as fast as they are closed: the bodies are refused within the parse
/// budget in bounded memory, and every health probe is answered throughout. An idle
/// keep-alive connection is closed after the header-read timeout.
#[test]
fn serve_stays_healthy_under_body_and_connection_floods() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};
    let tmp = tempfile::tempdir().expect("tmp");
    let (mut child, addr) = start_serve(
        &["--workflow", c::WORKFLOW_RLVR, "--engine", "embedded"],
        tmp.path(),
    );
    let pid = child.id();
    let result = std::panic::catch_unwind(|| {
        let (failed, p50, p99) = probe_health(&addr, 50);
        eprintln!("health, quiet: {failed} failed, p50 {p50:.1} ms, p99 {p99:.1} ms");
        let baseline = rollbox_tests::peak_rss(pid);

        // Bodies: one row of 64 MiB of `{},` (refused by the row's parse budget), and 64 MiB of
        // `{},` rows (refused at row 16,385).
        let mut one_row = b"{\"rows\": [{\"x\": [".to_vec();
        one_row.extend(b"{},".repeat(((64 << 20) - 64) / 3));
        one_row.extend(b"{}]}]}");
        let mut many_rows = b"{\"rows\": [".to_vec();
        many_rows.extend(b"{},".repeat(((64 << 20) - 64) / 3));
        many_rows.extend(b"{}]}");
        let stop = Arc::new(AtomicBool::new(false));
        let senders: Vec<_> = [(one_row, 400u16), (many_rows, 413)]
            .into_iter()
            .map(|(body, want)| {
                let (stop, addr) = (stop.clone(), addr.clone());
                std::thread::spawn(move || {
                    let body = String::from_utf8(body).expect("ascii");
                    let mut sent = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let (code, answer) = http(&addr, "POST", "/v1/episodes", &body);
                        assert_eq!(code, want, "{}", String::from_utf8_lossy(&answer));
                        sent += 1;
                    }
                    sent
                })
            })
            .collect();
        let (failed, p50, p99) = probe_health(&addr, 100);
        stop.store(true, Ordering::Relaxed);
        let sent: Vec<usize> = senders
            .into_iter()
            .map(|t| t.join().expect("sender"))
            .collect();
        let peak = rollbox_tests::peak_rss(pid);
        eprintln!(
            "health, during {sent:?} 64 MiB bodies: {failed} failed, p50 {p50:.1} ms, p99 {p99:.1} ms; server peak RSS {} MiB (before {} MiB)",
            peak >> 20,
            baseline >> 20
        );
        // Every probe answered (each within its 10 s read timeout); the latencies are
        // printed, not asserted: load on the machine moves them (issue 52).
        assert_eq!(failed, 0);
        assert!(peak < baseline + (768 << 20), "peak RSS {} MiB", peak >> 20);

        // Half-open connections from 127.0.0.2 to 127.0.0.10, kept at 120 each, under the
        // per-address cap of 128 but 1,080 in all, past the server's 1,024 (closed ones
        // reopened): without the cap on connections waiting for a head, which closes the
        // longest-waiting for a new one, 20 of 25 probes failed (issue 52).
        let stop = Arc::new(AtomicBool::new(false));
        let opened = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        const ADDRESSES: usize = 9;
        const PER_ADDRESS: usize = 120;
        let flood = {
            let (stop, addr, opened) = (stop.clone(), addr.clone(), opened.clone());
            std::thread::spawn(move || {
                let server: std::net::SocketAddr = addr.parse().expect("addr");
                let mut open: Vec<Vec<std::net::TcpStream>> =
                    (0..ADDRESSES).map(|_| Vec::new()).collect();
                while !stop.load(Ordering::Relaxed) {
                    for (i, open) in open.iter_mut().enumerate() {
                        open.retain(|s| {
                            let mut b = [0u8; 1];
                            s.set_nonblocking(true).expect("nonblocking");
                            !matches!(std::io::Read::read(&mut &*s, &mut b), Ok(0))
                        });
                        while open.len() < PER_ADDRESS {
                            let socket = socket2::Socket::new(
                                socket2::Domain::IPV4,
                                socket2::Type::STREAM,
                                None,
                            )
                            .expect("socket");
                            let from: std::net::SocketAddr =
                                format!("127.0.0.{}:0", i + 2).parse().expect("addr");
                            socket.bind(&from.into()).expect("bind 127.0.0.x");
                            if socket.connect(&server.into()).is_err() {
                                break;
                            }
                            open.push(socket.into());
                            opened.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    std::thread::sleep(std::time::Duration::from_millis(5));
                }
            })
        };
        std::thread::sleep(std::time::Duration::from_secs(1));
        let (failed, p50, p99) = probe_health(&addr, 100);
        // The server closes the longest-waiting for new ones; on a busy machine the flood may
        // take a while to see it, so it keeps going (up to 20 s) until it has reopened some.
        let total = ADDRESSES * PER_ADDRESS;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while opened.load(Ordering::Relaxed) <= total && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        stop.store(true, Ordering::Relaxed);
        flood.join().expect("flood");
        let opened = opened.load(Ordering::Relaxed);
        eprintln!(
            "health, during a flood of {opened} half-open connections: {failed} failed, p50 {p50:.1} ms, p99 {p99:.1} ms"
        );
        assert!(opened > total, "the flood reopened closed connections");
        assert_eq!(failed, 0, "health probes answered during the flood");

        // A keep-alive connection left idle after its request is closed by the server.
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(&addr).expect("connect");
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .expect("send");
        s.set_read_timeout(Some(std::time::Duration::from_secs(300)))
            .expect("timeout");
        let start = std::time::Instant::now();
        let mut raw = Vec::new();
        let read = s.read_to_end(&mut raw);
        let held = start.elapsed();
        assert!(String::from_utf8_lossy(&raw).starts_with("HTTP/1.1 200"));
        assert!(
            read.is_ok(),
            "an idle keep-alive connection was held {held:?}: {read:?}"
        );
    });
    child.kill().expect("stop serve");
    child.wait().expect("reaped");
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// The value of the metric line `name ` in Prometheus text.
/// One HTTP/1.1 response read from `s`: its head and its body (by `Content-Length`, else to
/// the end of the stream), as text.
fn read_response(s: &mut std::net::TcpStream) -> String {
    use std::io::Read;
    let mut got = Vec::new();
    let mut buf = [0u8; 8192];
    loop {
        let text = String::from_utf8_lossy(&got).into_owned();
        if let Some(end) = text.find("\r\n\r\n") {
            let length = text[..end].lines().find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse::<usize>().ok())
                    .flatten()
            });
            if length.is_some_and(|n| got.len() >= end + 4 + n) {
                return text;
            }
        }
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return String::from_utf8_lossy(&got).into_owned(),
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

fn metric_value(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(&format!("{name} ")))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{name}: {text}"))
}

/// Issue 52: 40 bodies of just under 60 MiB each, sent from two addresses and never finished,
/// with `--max-host-memory 1GiB`. Each body's bytes are held against one server-wide total and
/// the host budget before they are read (a declared length at once), so the server holds at
/// most the budget's worth and answers the rest 503 with `Retry-After: 1` (before: every body
/// was held, 80 such bodies put the server at 5 GB). When the clients go, it all comes back.
#[test]
fn serve_holds_request_bodies_within_the_host_budget() {
    use std::io::{Read, Write};
    let tmp = tempfile::tempdir().expect("tmp");
    let (mut child, addr) = start_serve(
        &[
            "--workflow",
            c::WORKFLOW_RLVR,
            "--engine",
            "embedded",
            "--max-host-memory",
            "1GiB",
        ],
        tmp.path(),
    );
    let pid = child.id();
    let result = std::panic::catch_unwind(|| {
        let baseline = rollbox_tests::peak_rss(pid);
        const BODY: usize = (60 << 20) - 4096;
        const CLIENTS: usize = 40;
        let clients: Vec<_> = (0..CLIENTS)
            .map(|i| {
                let addr = addr.clone();
                std::thread::spawn(move || {
                    let server: std::net::SocketAddr = addr.parse().expect("addr");
                    let socket =
                        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)
                            .expect("socket");
                    let from: std::net::SocketAddr =
                        format!("127.0.0.{}:0", 1 + i % 2).parse().expect("addr");
                    socket.bind(&from.into()).expect("bind");
                    socket.connect(&server.into()).expect("connect");
                    let mut s: std::net::TcpStream = socket.into();
                    s.set_write_timeout(Some(std::time::Duration::from_secs(5)))
                        .expect("timeout");
                    write!(
                        s,
                        "POST /v1/episodes HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {BODY}\r\n\r\n"
                    )
                    .expect("head");
                    // All but the last MiB: a refused body stops being read (the write times
                    // out or fails), a held one waits for the rest.
                    let chunk = vec![b' '; 1 << 20];
                    let mut sent = 0;
                    while sent < BODY - (1 << 20) {
                        match s.write(&chunk) {
                            Ok(n) => sent += n,
                            Err(_) => break,
                        }
                    }
                    s.set_read_timeout(Some(std::time::Duration::from_millis(200)))
                        .expect("timeout");
                    let mut head = [0u8; 512];
                    let n = s.read(&mut head).unwrap_or(0);
                    (s, String::from_utf8_lossy(&head[..n]).into_owned())
                })
            })
            .collect();
        let held: Vec<_> = clients
            .into_iter()
            .map(|t| t.join().expect("client"))
            .collect();
        let peak = rollbox_tests::peak_rss(pid);
        let (_, metrics) = http(&addr, "GET", "/metrics", "");
        let metrics = String::from_utf8_lossy(&metrics).into_owned();
        let holding = metric_value(&metrics, "rollbox_request_body_bytes_held");
        let refused = metric_value(&metrics, "rollbox_request_bodies_refused_total");
        let answered: Vec<_> = held.iter().filter(|(_, h)| !h.is_empty()).collect();
        eprintln!(
            "{CLIENTS} bodies of {} MiB: {refused} refused, {} MiB held, {} answers read; peak RSS {} MiB (before {} MiB)",
            BODY >> 20,
            holding as u64 >> 20,
            answered.len(),
            peak >> 20,
            baseline >> 20
        );
        assert!(refused >= 1.0, "some bodies were refused: {metrics}");
        assert!(holding <= (1u64 << 30) as f64, "held {holding} bytes");
        for (_, h) in &answered {
            assert!(
                h.starts_with("HTTP/1.1 503") && h.to_ascii_lowercase().contains("retry-after: 1"),
                "{h}"
            );
        }
        assert!(
            peak < baseline + (1536 << 20),
            "peak RSS {} MiB with a 1 GiB budget (before {} MiB)",
            peak >> 20,
            baseline >> 20
        );
        drop(held);
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let (_, metrics) = http(&addr, "GET", "/metrics", "");
            let metrics = String::from_utf8_lossy(&metrics).into_owned();
            if metric_value(&metrics, "rollbox_request_body_bytes_held") == 0.0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "bodies still held after their clients left: {metrics}"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(http(&addr, "GET", "/healthz", ""), (200, b"ok".to_vec()));
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// Issue 52: three `/v1/rewards` requests at once, each one item whose `row` holds 60 MB of
/// `{},` (20 million values, gigabytes as `Value`s: 4-5 GB were held with a 1 GiB budget),
/// and the same in a `/get_reward` label: every value a request carries into a call goes
/// through the dataset's budgeted row parser, so each is refused before it is built (413 past
/// the 16 MiB row text, 400 past the 128 MiB parsed), in bounded memory.
#[test]
fn serve_parses_reward_rows_within_the_row_budget() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (mut child, addr) = start_serve(
        &[
            "--reward",
            "math=math",
            "--engine",
            "embedded",
            "--max-host-memory",
            "1GiB",
        ],
        tmp.path(),
    );
    let pid = child.id();
    let result = std::panic::catch_unwind(|| {
        let baseline = rollbox_tests::peak_rss(pid);
        let values = |bytes: usize| format!("[{}{{}}]", "{},".repeat(bytes / 3));
        let big = json!({"reward": "math", "items": [
            {"completion": "1", "answer": "1", "row": {"x": "@"}}
        ]})
        .to_string()
        .replace("\"@\"", &values(60 << 20));
        let senders: Vec<_> = (0..3)
            .map(|_| {
                let (addr, big) = (addr.clone(), big.clone());
                std::thread::spawn(move || http(&addr, "POST", "/v1/rewards", &big))
            })
            .collect();
        for s in senders {
            let (code, body) = s.join().expect("sender");
            let text = String::from_utf8_lossy(&body).into_owned();
            assert_eq!(code, 413, "{text}");
            assert!(text.contains("items[0].row"), "{text}");
        }
        // Under the text cap but past the parsed one: 15 MiB of `{},` is 5 million values.
        let amplified = json!({"reward": "math", "items": [
            {"completion": "1", "answer": "1", "row": {"x": "@"}}
        ]})
        .to_string()
        .replace("\"@\"", &values(15 << 20));
        let (code, body) = http(&addr, "POST", "/v1/rewards", &amplified);
        let text = String::from_utf8_lossy(&body).into_owned();
        assert_eq!(code, 400, "{text}");
        assert!(text.contains("once parsed"), "{text}");
        let label = json!({"query": ["1"], "prompts": [""], "labels": ["@"]})
            .to_string()
            .replace("\"@\"", &values(15 << 20));
        let (code, body) = http(&addr, "POST", "/get_reward?reward=math", &label);
        let text = String::from_utf8_lossy(&body).into_owned();
        assert_eq!(code, 400, "{text}");
        assert!(
            text.contains("labels[0]") && text.contains("once parsed"),
            "{text}"
        );
        let peak = rollbox_tests::peak_rss(pid);
        eprintln!(
            "three 60 MB rows and two 15 MiB amplified values: peak RSS {} MiB (before {} MiB)",
            peak >> 20,
            baseline >> 20
        );
        assert!(
            peak < baseline + (1 << 30),
            "peak RSS {} MiB (before {} MiB)",
            peak >> 20,
            baseline >> 20
        );
        // An honest row still scores.
        let honest = json!({"reward": "math", "items": [
            {"completion": "\\boxed{2}", "answer": "2", "row": {"id": 7}}
        ]})
        .to_string();
        let (code, body) = http(&addr, "POST", "/v1/rewards", &honest);
        let v: Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!((code, &v["scores"]), (200, &json!([1.0])), "{v}");
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// Issue 52: an answer of 4 rows, each with a 64 MiB tensor beside its trajectory (a 256 MiB
/// batch), with `--max-host-memory 2GiB`. The batch is held once, with its episodes'
/// reservations, and sent 4 MiB at a time: the server's peak stays under 2.75 times the batch
/// (measured: 2.2, its assembly from the trajectories holding both), where it was held three
/// times over (the batch, each tensor's copy and the serialised file: 3.4 measured). The
/// answer is whole and reads back.
#[test]
fn serve_sends_a_large_answer_without_copying_it() {
    let tmp = tempfile::tempdir().expect("tmp");
    let engine = rollbox_tests::replay_123(tmp.path());
    let (mut child, addr) = start_serve(
        &[
            "--workflow",
            c::ADV_HOARD,
            "--engine",
            &engine,
            "--n-samples",
            "1",
            "--max-concurrent",
            "1",
            "--max-host-memory",
            "2GiB",
        ],
        tmp.path(),
    );
    let pid = child.id();
    let result = std::panic::catch_unwind(|| {
        let baseline = rollbox_tests::peak_rss(pid);
        let rows = json!({"rows": vec![json!({"big_mib": 64}); 4]}).to_string();
        let (code, head, body) = http_with(&addr, "POST", "/v1/episodes", &[], &rows);
        assert_eq!(
            code,
            200,
            "{}",
            String::from_utf8_lossy(&body[..body.len().min(2000)])
        );
        assert!(
            head.to_ascii_lowercase()
                .contains(&format!("content-length: {}", body.len())),
            "{head}"
        );
        let peak = rollbox_tests::peak_rss(pid);
        let batch = rollbox_tensor::from_safetensors_bytes(&body, &rollbox_tensor::Device::Cpu)
            .expect("the answer reads as safetensors");
        let blob = batch.get("blob").expect("blob");
        assert_eq!(blob.shape(), &[4, 64 << 18]);
        drop(batch);
        let gib = |b: u64| b as f64 / f64::from(1u32 << 30);
        eprintln!(
            "a 256 MiB answer: server peak RSS {:.2} GiB above its {:.2} GiB before",
            gib(peak.saturating_sub(baseline)),
            gib(baseline)
        );
        assert!(
            peak < baseline + (704 << 20),
            "peak RSS {:.2} GiB above the {:.2} GiB before: the answer was copied",
            gib(peak.saturating_sub(baseline)),
            gib(baseline)
        );
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// `POST /get_reward`, OpenRLHF's remote reward protocol: each query scored by the named reward
/// in its own sandbox (the completion is the query after its prompt, the label the row's
/// `answer`); a reward that never returns scores 0.0 with its fault logged, within its limit;
/// malformed, mismatched, oversized and misdirected requests get a 4xx naming the problem and
/// the server goes on serving.
#[test]
fn serve_scores_openrlhf_reward_requests() {
    let tmp = tempfile::tempdir().expect("tmp");
    let spin = format!("spin={},timeout=300ms,retries=0", c::REWARD_SPIN);
    let (mut child, addr) = start_serve(
        &[
            "--reward",
            "math=math",
            "--reward",
            &spin,
            "--engine",
            "embedded",
        ],
        tmp.path(),
    );
    let result = std::panic::catch_unwind(|| {
        let prompt = "<|im_start|>user\nNatalia sold 48 clips, then 24 more. How many?<|im_end|>\n<|im_start|>assistant\n";
        let body = json!({
            "query": [
                format!("{prompt}48 + 24 = 72, so \\boxed{{72}}<|im_end|>"),
                format!("{prompt}The answer is 96.<|im_end|>"),
                // the prompt is not a prefix: the whole query is the completion
                "she sold 72".to_string(),
            ],
            "prompts": [prompt, prompt, prompt],
            "labels": ["72", "72", 72],
        });
        let (code, out) = http(&addr, "POST", "/get_reward?reward=math", &body.to_string());
        let v: Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["rewards"], json!([1.0, 0.0, 1.0]), "{v}");
        assert_eq!(v["scores"], v["rewards"]);
        assert_eq!(v["extra_logs"]["rollbox_fault"], json!([0.0, 0.0, 0.0]));

        let start = std::time::Instant::now();
        let one = json!({"query": ["x"], "prompts": [""], "labels": ["1"]}).to_string();
        let (code, out) = http(&addr, "POST", "/get_reward?reward=spin", &one);
        let v: Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!((code, &v["rewards"]), (200, &json!([0.0])), "{v}");
        assert_eq!(v["extra_logs"]["rollbox_fault"], json!([1.0]));
        eprintln!("a spinning reward scored 0.0 after {:?}", start.elapsed());

        for (path, body, want, says) in [
            ("/get_reward", one.clone(), 400, "?reward=NAME"),
            (
                "/get_reward?reward=nope",
                one.clone(),
                404,
                "registered: math, spin",
            ),
            (
                "/get_reward?reward=../x",
                one.clone(),
                400,
                "registered reward's name",
            ),
            (
                "/get_reward?reward=math&x=1",
                one.clone(),
                400,
                "unknown query parameter `x`",
            ),
            (
                "/get_reward?reward=math",
                json!({"query": ["a", "b"], "labels": ["1"]}).to_string(),
                400,
                "1 labels for 2 queries",
            ),
            (
                "/get_reward?reward=math",
                "{\"query\": 3}".into(),
                400,
                "invalid type: integer `3`",
            ),
            (
                "/get_reward?reward=math",
                json!({"query": vec![""; 4097]}).to_string(),
                413,
                "at most 4096",
            ),
        ] {
            let (code, out) = http(&addr, "POST", path, &body);
            let text = String::from_utf8_lossy(&out);
            assert_eq!(code, want, "{path}: {text}");
            assert!(text.contains(says), "{path}: {text}");
        }
        let (_, metrics) = http(&addr, "GET", "/metrics", "");
        let text = String::from_utf8_lossy(&metrics);
        assert!(text.contains("rollbox_reward_samples_total 4"), "{text}");
        assert!(text.contains("rollbox_reward_faults_total 1"), "{text}");
        assert_eq!(http(&addr, "GET", "/healthz", ""), (200, b"ok".to_vec()));

        // `/v1/rewards`: items scored in order, each with its accounting; a fault is typed and
        // scores 0.0 in `scores`, the request still succeeds.
        let body = json!({"reward": "math", "items": [
            {"completion": "48 + 24 = 72, so \\boxed{72}", "answer": "72"},
            {"completion": "The answer is 96.", "reference": "72"},
            {"completion": "\\boxed{5}", "row": {"answer": "5", "question": "2+3?"}},
        ]});
        let (code, out) = http(&addr, "POST", "/v1/rewards", &body.to_string());
        let v: Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["scores"], json!([1.0, 0.0, 1.0]), "{v}");
        assert_eq!(v["results"][0]["fault"], Value::Null, "{v}");
        assert_eq!(v["results"][0]["attempts"], 1, "{v}");
        assert!(v["results"][0]["ms"].as_f64().expect("ms") > 0.0, "{v}");
        let one = json!({"reward": "spin", "items": [{"completion": "x"}]}).to_string();
        let (code, out) = http(&addr, "POST", "/v1/rewards", &one);
        let v: Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!((code, &v["scores"]), (200, &json!([0.0])), "{v}");
        assert_eq!(v["results"][0]["score"], Value::Null, "{v}");
        assert_eq!(v["results"][0]["fault"]["kind"], "timeout", "{v}");
        assert!(
            v["results"][0]["fault"]["message"]
                .as_str()
                .is_some_and(|m| m.contains("timed out")),
            "{v}"
        );
        for (body, want, says) in [
            (
                json!({"items": [{"completion": "x"}]}),
                400,
                "several rewards are registered",
            ),
            (
                json!({"reward": "math", "items": [{"completion": "x", "answer": "1", "reference": "1"}]}),
                400,
                "both `answer` and `reference`",
            ),
            (
                json!({"reward": "math", "items": [{"completion": "x", "label": "1"}]}),
                400,
                "unknown field `label`",
            ),
            (
                json!({"reward": "nope", "items": []}),
                404,
                "no reward named `nope`",
            ),
        ] {
            let (code, out) = http(&addr, "POST", "/v1/rewards", &body.to_string());
            let text = String::from_utf8_lossy(&out);
            assert_eq!(code, want, "{body}: {text}");
            assert!(text.contains(says), "{body}: {text}");
        }
    });
    child.kill().expect("stop serve");
    child.wait().expect("reaped");
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// `POST /run_code` answers as SandboxFusion does for what verl sends: a program that prints
/// its answer (`Success`), one that raises or exits non-zero (`Failed`, `Finished`, its code),
/// one that loops (`TimeLimitExceeded` at the request's `run_timeout`, under the tool's own
/// limit), one past `memory_limit_MB`; other languages and files are refused by name, and
/// without the tool the error names the flag.
#[test]
fn serve_runs_code_as_sandbox_fusion_does() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let tool = format!("python={},timeout=10s,memory=1GiB", c::PYTHON_EXEC_TOOL);
    let (mut child, addr) = start_serve(&["--tool", &tool, "--engine", "embedded"], tmp.path());
    let result = std::panic::catch_unwind(|| {
        let run = |body: Value| {
            let (code, out) = http(&addr, "POST", "/run_code", &body.to_string());
            let v: Value = serde_json::from_slice(&out).expect("JSON");
            (code, v)
        };
        let verl = |code: &str, stdin: &str, timeout: f64, mb: i64| {
            json!({"compile_timeout": timeout, "run_timeout": timeout, "code": code,
                   "stdin": stdin, "memory_limit_MB": mb, "language": "python",
                   "files": {}, "fetch_files": []})
        };
        let (code, v) = run(verl(
            "a, b = map(int, input().split())\nprint(a + b)\n\n",
            "1 2\n",
            10.0,
            1024,
        ));
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["status"], "Success", "{v}");
        assert_eq!(v["run_result"]["status"], "Finished");
        assert_eq!(v["run_result"]["return_code"], 0);
        assert_eq!(v["run_result"]["stdout"], "3\n");
        // Read as competitive programs read (python-exec's descriptor 0), with `main` in a
        // thread for its stack. stdin is a pipe, as SandboxFusion's: `st_size` is 0.
        let (_, v) = run(verl(
            "import os, sys, threading\ndef main():\n    data = os.read(0, 1 << 20).split()\n    sys.stdout.buffer.write(b'%d %d\\n' % (sum(map(int, data)), os.fstat(0).st_size))\nthreading.stack_size(1 << 26)\nt = threading.Thread(target=main)\nt.start()\nt.join()",
            "4 5 6\n",
            10.0,
            1024,
        ));
        assert_eq!(v["status"], "Success", "{v}");
        assert_eq!(v["run_result"]["stdout"], "15 0\n", "{v}");

        let (_, v) = run(verl("raise ValueError('no')", "", 10.0, 1024));
        assert_eq!(
            (&v["status"], &v["run_result"]["status"]),
            (&json!("Failed"), &json!("Finished")),
            "{v}"
        );
        assert_eq!(v["run_result"]["return_code"], 1);
        assert!(
            v["run_result"]["stderr"]
                .as_str()
                .unwrap_or("")
                .contains("ValueError: no"),
            "{v}"
        );
        let (_, v) = run(verl("import sys\nprint(1)\nsys.exit(3)", "", 10.0, 1024));
        assert_eq!(
            (&v["status"], &v["run_result"]["return_code"]),
            (&json!("Failed"), &json!(3)),
            "{v}"
        );
        assert_eq!(v["run_result"]["stdout"], "1\n");

        let start = std::time::Instant::now();
        let (_, v) = run(verl("while True:\n    pass", "", 1.0, 1024));
        assert_eq!(v["run_result"]["status"], "TimeLimitExceeded", "{v}");
        eprintln!(
            "a loop stopped at its 1 s run_timeout after {:?}",
            start.elapsed()
        );

        let (_, v) = run(verl(
            "x = bytearray(300 << 20)\nprint(len(x))",
            "",
            10.0,
            128,
        ));
        assert_eq!(v["status"], "Failed", "{v}");
        assert_ne!(v["run_result"]["return_code"], 0, "{v}");

        for (body, says) in [
            (
                json!({"code": "int main(){}", "language": "cpp"}),
                "Python only",
            ),
            (
                json!({"code": "print(1)", "language": "python", "files": {"a.txt": "eA=="}}),
                "no file system",
            ),
            (
                json!({"code": "print(1)", "run_timeout": -1}),
                "positive number",
            ),
            (json!({"stdin": "1"}), "missing field `code`"),
        ] {
            let (code, out) = http(&addr, "POST", "/run_code", &body.to_string());
            let text = String::from_utf8_lossy(&out);
            assert_eq!(code, 400, "{text}");
            assert!(text.contains(says), "{text}");
        }
        let (_, metrics) = http(&addr, "GET", "/metrics", "");
        let text = String::from_utf8_lossy(&metrics);
        assert!(
            text.contains("rollbox_run_code_requests_total 10"),
            "{text}"
        );
        assert!(text.contains("rollbox_run_code_failed_total 4"), "{text}");
    });
    child.kill().expect("stop serve");
    child.wait().expect("reaped");
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let (mut child, addr) = start_serve(&["--engine", "embedded"], tmp.path());
    let (code, out) = http(&addr, "POST", "/run_code", r#"{"code": "print(1)"}"#);
    child.kill().expect("stop serve");
    child.wait().expect("reaped");
    let text = String::from_utf8_lossy(&out);
    assert_eq!(code, 503, "{text}");
    assert!(text.contains("--tool python=python_exec.wasm"), "{text}");
}

/// The tenants file of the tenant tests: `a` (one request in flight, 2,000-byte bodies, 2 rows
/// or samples per request) and `b` (the defaults), keyed `key-a` and `key-b` unless `keys`
/// leaves one out.
/// The operator tenant's key header (see [`two_tenants`]).
const OPS: &str = "Authorization: Bearer key-ops";

fn write_tenants(path: &std::path::Path, keys: &[&str]) {
    use sha2::Digest;
    let hash = |k: &str| hex::encode(sha2::Sha256::digest(k.as_bytes()));
    let mut text = String::new();
    if keys.contains(&"key-a") {
        text += &format!(
            "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{}\"]\nmax_requests_in_flight = 1\nmax_body_bytes = 2000\nmax_rows_per_request = 2\noperator = true\n\n",
            hash("key-a")
        );
    }
    if keys.contains(&"key-b") {
        text += &format!(
            "[[tenant]]\nname = \"b\"\nkey_sha256 = [\"{}\"]\n",
            hash("key-b")
        );
    }
    std::fs::write(path, text).expect("tenants file");
}

/// A tenants file in `dir` with tenants `a` and `b`, keyed `key-a` and `key-b`, each with
/// the extra TOML lines given (quotas, components), and the operator `ops` (key `key-ops`,
/// [`OPS`]), who reads every tenant's metrics.
fn two_tenants(dir: &std::path::Path, a: &str, b: &str) -> std::path::PathBuf {
    use sha2::Digest;
    let hash = |k: &str| hex::encode(sha2::Sha256::digest(k.as_bytes()));
    let file = dir.join("tenants.toml");
    std::fs::write(
        &file,
        format!(
            "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{}\"]\n{a}\n[[tenant]]\nname = \"b\"\nkey_sha256 = [\"{}\"]\n{b}\n[[tenant]]\nname = \"ops\"\nkey_sha256 = [\"{}\"]\noperator = true\n",
            hash("key-a"),
            hash("key-b"),
            hash("key-ops")
        ),
    )
    .expect("tenants file");
    file
}

/// `serve --tenants`: no key, a wrong key or another scheme is 401 with nothing run; a
/// tenant at its requests in flight gets 429 with Retry-After while another tenant is served;
/// its body and sample caps hold; `/metrics` counts per tenant; SIGHUP revokes a key left out
/// of the file. Without `--tenants`, a non-loopback address is refused at start.
#[test]
fn serve_admits_tenants_by_key_and_quota() {
    let out = Command::new(env!("CARGO_BIN_EXE_rollbox"))
        .args(["serve", "--listen", "0.0.0.0:0", "--engine", "embedded"])
        .output()
        .expect("serve");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("--tenants") && err.contains("--insecure-no-auth"),
        "{err}"
    );

    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("tenants.toml");
    write_tenants(&file, &["key-a", "key-b"]);
    // The holder below repeats its spin until the probe sees it in flight, so the timeout
    // only sets how long each try holds `a`'s one slot.
    let spin = format!("spin={},timeout=2s,retries=0", c::REWARD_SPIN);
    let (mut child, addr) = start_serve(
        &[
            "--tenants",
            file.to_str().expect("path"),
            "--reward",
            "math=math",
            "--reward",
            &spin,
            "--engine",
            "embedded",
        ],
        tmp.path(),
    );
    let pid = child.id();
    let result = std::panic::catch_unwind(|| {
        let (a, b) = ("Authorization: Bearer key-a", "Authorization: Bearer key-b");
        let version = json!({"version": 3}).to_string();
        assert_eq!(
            http(&addr, "GET", "/healthz", "").0,
            200,
            "probes need no key"
        );
        for headers in [
            vec![],
            vec!["Authorization: Bearer key-c"],
            vec!["Authorization: Basic key-a"],
            vec!["Authorization: Bearer"],
        ] {
            let (code, head, body) = http_with(&addr, "POST", "/v1/version", &headers, &version);
            assert_eq!(code, 401, "{headers:?}");
            assert!(
                head.to_ascii_lowercase()
                    .contains("www-authenticate: bearer"),
                "{head}"
            );
            assert!(String::from_utf8_lossy(&body).contains("Authorization: Bearer KEY"));
        }
        let (code, _, body) = http_with(&addr, "GET", "/metrics", &[a], "");
        let text = String::from_utf8_lossy(&body).into_owned();
        assert_eq!(code, 200);
        assert!(text.contains("rollbox_unauthorized_total 4"), "{text}");
        assert!(
            text.contains("rollbox_policy_version 0"),
            "the refused requests ran nothing: {text}"
        );

        // `a` holds its one request in flight (a reward that spins to its timeout): its next
        // one is 429, `b` is served meanwhile. The holder sends spins back to back until the
        // probe has seen its 429, so no timing on a loaded machine can slip between them; a
        // spin that meets one of the probes in flight is itself 429, and counted.
        let sample = json!({"query": ["x"], "prompts": [""], "labels": ["1"]}).to_string();
        let seen = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let held = {
            let (addr, sample, seen) = (addr.clone(), sample.clone(), seen.clone());
            std::thread::spawn(move || {
                let mut codes = Vec::new();
                while !seen.load(std::sync::atomic::Ordering::SeqCst) {
                    codes
                        .push(http_with(&addr, "POST", "/get_reward?reward=spin", &[a], &sample).0);
                }
                codes
            })
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
        let (code, head, _) = loop {
            let r = http_with(&addr, "POST", "/v1/version", &[a], &version);
            if r.0 != 200 || std::time::Instant::now() > deadline {
                break r;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        };
        seen.store(true, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(code, 429, "{head}");
        assert!(
            head.to_ascii_lowercase().contains("retry-after: 1"),
            "{head}"
        );
        let start = std::time::Instant::now();
        let ok = json!({"query": ["\\boxed{1}"], "prompts": [""], "labels": ["1"]}).to_string();
        let (code, _, body) = http_with(&addr, "POST", "/get_reward?reward=math", &[b], &ok);
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        eprintln!("b served in {:?} while a was at its cap", start.elapsed());
        let held = held.join().expect("held");
        assert!(
            held.iter().all(|&c| c == 200 || c == 429) && held.contains(&200),
            "the held spins: {held:?}"
        );
        let held_throttled = held.iter().filter(|&&c| c == 429).count();
        assert_eq!(
            http_with(&addr, "POST", "/v1/version", &[a], &version).0,
            200
        );
        // A URL's `b:key-b@` (what a trainer that only takes a URL sends) authenticates b,
        // who is no operator: the policy version, stamped on every tenant's tokens, is not
        // b's to set (issue 52: b's 777 was stamped on everyone's).
        let basic = "Authorization: Basic YjprZXktYg==";
        let (code, _, body) = http_with(&addr, "POST", "/v1/version", &[basic], &version);
        let text = String::from_utf8_lossy(&body).into_owned();
        assert_eq!(code, 403, "{text}");
        assert!(text.contains("operator = true"), "{text}");
        let (code, _, body) = http_with(
            &addr,
            "POST",
            "/v1/version",
            &[b],
            &json!({"version": 777}).to_string(),
        );
        assert_eq!(code, 403, "{}", String::from_utf8_lossy(&body));

        // `a`'s caps: 2,000-byte bodies, 2 samples.
        let big = format!("{{\"version\": 1, \"pad\": \"{}\"}}", "x".repeat(3000));
        let (code, _, body) = http_with(&addr, "POST", "/v1/version", &[a], &big);
        assert_eq!(code, 413);
        assert!(String::from_utf8_lossy(&body).contains("max_body_bytes"));
        let three =
            json!({"query": ["1", "2", "3"], "prompts": ["", "", ""], "labels": ["1", "2", "3"]});
        let (code, _, body) = http_with(
            &addr,
            "POST",
            "/get_reward?reward=math",
            &[a],
            &three.to_string(),
        );
        assert_eq!(code, 413, "{}", String::from_utf8_lossy(&body));
        assert!(String::from_utf8_lossy(&body).contains("at most 2"));
        assert_eq!(
            http_with(
                &addr,
                "POST",
                "/get_reward?reward=math",
                &[b],
                &three.to_string()
            )
            .0,
            200
        );

        // The operator `a` reads every tenant's series; `b` only its own, and nothing
        // server-wide but the policy version (which b's refused 777 did not move).
        let (_, _, body) = http_with(&addr, "GET", "/metrics", &[a], "");
        let text = String::from_utf8_lossy(&body).into_owned();
        let throttled = format!(
            "rollbox_tenant_throttled_total{{tenant=\"a\"}} {}\n",
            1 + held_throttled
        );
        assert!(text.contains(&throttled), "{throttled} in {text}");
        assert!(
            text.contains("rollbox_tenant_throttled_total{tenant=\"b\"} 0"),
            "{text}"
        );
        let (_, _, body) = http_with(&addr, "GET", "/metrics", &[b], "");
        let own = String::from_utf8_lossy(&body).into_owned();
        assert!(
            own.contains("rollbox_tenant_throttled_total{tenant=\"b\"} 0"),
            "{own}"
        );
        assert!(
            !own.contains("tenant=\"a\"")
                && !own.contains("rollbox_unauthorized_total")
                && !own.contains("rollbox_requests_total"),
            "b reads only its own series: {own}"
        );
        assert!(own.contains("rollbox_policy_version 3\n"), "{own}");

        // SIGHUP with `b`'s key left out: refused from then on; `a` still served.
        write_tenants(&file, &["key-a"]);
        let kill = Command::new("kill")
            .args(["-HUP", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(kill.success());
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        while http_with(&addr, "POST", "/v1/version", &[b], &version).0 != 401 {
            assert!(std::time::Instant::now() < deadline, "key-b still accepted");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        assert_eq!(
            http_with(&addr, "POST", "/v1/version", &[a], &version).0,
            200
        );
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// A tenant's components, limits and quotas on calls (issues 38 and 52): `a` may call the
/// `spin` reward only (403 for `math` and for the `python` tool behind `/run_code`; its
/// episodes reach only `spin`, as the next test shows), within 500 ms (the reward is
/// registered with 2 s), one reward call at a time (a batch of four spins waits in the pool's
/// queue), and 1 s of sandbox time a minute, counted as the calls run: the first two spins use
/// it, the next two are stopped (`limit_exceeded`, naming `sandbox_seconds_per_minute`) rather
/// than run past it, and its next request is 429 with the Retry-After the refill needs; `b`,
/// with the defaults, is served throughout with the registered 2 s; `/metrics` reports each.
#[test]
fn serve_holds_tenants_to_their_components_and_time() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = two_tenants(
        tmp.path(),
        "rewards = [\"spin\"]\ntools = []\ntimeout = \"500ms\"\nmax_reward_calls_in_flight = 1\nsandbox_seconds_per_minute = 1",
        "",
    );
    let spin = format!("spin={},timeout=2s,retries=0", c::REWARD_SPIN);
    let python = format!("python={}", c::TOOL_CALCULATOR);
    let (mut child, addr) = start_serve(
        &[
            "--tenants",
            file.to_str().expect("path"),
            "--reward",
            "math=math",
            "--reward",
            &spin,
            "--tool",
            &python,
            "--engine",
            "embedded",
        ],
        tmp.path(),
    );
    let result = std::panic::catch_unwind(|| {
        let (a, b) = ("Authorization: Bearer key-a", "Authorization: Bearer key-b");
        let math =
            json!({"reward": "math", "items": [{"completion": "\\boxed{1}", "answer": "1"}]})
                .to_string();
        let (code, _, body) = http_with(&addr, "POST", "/v1/rewards", &[a], &math);
        let text = String::from_utf8_lossy(&body).into_owned();
        assert_eq!(code, 403, "{text}");
        assert!(
            text.contains("may not use the reward `math`") && text.contains("spin"),
            "{text}"
        );
        let (code, _, body) = http_with(&addr, "POST", "/v1/rewards", &[b], &math);
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
        let (code, _, body) = http_with(
            &addr,
            "POST",
            "/get_reward?reward=math",
            &[a],
            &json!({"query": ["x"]}).to_string(),
        );
        assert_eq!(code, 403, "{}", String::from_utf8_lossy(&body));
        let code_req = json!({"code": "print(1)", "language": "python"}).to_string();
        let (code, _, body) = http_with(&addr, "POST", "/run_code", &[a], &code_req);
        let text = String::from_utf8_lossy(&body).into_owned();
        assert_eq!(code, 403, "{text}");
        assert!(text.contains("the tool `python`"), "{text}");
        // Four spins, one at a time, each cut at a's 500 ms, until a's second of sandbox time
        // is used (before issue 52: all four ran, 2 s of a's 1 s).
        let spins = json!({"reward": "spin", "items": [
            {"completion": "1"}, {"completion": "2"}, {"completion": "3"}, {"completion": "4"}
        ]})
        .to_string();
        let start = std::time::Instant::now();
        let (code, _, body) = http_with(&addr, "POST", "/v1/rewards", &[a], &spins);
        let took = start.elapsed();
        let answer: Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(code, 200, "{answer}");
        let ms = |answer: &Value| -> Vec<f64> {
            let results = answer["results"].as_array().expect("results");
            results
                .iter()
                .map(|r| r["ms"].as_f64().expect("ms"))
                .collect()
        };
        // In the order they ran (the items' order is not theirs): the first spin cut at a's
        // 500 ms, the second at that or when a's second was used, the rest stopped at once.
        let mut ran: Vec<(f64, String, String)> = answer["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| {
                (
                    r["ms"].as_f64().expect("ms"),
                    r["fault"]["kind"].as_str().unwrap_or("none").to_string(),
                    r["fault"]["message"].as_str().unwrap_or("").to_string(),
                )
            })
            .collect();
        ran.sort_by(|a, b| b.0.total_cmp(&a.0));
        assert_eq!(ran[0].1, "timeout", "{answer}");
        assert!(
            ["timeout", "limit_exceeded"].contains(&ran[1].1.as_str()),
            "{answer}"
        );
        for (_, kind, message) in &ran[2..] {
            assert_eq!(kind, "limit_exceeded", "{answer}");
            assert!(message.contains("sandbox_seconds_per_minute"), "{answer}");
        }
        // At least a's second ran before the stops (load only makes calls longer); how much
        // more is compared below with what the server charged, not with a clock window.
        let total: f64 = ran.iter().map(|r| r.0).sum();
        assert!(
            total >= 900.0,
            "a's spins ran {total} ms of its 1 s: {answer}"
        );
        assert!(
            ms(&answer).iter().all(|&m| m < 1900.0),
            "a's 500 ms: {answer}"
        );
        assert!(
            took >= std::time::Duration::from_millis(950),
            "one call in flight at a time: {took:?}"
        );
        // `b` is held to neither: two spins run together, to the registered 2 s.
        let two = json!({"reward": "spin", "items": [{"completion": "1"}, {"completion": "2"}]})
            .to_string();
        let (code, _, body) = http_with(&addr, "POST", "/v1/rewards", &[b], &two);
        assert_eq!(code, 200);
        let answer: Value = serde_json::from_slice(&body).expect("JSON");
        assert!(ms(&answer).iter().all(|&m| m >= 1900.0), "{answer}");
        assert!(
            answer["results"]
                .as_array()
                .expect("results")
                .iter()
                .all(|r| r["fault"]["kind"] == "timeout"),
            "{answer}"
        );

        // `a` used its 1 s a minute: refused until a tenth of it has refilled (6 s).
        let one = json!({"reward": "spin", "items": [{"completion": "1"}]}).to_string();
        let (code, head, body) = http_with(&addr, "POST", "/v1/rewards", &[a], &one);
        let text = String::from_utf8_lossy(&body).into_owned();
        assert_eq!(code, 429, "{text}");
        assert!(text.contains("sandbox_seconds_per_minute"), "{text}");
        let retry: u64 = head
            .lines()
            .find_map(|l| {
                l.to_ascii_lowercase()
                    .strip_prefix("retry-after:")
                    .map(|v| v.trim().parse().expect("seconds"))
            })
            .expect("Retry-After");
        assert_eq!(
            http_with(&addr, "POST", "/v1/rewards", &[b], &math).0,
            200,
            "b is served"
        );

        let (_, _, body) = http_with(&addr, "GET", "/metrics", &[OPS], "");
        let text = String::from_utf8_lossy(&body).into_owned();
        assert!(
            text.contains("rollbox_tenant_out_of_time_total{tenant=\"a\"} 1"),
            "{text}"
        );
        let metric = |name: &str, tenant: &str| -> f64 {
            metric_value(&text, &format!("rollbox_{name}{{tenant=\"{tenant}\"}}"))
        };
        // The bounds come from what the server charged, not from the test's clock (issue 52:
        // on a loaded machine a's spins ran longer and Retry-After was 92): a ran `used` s of
        // its 1 s a minute, refilled at 1/60 s a second, and may start again with a tenth of
        // it refilled, so it waits at most (used - 1 + 0.1) * 60 s, less what refilled since
        // (at least 1 s, the header's floor). It overdrew by no more than the stopped calls'
        // checks take.
        let used = metric("tenant_sandbox_seconds_total", "a");
        assert!(used >= 0.95, "a's 1 s a minute: {used}");
        // What the server charged is what the calls ran (each counted from its start to its
        // end or stop; the charge also holds each instance's start-up).
        assert!(
            (used - total / 1e3).abs() < 0.25,
            "charged {used} s for calls that ran {total} ms"
        );
        let most = ((used - 1.0 + 0.1) * 60.0).ceil() as u64 + 1;
        assert!(
            (1..=most).contains(&retry),
            "Retry-After {retry}, a used {used} s of 1 s a minute"
        );
        let waited = metric("tenant_queue_wait_seconds_total", "a");
        assert!(
            waited >= 2.3,
            "the second, third and fourth spins waited 0.5, 1 and 1 s: {waited}"
        );
        // b's two spins ran side by side: neither waited for the other's 2 s.
        let b_waited = metric("tenant_queue_wait_seconds_total", "b");
        assert!(b_waited < 1.5, "b's spins waited {b_waited} s");
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// Issue 52: a tenant allowed 2 s of sandbox time a minute sends 8 requests at once, each of 4
/// episodes that spin to their 1.5 s timeout. Its time is counted as the episodes run and they
/// are stopped once it is spent (each answer says so), so it uses about its 2 s on a quiet
/// machine, not the 48 s the 32 episodes would take (before: 49.7 s in 3 s, checked only at
/// admission); its next request is 429.
#[test]
fn serve_stops_a_tenants_episodes_when_its_time_is_spent() {
    use std::io::Write;
    let tmp = tempfile::tempdir().expect("tmp");
    let file = two_tenants(
        tmp.path(),
        "sandbox_seconds_per_minute = 2\nmax_requests_in_flight = 9",
        "",
    );
    let (mut child, addr) = start_serve(
        &[
            "--tenants",
            file.to_str().expect("path"),
            "--workflow",
            c::ADV_LOOP,
            "--timeout",
            "1500ms",
            "--n-samples",
            "1",
            "--engine",
            "embedded",
        ],
        tmp.path(),
    );
    let result = std::panic::catch_unwind(|| {
        let a = "Authorization: Bearer key-a";
        let rows = json!({"rows": vec![json!({"x": 1}); 4]}).to_string();
        let flood: Vec<std::net::TcpStream> = (0..8)
            .map(|_| {
                let mut s = std::net::TcpStream::connect(&addr).expect("connect");
                write!(
                    s,
                    "POST /v1/episodes HTTP/1.1\r\nHost: x\r\n{a}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{rows}",
                    rows.len()
                )
                .expect("send");
                s
            })
            .collect();
        // Long enough for all 32 episodes to have run to their timeout, had nothing stopped
        // them.
        std::thread::sleep(std::time::Duration::from_secs(4));
        let (_, _, body) = http_with(&addr, "GET", "/metrics", &[OPS], "");
        let text = String::from_utf8_lossy(&body).into_owned();
        let used = metric_value(&text, "rollbox_tenant_sandbox_seconds_total{tenant=\"a\"}");
        eprintln!("8 requests of 4 spinning episodes on 2 s a minute: {used:.2} s used");
        // 2 s, and what the running episodes used before each saw it spent: a few ticks each
        // on a quiet machine, more on a loaded one, so the time itself is only printed.
        assert!(used >= 1.9, "{used} s of a's 2 s a minute");
        let (code, _, body) = http_with(&addr, "POST", "/v1/episodes", &[a], &rows);
        assert_eq!(code, 429, "{}", String::from_utf8_lossy(&body));
        // What stopped them: running episodes were stopped for the tenant's spent time (had
        // the time been checked only at admission, all 32 would have run to their timeout).
        let mut stopped = 0;
        for mut s in flood {
            s.set_read_timeout(Some(std::time::Duration::from_secs(120)))
                .expect("timeout");
            // The batch's header counts its episodes by outcome (JSON in a JSON string).
            let answer = read_response(&mut s);
            let key = "\\\"limit_exceeded\\\":";
            for (at, _) in answer.match_indices(key) {
                let digits = answer[at + key.len()..]
                    .chars()
                    .take_while(char::is_ascii_digit);
                stopped += digits.collect::<String>().parse::<usize>().unwrap_or(0);
            }
        }
        eprintln!("{stopped} of the 32 episodes stopped for the tenant's spent time");
        assert!(stopped >= 1, "no episode was stopped for the spent time");
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// The noisy neighbour with episodes (issue 38): tenant `a` floods `/v1/episodes` with a
/// workflow that fills its 64 MiB and spins to its 1 s timeout, from four connections, while
/// `b` scores one completion at a time (`b` may run no workflow: its own episodes are 403).
/// `a`'s `max_episodes_in_flight = 1` keeps its episodes to one core of the two, its
/// `episode_cpus` pins them to the last core (with more than one) and sets it apart from the
/// server's other threads, and its sandboxes run on its own threads, so `b` never sees an error and its p99 stays within 1.5x its p99 alone
/// plus 50 ms, for the other tests of this file running beside it (measured on a quiet
/// machine, debug build: 0.7–1.2 ms alone, 1.8–3.1 ms beside the flood). When `a`'s clients
/// leave, its episodes stop.
#[test]
fn serve_keeps_a_tenants_episode_flood_off_anothers_rewards() {
    let tmp = tempfile::tempdir().expect("tmp");
    let allowed = cores_allowed("self");
    let last = allowed
        .rsplit([',', '-'])
        .next()
        .expect("a core")
        .to_string();
    let pinned = allowed != last;
    let pin = if pinned {
        format!("\nepisode_cpus = \"{last}\"")
    } else {
        String::new()
    };
    let file = two_tenants(
        tmp.path(),
        &format!(
            "max_episodes_in_flight = 1\nmax_requests_in_flight = 8\nmax_memory = \"64MiB\"{pin}"
        ),
        "workflows = []",
    );
    let (mut child, addr) = start_serve(
        &[
            "--tenants",
            file.to_str().expect("path"),
            "--workflow",
            c::ADV_LOOP,
            "--timeout",
            "1s",
            "--reward",
            "math=math",
            "--engine",
            "embedded",
        ],
        tmp.path(),
    );
    let result = std::panic::catch_unwind(|| {
        let (a, b) = ("Authorization: Bearer key-a", "Authorization: Bearer key-b");
        let one = json!({"reward": "math", "items": [{"completion": "\\boxed{2}", "answer": "2"}]})
            .to_string();
        let p99 = |n: usize| -> (std::time::Duration, Vec<u16>) {
            let mut took = Vec::with_capacity(n);
            let mut codes = Vec::new();
            for _ in 0..n {
                let start = std::time::Instant::now();
                let (code, _, _) = http_with(&addr, "POST", "/v1/rewards", &[b], &one);
                took.push(start.elapsed());
                codes.push(code);
            }
            took.sort();
            (took[(n * 99).div_ceil(100) - 1], codes)
        };
        // `b` may run no workflow (its `workflows` is empty): its episodes are refused.
        let (code, _, body) = http_with(
            &addr,
            "POST",
            "/v1/episodes",
            &[b],
            &json!({"rows": [{"x": 1}]}).to_string(),
        );
        let text = String::from_utf8_lossy(&body).into_owned();
        assert_eq!(code, 403, "{text}");
        assert!(
            text.contains("may not run the workflow `default`"),
            "{text}"
        );
        let _ = p99(20); // warm
        let (alone, codes) = p99(100);
        assert!(codes.iter().all(|&c| c == 200), "{codes:?}");
        // Four requests of 8 rows x 4 samples, each episode filling its 64 MiB and spinning to
        // its 1 s timeout: far more than the test lasts. They are sent and left open.
        let row = json!({"messages": [{"role": "user", "content": "x"}], "fill": true});
        let rows = json!({"rows": vec![row; 8]}).to_string();
        let flood: Vec<std::net::TcpStream> = (0..4)
            .map(|_| {
                use std::io::Write;
                let mut s = std::net::TcpStream::connect(&addr).expect("connect");
                write!(
                    s,
                    "POST /v1/episodes HTTP/1.1\r\nHost: x\r\n{a}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{rows}",
                    rows.len()
                )
                .expect("send");
                s
            })
            .collect();
        std::thread::sleep(std::time::Duration::from_millis(1500));
        let (flooded, codes) = p99(100);
        assert!(
            codes.iter().all(|&c| c == 200),
            "b never sees an error: {codes:?}"
        );
        let (_, _, body) = http_with(&addr, "GET", "/metrics", &[OPS], "");
        let text = String::from_utf8_lossy(&body).into_owned();
        // The p99s are figures, printed, not asserted (load on the machine moves them, issue
        // 52); scripts/serve_load.py measures the 1.5x goal. What is asserted is what makes
        // it hold: the cores the threads run on (below) and that b never sees an error.
        eprintln!("b's p99 alone {alone:?}, beside a's episode flood {flooded:?}");
        let used = metric_value(&text, "rollbox_tenant_sandbox_seconds_total{tenant=\"a\"}");
        assert!(used >= 1.0, "a's spinning episodes ran: {used} s");
        assert!(
            text.contains("rollbox_tenant_episodes_in_flight{tenant=\"a\"} 1\n"),
            "a's one episode at a time: {text}"
        );
        // Each tenant's sandboxes ran on threads of its own: a's episodes at nice 10, one on
        // its pinned core (with more than one core), else one per core; b's calls at the
        // server's priority, one per core but a's, as every other thread of the server (its
        // workers, the engine's, the epoch ticker): a's core is set apart for its episodes.
        let cores = cores_in(&allowed);
        let others: Vec<usize> = cores
            .iter()
            .copied()
            .filter(|c| !pinned || c.to_string() != last)
            .collect();
        assert_eq!(
            threads_named(child.id(), "rollbox-tenant"),
            vec![0; others.len()]
        );
        let episodes = if pinned { 1 } else { cores.len() };
        assert_eq!(
            threads_named(child.id(), "rollbox-episode"),
            vec![10; episodes]
        );
        // The reaper (teardown of large reward stores) started with the server, on its cores
        // (checked below with every other thread).
        assert_eq!(threads_named(child.id(), "rollbox-reaper"), vec![0]);
        let task = std::fs::read_dir(format!("/proc/{}/task", child.id())).expect("threads");
        for t in task.flatten() {
            let comm = std::fs::read_to_string(t.path().join("comm")).unwrap_or_default();
            let tid = t.file_name().to_string_lossy().into_owned();
            let on = cores_allowed(&format!("{}/task/{tid}", child.id()));
            match comm.trim_end() {
                "rollbox-episode" if pinned => assert_eq!(on, last, "episode thread {tid}"),
                "rollbox-episode" => {}
                other => assert_eq!(cores_in(&on), others, "thread {tid} ({other})"),
            }
        }
        // a's clients go away: its episodes stop (each would spin to its 1 s timeout, and
        // the four requests' 128 episodes would take two minutes at one at a time).
        drop(flood);
        let in_flight = || {
            let (_, _, body) = http_with(&addr, "GET", "/metrics", &[OPS], "");
            String::from_utf8_lossy(&body)
                .lines()
                .find_map(|l| l.strip_prefix("rollbox_tenant_episodes_in_flight{tenant=\"a\"} "))
                .and_then(|v| v.parse::<u64>().ok())
                .expect("a's gauge")
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while in_flight() > 0 {
            assert!(
                std::time::Instant::now() < deadline,
                "a's episodes still run 60 s after its clients left"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        std::thread::sleep(std::time::Duration::from_millis(1500));
        assert_eq!(in_flight(), 0, "no episode of a's started since");
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// Workflows a tenant's request brings (issue 38): a file beneath its `component_dirs`, read
/// through no symbolic link, compiled once and named afterwards by any tenant allowed its
/// hash; every other path or hash is refused, naming the setting.
#[test]
fn serve_runs_workflows_tenants_bring_by_path_or_hash() {
    use sha2::Digest;
    let tmp = tempfile::tempdir().expect("tmp");
    let team = tmp.path().join("team-a");
    std::fs::create_dir_all(team.join("sub")).expect("dir");
    let echo = std::fs::read(c::WORKFLOW_ECHO).expect("echo");
    let sha = hex::encode(sha2::Sha256::digest(&echo));
    std::fs::write(team.join("sub/echo.wasm"), &echo).expect("copy");
    std::fs::write(tmp.path().join("outside.wasm"), &echo).expect("copy");
    std::fs::write(team.join("notes.wasm"), b"not a component").expect("write");
    std::os::unix::fs::symlink(tmp.path().join("outside.wasm"), team.join("link.wasm"))
        .expect("link");
    std::os::unix::fs::symlink(team.join("sub"), team.join("linked-dir")).expect("link");
    let file = two_tenants(
        tmp.path(),
        &format!("component_dirs = [\"{}\"]", team.display()),
        &format!("component_sha256 = [\"{}\"]", sha.to_uppercase()),
    );
    let (mut child, addr) = start_serve(
        &[
            "--tenants",
            file.to_str().expect("path"),
            "--workflow",
            c::WORKFLOW_RLVR,
        ],
        tmp.path(),
    );
    let result = std::panic::catch_unwind(|| {
        let (a, b) = ("Authorization: Bearer key-a", "Authorization: Bearer key-b");
        let run = |key: &str, workflow: &str| -> (u16, String, Vec<u8>) {
            let body = json!({
                "rows": [{"input_ids": [1, 2, 3], "answer": "4"}],
                "workflow": workflow,
                "n_samples": 1,
                "config": {"max_new_tokens": 2}
            });
            let (code, _, body) =
                http_with(&addr, "POST", "/v1/episodes", &[key], &body.to_string());
            (code, String::from_utf8_lossy(&body).into_owned(), body)
        };
        let by_hash = format!("sha256:{sha}");
        // Not compiled yet: b must wait for a file to be named.
        let (code, text, _) = run(b, &by_hash);
        assert_eq!(code, 404, "{text}");
        assert!(text.contains("name its file by path"), "{text}");
        let path = team.join("sub/echo.wasm").display().to_string();
        let (code, text, body) = run(a, &path);
        assert_eq!(code, 200, "{text}");
        let batch = tmp.path().join("brought.safetensors");
        std::fs::write(&batch, &body).expect("write");
        let loaded: Value = rollbox_tests::check_safetensors(&batch);
        assert_eq!(loaded["metadata"]["workflow"], path.as_str());
        assert_eq!(loaded["metadata"]["workflow_sha256"], sha.as_str());
        assert_eq!(loaded["tensors"]["input_ids"]["shape"][0], 1);
        // Now b may run it by its hash (listed in upper case: any case is one hash).
        let (code, text, body) = run(b, &by_hash);
        assert_eq!(code, 200, "{text}");
        std::fs::write(&batch, &body).expect("write");
        let loaded: Value = rollbox_tests::check_safetensors(&batch);
        assert_eq!(loaded["metadata"]["workflow_sha256"], sha.as_str());
        for (key, workflow, status, says) in [
            (a, by_hash.clone(), 403, "component_sha256"),
            (b, path.clone(), 403, "component_dirs (none)"),
            (
                a,
                tmp.path().join("outside.wasm").display().to_string(),
                403,
                "beneath one of its component_dirs",
            ),
            (
                a,
                format!("{}/../outside.wasm", team.display()),
                403,
                "without `..`",
            ),
            (
                a,
                team.join("link.wasm").display().to_string(),
                422,
                "symbolic link",
            ),
            (
                a,
                team.join("linked-dir/echo.wasm").display().to_string(),
                422,
                "symbolic link",
            ),
            (
                a,
                team.join("missing.wasm").display().to_string(),
                422,
                "cannot open",
            ),
            (
                a,
                team.join("notes.wasm").display().to_string(),
                422,
                "cannot be loaded",
            ),
            (
                a,
                team.display().to_string(),
                403,
                "beneath one of its component_dirs",
            ),
        ] {
            let (code, text, _) = run(key, &workflow);
            assert_eq!(code, status, "{workflow}: {text}");
            assert!(text.contains(says), "{workflow}: {text}");
        }
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// Issue 52: one tenant's churn of brought workflows cannot evict another's. `b` brings its
/// workflow by path and names it by hash afterwards; `a` then brings 20 different workflows
/// (one component with 20 different custom sections), each compiled and kept: `a` keeps 8 of
/// its own at most, dropping its own oldest, and `b`'s is still there (with one cache shared by
/// every tenant, the 20 evicted it and `b`'s next request was 404).
#[test]
fn serve_keeps_one_tenants_workflows_through_anothers_churn() {
    use sha2::Digest;
    let tmp = tempfile::tempdir().expect("tmp");
    let (dir_a, dir_b) = (tmp.path().join("team-a"), tmp.path().join("team-b"));
    std::fs::create_dir_all(&dir_a).expect("dir");
    std::fs::create_dir_all(&dir_b).expect("dir");
    let echo = std::fs::read(c::WORKFLOW_ECHO).expect("echo");
    let sha = hex::encode(sha2::Sha256::digest(&echo));
    std::fs::write(dir_b.join("echo.wasm"), &echo).expect("copy");
    // A custom section (id 0: size, name, bytes) at the end of a component changes its hash
    // and nothing else.
    for i in 0..20u8 {
        let mut variant = echo.clone();
        variant.extend([0, 5, 3, b'r', b'b', b'x', i]);
        std::fs::write(dir_a.join(format!("echo-{i}.wasm")), &variant).expect("variant");
    }
    let file = two_tenants(
        tmp.path(),
        &format!("component_dirs = [\"{}\"]", dir_a.display()),
        &format!(
            "component_dirs = [\"{}\"]\ncomponent_sha256 = [\"{sha}\"]",
            dir_b.display()
        ),
    );
    let (mut child, addr) = start_serve(
        &[
            "--tenants",
            file.to_str().expect("path"),
            "--workflow",
            c::WORKFLOW_ECHO,
            "--engine",
            "embedded",
        ],
        tmp.path(),
    );
    let result = std::panic::catch_unwind(|| {
        let (a, b) = ("Authorization: Bearer key-a", "Authorization: Bearer key-b");
        let run = |key: &str, workflow: &str| -> (u16, String) {
            let body = json!({"rows": [{"x": 1}], "workflow": workflow, "n_samples": 1});
            let (code, _, body) =
                http_with(&addr, "POST", "/v1/episodes", &[key], &body.to_string());
            (code, String::from_utf8_lossy(&body).into_owned())
        };
        let by_hash = format!("sha256:{sha}");
        let (code, text) = run(b, &dir_b.join("echo.wasm").display().to_string());
        assert_eq!(code, 200, "{text}");
        assert_eq!(run(b, &by_hash).0, 200, "b's own, by hash");
        for i in 0..20 {
            let path = dir_a.join(format!("echo-{i}.wasm")).display().to_string();
            let (code, text) = run(a, &path);
            assert_eq!(code, 200, "a's workflow {i}: {text}");
        }
        let (code, text) = run(b, &by_hash);
        assert_eq!(code, 200, "b's workflow survived a's churn: {text}");
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// A tenant's episodes reach its allowed rewards and tools and those its request brings (by
/// path beneath its `component_dirs` or by hash), under the names the request gives them, in
/// place of a registered one of that name; `/v1/rewards` and `/get_reward` score with a reward
/// brought the same way. Another tenant reaches none of them unless it names them too.
#[test]
fn serve_episodes_reach_the_rewards_and_tools_tenants_bring() {
    use sha2::Digest;
    let tmp = tempfile::tempdir().expect("tmp");
    let team = tmp.path().join("team-a");
    std::fs::create_dir_all(&team).expect("dir");
    let constant = std::fs::read(c::REWARD_CONST).expect("const");
    let const_sha = hex::encode(sha2::Sha256::digest(&constant));
    std::fs::write(team.join("const.wasm"), &constant).expect("copy");
    std::fs::copy(c::TOOL_ECHO, team.join("echo.wasm")).expect("copy");
    let file = two_tenants(
        tmp.path(),
        &format!(
            "component_dirs = [\"{}\"]\nrewards = []\ntools = []",
            team.display()
        ),
        &format!("component_sha256 = [\"{const_sha}\"]\ntools = [\"calc\"]"),
    );
    let caller = format!("caller={}", c::TOOL_CALLER);
    let calc = format!("calc={}", c::TOOL_CALCULATOR);
    let (mut child, addr) = start_serve(
        &[
            "--tenants",
            file.to_str().expect("path"),
            "--workflow",
            c::WORKFLOW_RLVR,
            "--extra-workflow",
            &caller,
            "--reward",
            "math=math",
            "--tool",
            &calc,
        ],
        tmp.path(),
    );
    let result = std::panic::catch_unwind(|| {
        let (a, b) = ("Authorization: Bearer key-a", "Authorization: Bearer key-b");
        let batch = tmp.path().join("batch.safetensors");
        let run = |key: &str, request: Value| -> (u16, String, Value) {
            let (code, _, body) =
                http_with(&addr, "POST", "/v1/episodes", &[key], &request.to_string());
            let text = String::from_utf8_lossy(&body).into_owned();
            if code != 200 {
                return (code, text, Value::Null);
            }
            std::fs::write(&batch, &body).expect("write");
            (code, text, rollbox_tests::check_safetensors(&batch))
        };
        let stats = |loaded: &Value| -> Value {
            serde_json::from_str(loaded["metadata"]["stats"].as_str().expect("stats"))
                .expect("JSON")
        };
        let path = |name: &str| team.join(name).display().to_string();
        let rlvr = |rewards: Value| {
            json!({
                "rows": [{"messages": [{"role": "user", "content": "1?"}], "answer": "1", "value": 0.25}],
                "n_samples": 1,
                "config": {"gconfig": {"max_new_tokens": 2}},
                "rewards": rewards,
            })
        };
        // a may use no registered reward; the `math` it brings scores instead.
        let (code, text, loaded) = run(a, rlvr(json!({"math": path("const.wasm")})));
        assert_eq!(code, 200, "{text}");
        assert_eq!(
            loaded["tensors"]["rewards"]["data"],
            json!([0.25]),
            "{loaded}"
        );
        let (code, text, loaded) = run(a, rlvr(json!({})));
        assert_eq!(code, 200, "{text}");
        assert_eq!(stats(&loaded)["episodes"]["guest_error"], 1, "{loaded}");
        // b may use the registered math: a's brought one is a's alone.
        let (code, text, loaded) = run(b, rlvr(json!({})));
        assert_eq!(code, 200, "{text}");
        assert_eq!(stats(&loaded)["episodes"]["accepted"], 1, "{loaded}");
        assert_ne!(loaded["tensors"]["rewards"]["data"], json!([0.25]));
        // Brought by hash, listed in b's component_sha256, it takes `math` over for b too.
        let by_hash = format!("sha256:{const_sha}");
        let (code, text, loaded) = run(b, rlvr(json!({"math": by_hash})));
        assert_eq!(code, 200, "{text}");
        assert_eq!(
            loaded["tensors"]["rewards"]["data"],
            json!([0.25]),
            "{loaded}"
        );

        let call = |key: &str, tool: &str, tools: Value| -> String {
            let request = json!({
                "rows": [{"tool": tool, "args": {"x": 1}}],
                "workflow": "caller",
                "n_samples": 1,
                "tools": tools,
            });
            let (code, text, loaded) = run(key, request);
            assert_eq!(code, 200, "{text}");
            loaded["metadata"]["trajectories"].to_string()
        };
        let echoed = call(a, "echo", json!({"echo": path("echo.wasm")}));
        assert!(echoed.contains(r#"echo:{\\\"x\\\":1}"#), "{echoed}");
        let refused = call(a, "calc", json!({"echo": path("echo.wasm")}));
        assert!(
            refused.contains("no tool named `calc`") && refused.contains("registered: echo)"),
            "{refused}"
        );
        let unknown = call(b, "echo", json!({}));
        assert!(
            unknown.contains("no tool named `echo`") && unknown.contains("registered: calc)"),
            "{unknown}"
        );

        // The reward endpoints take a brought reward in place of a name.
        let score = json!({"reward": path("const.wasm"), "items": [
            {"completion": "x", "row": {"value": 0.5}}
        ]});
        let (code, _, body) = http_with(&addr, "POST", "/v1/rewards", &[a], &score.to_string());
        let answer: Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(code, 200, "{answer}");
        assert_eq!(answer["scores"], json!([0.5]), "{answer}");
        assert_eq!(answer["reward"], path("const.wasm"));
        let query = format!("/get_reward?reward=sha256:{const_sha}");
        let (code, _, body) = http_with(
            &addr,
            "POST",
            &query,
            &[b],
            &json!({"query": ["x"]}).to_string(),
        );
        let answer: Value = serde_json::from_slice(&body).expect("JSON");
        assert_eq!(code, 200, "{answer}");
        assert_eq!(answer["rewards"], json!([1.0]), "{answer}");
        let (code, _, body) = http_with(
            &addr,
            "POST",
            &query,
            &[a],
            &json!({"query": ["x"]}).to_string(),
        );
        assert_eq!(code, 403, "{}", String::from_utf8_lossy(&body));

        // Refused before anything runs.
        let nine: serde_json::Map<String, Value> = (0..9)
            .map(|i| (format!("r{i}"), Value::from(path("const.wasm"))))
            .collect();
        for (key, rewards, status, says) in [
            (a, json!({"math": "const.wasm"}), 400, "absolute path"),
            (
                a,
                json!({"bad name": path("const.wasm")}),
                400,
                "maps a name",
            ),
            (a, Value::Object(nine), 400, "at most 8"),
            (
                a,
                json!({"math": path("echo.wasm")}),
                422,
                "cannot be loaded",
            ),
            (
                b,
                json!({"math": path("const.wasm")}),
                403,
                "component_dirs (none)",
            ),
        ] {
            let (code, text, _) = run(key, rlvr(rewards.clone()));
            assert_eq!(code, status, "{rewards}: {text}");
            assert!(text.contains(says), "{rewards}: {text}");
        }
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// The cores `/proc/{proc}` may run on, as Linux lists them (`0-1`).
fn cores_allowed(proc: &str) -> String {
    let status = std::fs::read_to_string(format!("/proc/{proc}/status")).expect("status");
    status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
        .expect("Cpus_allowed_list")
        .trim()
        .to_string()
}

/// The cores of a list as Linux writes one (`0-2,5`).
fn cores_in(list: &str) -> Vec<usize> {
    list.split(',')
        .flat_map(|part| {
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            let core = |s: &str| s.trim().parse::<usize>().expect("a core number");
            core(lo)..=core(hi)
        })
        .collect()
}

/// The nice values of process `pid`'s threads called `name`.
fn threads_named(pid: u32, name: &str) -> Vec<i64> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .expect("the server's threads")
        .filter_map(|t| {
            let dir = t.ok()?.path();
            let comm = std::fs::read_to_string(dir.join("comm")).ok()?;
            let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
            // Fields after the name in parentheses; nice is the 19th field of the line.
            let after = stat.rsplit_once(')')?.1;
            let nice = after.split_whitespace().nth(16)?.parse().ok()?;
            (comm.trim_end() == name).then_some(nice)
        })
        .collect()
}

/// SIGTERM drains: no new connections, the request in flight is answered in full, then the
/// server exits 0; past `--drain-timeout` what is still running is cancelled and it exits.
#[test]
fn serve_drains_on_sigterm() {
    let tmp = tempfile::tempdir().expect("tmp");
    let spin = format!("spin={},timeout=2s,retries=0", c::REWARD_SPIN);
    let sample = json!({"query": ["x"], "prompts": [""], "labels": ["1"]}).to_string();
    for (drain, answered) in [("30s", true), ("200ms", false)] {
        let (mut child, addr) = start_serve(
            &[
                "--reward",
                &spin,
                "--engine",
                "embedded",
                "--drain-timeout",
                drain,
            ],
            tmp.path(),
        );
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            assert_eq!(http(&addr, "GET", "/readyz", "").0, 200);
            let held = {
                let (addr, sample) = (addr.clone(), sample.clone());
                std::thread::spawn(move || {
                    use std::io::{Read, Write};
                    let mut s = std::net::TcpStream::connect(&addr).expect("connect");
                    write!(
                        s,
                        "POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{sample}",
                        sample.len()
                    )
                    .expect("send");
                    let mut raw = Vec::new();
                    let _ = s.read_to_end(&mut raw);
                    String::from_utf8_lossy(&raw).into_owned()
                })
            };
            // The reward spins for 2 s: signal while it is in flight.
            std::thread::sleep(std::time::Duration::from_millis(500));
            let start = std::time::Instant::now();
            let kill = Command::new("kill")
                .args(["-TERM", &child.id().to_string()])
                .status()
                .expect("kill");
            assert!(kill.success());
            std::thread::sleep(std::time::Duration::from_millis(100));
            assert!(
                std::net::TcpStream::connect(&addr).is_err(),
                "a new connection while draining"
            );
            let answer = held.join().expect("held");
            let status = child.wait().expect("exit");
            assert!(status.success(), "{status}");
            if answered {
                assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
                assert!(answer.contains("rewards"), "{answer}");
            } else {
                assert!(answer.is_empty(), "cancelled, not answered: {answer}");
                eprintln!("drained by cancelling in {:?}", start.elapsed());
            }
        }));
        let _ = child.kill();
        let _ = child.wait();
        if let Err(e) = result {
            std::panic::resume_unwind(e);
        }
    }
}

/// `--tls-cert`/`--tls-key`: `curl --cacert` with the self-signed certificate gets answers;
/// curl without it refuses the certificate, and plain HTTP to the port gets no answer.
#[test]
fn serve_speaks_tls_with_the_given_certificate() {
    use std::io::BufRead;
    let tmp = tempfile::tempdir().expect("tmp");
    let (cert, key) = (tmp.path().join("cert.pem"), tmp.path().join("key.pem"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=localhost"])
        .args([
            "-addext",
            "subjectAltName=IP:127.0.0.1,DNS:localhost",
            "-keyout",
        ])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("openssl");
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );
    let mut child = Command::new(env!("CARGO_BIN_EXE_rollbox"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--engine",
            "embedded",
            "--tls-cert",
        ])
        .arg(&cert)
        .arg("--tls-key")
        .arg(&key)
        .env("ROLLBOX_CACHE_DIR", tmp.path())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("spawn serve");
    let mut line = String::new();
    std::io::BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("listening line");
    let result = std::panic::catch_unwind(|| {
        let addr = line
            .trim()
            .strip_prefix("listening on https://")
            .unwrap_or_else(|| panic!("{line:?}"))
            .to_string();
        let curl = |extra: &[&str], path: &str| {
            Command::new("curl")
                .args(["-sS", "--max-time", "20"])
                .args(extra)
                .arg(format!("https://{addr}{path}"))
                .output()
                .expect("curl")
        };
        let ok = curl(&["--cacert", cert.to_str().expect("path")], "/healthz");
        assert!(
            ok.status.success(),
            "{}",
            String::from_utf8_lossy(&ok.stderr)
        );
        assert_eq!(ok.stdout, b"ok");
        let unknown = curl(&[], "/healthz");
        assert!(
            !unknown.status.success(),
            "a certificate curl does not trust"
        );
        let plain = raw_exchange(&addr, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n");
        assert!(!plain.contains("200 OK"), "{plain}");
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }

    // A key that is not the certificate's, and a file with no certificate, are refused at start.
    let other = tmp.path().join("other.pem");
    let made = Command::new("openssl")
        .args([
            "genpkey",
            "-algorithm",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-out",
        ])
        .arg(&other)
        .output()
        .expect("openssl");
    assert!(made.status.success());
    for (c, k, says) in [
        (&cert, &other, "do not go together"),
        (&key, &key, "no PEM CERTIFICATE"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_rollbox"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--engine",
                "embedded",
                "--tls-cert",
            ])
            .arg(c)
            .arg("--tls-key")
            .arg(k)
            .output()
            .expect("serve");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && err.contains(says), "{says}: {err}");
    }
}

/// Noisy neighbour: tenant `b` floods the sandbox with 32 reward calls that spin to their
/// 300 ms timeout (~5 s of the 2-place pool); tenant `a`'s call, and then a batch of 16, sent
/// after them, are served in their turn (behind one of `b`'s calls, the pool's time going to
/// the tenant that used the least of it), not behind `b`'s whole queue (4.4 s without the
/// turns), and neither sees a 5xx. The bounds leave room for the spinning guests slowing the
/// server's own threads on 2 cores.
#[test]
fn serve_takes_tenants_in_turn_for_the_sandbox() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = two_tenants(tmp.path(), "", "");
    let spin = format!("spin={},timeout=300ms,retries=0", c::REWARD_SPIN);
    let (mut child, addr) = start_serve(
        &[
            "--tenants",
            file.to_str().expect("path"),
            "--reward",
            "math=math",
            "--reward",
            &spin,
            "--engine",
            "embedded",
        ],
        tmp.path(),
    );
    let result = std::panic::catch_unwind(|| {
        let (a, b) = ("Authorization: Bearer key-a", "Authorization: Bearer key-b");
        let one = json!({"reward": "math", "items": [{"completion": "\\boxed{2}", "answer": "2"}]})
            .to_string();
        let alone = std::time::Instant::now();
        let (code, _, out) = http_with(&addr, "POST", "/v1/rewards", &[a], &one);
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&out));
        let alone = alone.elapsed();

        let flood =
            json!({"reward": "spin", "items": vec![json!({"completion": "x"}); 32]}).to_string();
        let flood_start = std::time::Instant::now();
        let flooder = {
            let (addr, flood) = (addr.clone(), flood.clone());
            std::thread::spawn(move || {
                let (code, _, out) = http_with(&addr, "POST", "/v1/rewards", &[b], &flood);
                (code, out, flood_start.elapsed())
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(400));
        let start = std::time::Instant::now();
        let (code, _, out) = http_with(&addr, "POST", "/v1/rewards", &[a], &one);
        let waited = start.elapsed();
        // Not a clock bound (load moves those, issue 52): a's call is answered while b's
        // queue of 32 300 ms spins (4.8 s of wall time on two slots, whatever the load) is
        // still being worked through, so it did not wait behind it.
        let flood_running = !flooder.is_finished();
        let v: Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!((code, &v["scores"]), (200, &json!([1.0])), "{v}");
        // A batch of 16 quick calls too: the pool's time goes to the tenant that has used the
        // least of it, so `a`'s calls do not alternate with `b`'s 300 ms ones.
        let sixteen = json!({"reward": "math", "items": vec![json!({"completion": "\\boxed{2}", "answer": "2"}); 16]})
            .to_string();
        let start = std::time::Instant::now();
        let (code, _, out) = http_with(&addr, "POST", "/v1/rewards", &[a], &sixteen);
        let batch_waited = start.elapsed();
        let flood_running_after_batch = !flooder.is_finished();
        assert_eq!(code, 200, "{}", String::from_utf8_lossy(&out));
        let (code, out, flood_took) = flooder.join().expect("flooder");
        let v: Value = serde_json::from_slice(&out).expect("JSON");
        assert_eq!(code, 200, "{v}");
        assert_eq!(v["results"][31]["fault"]["kind"], "timeout", "{v}");
        eprintln!(
            "a alone {alone:?}; a during b's flood {waited:?}, 16 calls {batch_waited:?}; b's 32 spinning calls took {flood_took:?}"
        );
        assert!(
            flood_running,
            "a waited {waited:?}, until b's queue was done"
        );
        assert!(
            flood_running_after_batch,
            "a's 16 calls took {batch_waited:?}, until b's queue was done"
        );
        assert!(
            flood_took > std::time::Duration::from_secs(4),
            "{flood_took:?}"
        );
    });
    let _ = child.kill();
    let _ = child.wait();
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}

/// A tenant's caps take any limit key (`limits = {...}` in the tenants file) and bound the
/// registered rewards and tools its episodes reach, not only the episodes: tenant a's fuel cap
/// stops the registered `spin` tool its episode calls out of fuel, while b's call of the same
/// tool runs to the tool's own timeout.
#[test]
fn serve_caps_what_a_tenants_episodes_call_by_any_limit_key() {
    let tmp = tempfile::tempdir().expect("tmp");
    let file = two_tenants(tmp.path(), "limits = { fuel = 50000000 }", "");
    let caller = format!("caller={}", c::TOOL_CALLER);
    // Fuel on the tool turns metering on; 10^12 is far more than spinning 1 s takes.
    let spin = format!("spin={},fuel=1000000000000,timeout=1s", c::TOOL_SPIN);
    let (mut child, addr) = start_serve(
        &[
            "--tenants",
            file.to_str().expect("path"),
            "--workflow",
            c::TOOL_CALLER,
            "--extra-workflow",
            &caller,
            "--tool",
            &spin,
        ],
        tmp.path(),
    );
    let result = std::panic::catch_unwind(|| {
        let batch = tmp.path().join("batch.safetensors");
        let run = |key: &str| -> Value {
            let request = json!({"rows": [{"tool": "spin", "args": {}}], "n_samples": 1});
            let (code, _, body) =
                http_with(&addr, "POST", "/v1/episodes", &[key], &request.to_string());
            assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
            std::fs::write(&batch, &body).expect("write");
            let loaded = rollbox_tests::check_safetensors(&batch);
            let lines: Value = serde_json::from_str(
                loaded["metadata"]["trajectories"]
                    .as_str()
                    .expect("trajectories"),
            )
            .expect("JSON");
            lines[0]["metadata"]["error"].clone()
        };
        let a = run("Authorization: Bearer key-a");
        let a = a.as_str().unwrap_or_default().to_lowercase();
        assert!(a.contains("fuel"), "a's fuel cap stops the tool: {a}");
        let b = run("Authorization: Bearer key-b");
        let b = b.as_str().unwrap_or_default().to_lowercase();
        assert!(
            b.contains("timeout") || b.contains("timed out"),
            "b's call runs to the tool's timeout: {b}"
        );
    });
    child.kill().expect("stop serve");
    child.wait().expect("reaped");
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
