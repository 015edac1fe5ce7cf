//! The `rollbox` binary end to end: `inspect`, and `run` of the rlvr workflow with the host
//! tokenizer, the replay engine and the sandboxed math reward, as a user runs it.

use std::path::PathBuf;
use std::process::Command;

use rollbox_tests::components as c;
use rollbox_tokenizer::{ChatOptions, HostTokenizer};
use serde_json::{Value, json};

fn model() -> PathBuf {
    rollbox_tests::model_path()
}

fn rollbox(args: &[&str], cache: &std::path::Path) -> (bool, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rollbox"))
        .args(args)
        .env("ROLLBOX_CACHE_DIR", cache)
        .output()
        .expect("rollbox runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn inspect_names_the_world_and_refuses_the_wrong_one() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (ok, out, _) = rollbox(&["inspect", c::WORKFLOW_RLVR], tmp.path());
    assert!(ok);
    assert!(
        out.contains("world    rollbox:workflow/workflow@0.1.0"),
        "{out}"
    );
    assert!(out.contains("rollbox:workflow/tokenizer@0.1.0"), "{out}");
    let (ok, _, err) = rollbox(&["run", c::REWARD_MATH], tmp.path());
    assert!(!ok);
    assert!(
        err.contains("is this a reward component? load it with --reward"),
        "{err}"
    );
}

#[test]
fn run_rlvr_with_tokenizer_replay_engine_and_math_reward() {
    let tmp = tempfile::tempdir().expect("tmp");
    let tok = HostTokenizer::load(&model()).expect("run scripts/fetch-model.sh");
    let messages = json!([{"role": "user", "content": "What is 6 * 7?"}]);
    let options = ChatOptions {
        extra: Some(json!({"enable_thinking": false})),
        ..ChatOptions::default()
    };
    let prompt = tok
        .apply_chat_template(&messages, &options)
        .expect("prompt");
    let output = tok
        .encode("6 * 7 = 42, so \\boxed{42}<|im_end|>", false)
        .expect("output");
    let replay = tmp.path().join("replay.jsonl");
    let record = json!({"input_ids": prompt, "output_tokens": output,
        "output_logprobs": vec![-0.5f32; output.len()], "stop_reason": "stop"});
    std::fs::write(&replay, record.to_string()).expect("write replay");
    let data = json!({"messages": messages, "answer": "42"}).to_string();
    let model_path = model().display().to_string();
    let engine = format!("replay:{}", replay.display());
    let reward = format!("math={}", c::REWARD_MATH);
    let (ok, out, err) = rollbox(
        &[
            "run",
            c::WORKFLOW_RLVR,
            "--tokenizer",
            &model_path,
            "--engine",
            &engine,
            "--reward",
            &reward,
            "--config",
            r#"{"reward": "math"}"#,
            "--data",
            &data,
            "--json",
        ],
        tmp.path(),
    );
    assert!(ok, "{out}\n{err}");
    let v: Value = serde_json::from_str(&out).expect("--json prints JSON");
    assert_eq!(v["summary"]["outcome"], "accepted");
    let names: Vec<&str> = v["tensors"]
        .as_array()
        .expect("tensors")
        .iter()
        .map(|t| t["name"].as_str().expect("name"))
        .collect();
    assert_eq!(
        names,
        [
            "input_ids",
            "loss_mask",
            "logprobs",
            "versions",
            "attention_mask",
            "rewards",
            "is_truncated"
        ]
    );
    assert_eq!(
        v["tensors"][0]["shape"],
        json!([1, prompt.len() + output.len()])
    );
    assert_eq!(v["stats"], json!([["reward", 1.0]]));
    assert_eq!(v["reward_calls"][0]["name"], "math");

    // --out writes the tensors as safetensors that Python loads unchanged.
    let batch = tmp.path().join("episode.safetensors");
    let batch_arg = batch.display().to_string();
    let (ok, out, err) = rollbox(
        &[
            "run",
            c::WORKFLOW_RLVR,
            "--tokenizer",
            &model_path,
            "--engine",
            &engine,
            "--reward",
            &reward,
            "--config",
            r#"{"reward": "math"}"#,
            "--data",
            &data,
            "--out",
            &batch_arg,
        ],
        tmp.path(),
    );
    assert!(ok, "{out}\n{err}");
    let py = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../scripts/check_safetensors.py"
        ))
        .arg(&batch)
        .output()
        .expect("python3 runs (.ci/run installs safetensors and numpy)");
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    let loaded: Value = serde_json::from_slice(&py.stdout).expect("JSON from check_safetensors.py");
    let t = &loaded["tensors"];
    let len = prompt.len() + output.len();
    let ids: Vec<u32> = prompt.iter().chain(&output).copied().collect();
    assert_eq!(t["input_ids"]["dtype"], "int32");
    assert_eq!(t["input_ids"]["shape"], json!([1, len]));
    assert_eq!(t["input_ids"]["data"], json!(ids));
    assert_eq!(t["attention_mask"]["dtype"], "bool");
    assert_eq!(t["attention_mask"]["data"], json!(vec![true; len]));
    let mask: Vec<i32> = (0..len).map(|i| i32::from(i >= prompt.len())).collect();
    assert_eq!(t["loss_mask"]["data"], json!(mask));
    assert_eq!(t["logprobs"]["dtype"], "float32");
    assert_eq!(t["rewards"]["shape"], json!([1]));
    assert_eq!(t["rewards"]["data"], json!([1.0]));
    assert_eq!(t["is_truncated"]["dtype"], "bool");
    let meta = &loaded["metadata"];
    assert_eq!(meta["workflow_sha256"], v["sha256"]);
    assert_eq!(meta["rollbox_version"], env!("CARGO_PKG_VERSION"));
    assert_eq!(
        meta["component_sha256.math"].as_str().map(str::len),
        Some(64)
    );

    // Without the reward registered, the episode fails with the registration hint, exit 1.
    let (ok, out, _) = rollbox(
        &[
            "run",
            c::WORKFLOW_RLVR,
            "--tokenizer",
            &model_path,
            "--engine",
            &engine,
            "--data",
            &data,
        ],
        tmp.path(),
    );
    assert!(!ok);
    assert!(
        out.contains("register one with --reward NAME=PATH"),
        "{out}"
    );
}

fn rollout_args<'a>(dataset: &'a str, out: &'a str, reward: &'a str) -> Vec<&'a str> {
    vec![
        "rollout",
        dataset,
        "--workflow",
        c::WORKFLOW_RLVR,
        "--reward",
        reward,
        "--out",
        out,
        "--config",
        r#"{"reward": "math", "gconfig": {"greedy": true, "max_new_tokens": 6}}"#,
        "--n-samples",
        "2",
        "--batch-size",
        "1",
        "--quiet",
    ]
}

fn trajectories(dir: &std::path::Path) -> Vec<(u64, u64, String)> {
    let mut v: Vec<(u64, u64, String)> = std::fs::read_to_string(dir.join("trajectories.jsonl"))
        .expect("trajectories.jsonl")
        .lines()
        .map(|l| {
            let x: Value = serde_json::from_str(l).expect("line");
            (
                x["row"].as_u64().expect("row"),
                x["sample"].as_u64().expect("sample"),
                x["completion"]
                    .as_str()
                    .expect("completion text")
                    .to_string(),
            )
        })
        .collect();
    v.sort();
    v
}

/// The main job on the real embedded model: a few rows, then a run killed after its first batch
/// and resumed gives the same trajectories as an uninterrupted run, with no row twice.
#[test]
fn rollout_on_the_embedded_model_resumes_after_kill() {
    let tmp = tempfile::tempdir().expect("tmp");
    let rows: String = (0..6)
        .map(|i| {
            json!({"messages": [{"role": "user", "content": format!("What is {i} + {i}?")}], "answer": (2 * i).to_string()}).to_string() + "\n"
        })
        .collect();
    let dataset = tmp.path().join("rows.jsonl");
    std::fs::write(&dataset, rows + "{broken\n").expect("dataset");
    let dataset = dataset.display().to_string();
    let reward = format!("math={}", c::REWARD_MATH);
    let full = tmp.path().join("full");
    let full_arg = full.display().to_string();
    let mut args = rollout_args(&dataset, &full_arg, &reward);
    args.push("--json");
    let out = Command::new(env!("CARGO_BIN_EXE_rollbox"))
        .args(&args)
        .env("ROLLBOX_CACHE_DIR", tmp.path())
        .env("CANDLE_NUM_THREADS", "1")
        .output()
        .expect("rollbox runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: Value = serde_json::from_slice(&out.stdout).expect("--json stats");
    assert_eq!(stats["episodes"]["accepted"], 12);
    assert_eq!(stats["bad_rows"][0]["line"], 7);
    assert_eq!(stats["batches"], 6);
    let reference = trajectories(&full);
    assert_eq!(reference.len(), 12);
    assert!(reference.iter().all(|(_, _, text)| !text.is_empty()));
    // The rlvr workflow's metadata is in every line (issue 16, part 2).
    let text = std::fs::read_to_string(full.join("trajectories.jsonl")).expect("jsonl");
    for line in text.lines() {
        let v: Value = serde_json::from_str(line).expect("JSON line");
        assert_eq!(v["metadata"]["reward_timed_out"], false, "{line}");
        assert_eq!(v["metadata"]["completion"], v["completion"], "{line}");
    }

    // Kill -9 once the first batch is committed, then run again.
    let killed = tmp.path().join("killed");
    let killed_arg = killed.display().to_string();
    let mut child = Command::new(env!("CARGO_BIN_EXE_rollbox"))
        .args(rollout_args(&dataset, &killed_arg, &reward))
        .env("ROLLBOX_CACHE_DIR", tmp.path())
        .env("CANDLE_NUM_THREADS", "1")
        .spawn()
        .expect("spawn");
    let first = killed.join("batch-000000.safetensors");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(300);
    while !first.exists() && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    child.kill().expect("kill -9");
    child.wait().expect("reaped");
    assert!(
        first.exists(),
        "the first batch was written before the kill"
    );
    let before = std::fs::read_dir(&killed)
        .expect("dir")
        .filter(|e| {
            e.as_ref()
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .starts_with("batch-")
        })
        .count();
    let (ok, _, err) = rollbox(&rollout_args(&dataset, &killed_arg, &reward), tmp.path());
    assert!(ok, "{err}");
    let resumed = trajectories(&killed);
    assert_eq!(resumed, reference, "resumed run = uninterrupted run");
    let after = std::fs::read_dir(&killed)
        .expect("dir")
        .filter(|e| {
            e.as_ref()
                .expect("entry")
                .file_name()
                .to_string_lossy()
                .starts_with("batch-")
        })
        .count();
    assert_eq!(
        after, 6,
        "{before} batches before the restart, one per row after"
    );
}

/// One HTTP/1.1 request on loopback; returns the status code and the body.
fn http(addr: &str, method: &str, path: &str, body: &str) -> (u16, Vec<u8>) {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
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
    (status, raw[split + 4..].to_vec())
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
    use std::io::BufRead;
    let tmp = tempfile::tempdir().expect("tmp");
    let reward = format!("math={}", c::REWARD_MATH);
    let mut child = Command::new(env!("CARGO_BIN_EXE_rollbox"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--workflow",
            c::WORKFLOW_RLVR,
            "--reward",
            &reward,
            "--n-samples",
            "2",
            "--config",
            r#"{"reward": "math", "gconfig": {"greedy": true, "max_new_tokens": 4}}"#,
        ])
        .env("ROLLBOX_CACHE_DIR", tmp.path())
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
        let py = Command::new("python3")
            .arg(concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/../../scripts/check_safetensors.py"
            ))
            .arg(&batch)
            .output()
            .expect("python3");
        assert!(
            py.status.success(),
            "{}",
            String::from_utf8_lossy(&py.stderr)
        );
        let loaded: Value = serde_json::from_slice(&py.stdout).expect("JSON");
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
        let (code, body) = http(&addr, "POST", "/v1/episodes", r#"{"rows": 3}"#);
        assert_eq!(code, 400, "{}", String::from_utf8_lossy(&body));
        let (code, body) = http(&addr, "GET", "/metrics", "");
        assert_eq!(code, 200);
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("rollbox_episodes_accepted_total 4"), "{text}");
        assert!(text.contains("rollbox_policy_version 7"), "{text}");
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
        idle.set_read_timeout(Some(std::time::Duration::from_secs(30)))
            .expect("timeout");
        let n = std::io::Read::read(&mut &idle, &mut buf).unwrap_or(0);
        assert_eq!(n, 0, "the server closed the idle connection");
        let held = start.elapsed();
        assert!(
            held >= std::time::Duration::from_secs(9) && held < std::time::Duration::from_secs(20),
            "closed after {held:?} (header-read timeout 10 s)"
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

/// `--config-file`: the file's settings apply, a flag on the command line wins.
#[test]
fn rollout_reads_a_toml_config_file_and_flags_win() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dataset = tmp.path().join("rows.jsonl");
    let rows: String = (0..3)
        .map(|i| json!({"messages": [{"role": "user", "content": format!("What is {i} + 1?")}], "answer": (i + 1).to_string()}).to_string() + "\n")
        .collect();
    std::fs::write(&dataset, rows).expect("dataset");
    let file = tmp.path().join("rollout.toml");
    std::fs::write(
        &file,
        format!(
            "workflow = {:?}\nreward = [{:?}]\nn_samples = 3\nmax_rows = 2\nbatch_size = 1\n\n[workflow_config]\nreward = \"math\"\ngconfig = {{ greedy = true, max_new_tokens = 3 }}\n\n[limits]\nmax_memory = \"256MiB\"\n",
            c::WORKFLOW_RLVR,
            format!("math={}", c::REWARD_MATH)
        ),
    )
    .expect("toml");
    let out = tmp.path().join("out").display().to_string();
    let (ok, stdout, err) = rollbox(
        &[
            "rollout",
            &dataset.display().to_string(),
            "--config-file",
            &file.display().to_string(),
            "--out",
            &out,
            "--max-rows",
            "1",
            "--json",
        ],
        tmp.path(),
    );
    assert!(ok, "{err}");
    let stats: Value = serde_json::from_str(&stdout).expect("--json");
    assert_eq!(
        stats["rows_run"], 1,
        "--max-rows 1 on the command line beats max_rows = 2"
    );
    assert_eq!(
        stats["episodes"]["accepted"], 3,
        "n_samples = 3 from the file"
    );
}
