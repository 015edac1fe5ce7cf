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
        out.contains("world    rollbox:workflow/workflow@0.1.2"),
        "{out}"
    );
    assert!(out.contains("rollbox:workflow/tokenizer@0.1.2"), "{out}");
    let (ok, _, err) = rollbox(&["run", c::REWARD_MATH], tmp.path());
    assert!(!ok);
    assert!(
        err.contains("is this a reward component? register it as a reward"),
        "{err}"
    );
}

/// "What is 6 * 7?" as rlvr asks it, answered `answer` by a replay file in `dir`: the messages,
/// the prompt's and the answer's ids, and the file.
fn replay_answer(dir: &std::path::Path, answer: &str) -> (Value, Vec<u32>, Vec<u32>, PathBuf) {
    let tok = HostTokenizer::load(&model()).expect("run scripts/install/fetch-model.sh");
    let messages = json!([{"role": "user", "content": "What is 6 * 7?"}]);
    let options = ChatOptions {
        extra: Some(json!({"enable_thinking": false})),
        ..ChatOptions::default()
    };
    let prompt = tok
        .apply_chat_template(&messages, &options)
        .expect("prompt");
    let output = tok.encode(answer, false).expect("output");
    let replay = dir.join("replay.jsonl");
    let record = json!({"input_ids": prompt, "output_tokens": output,
        "output_logprobs": vec![-0.5f32; output.len()], "stop_reason": "stop"});
    std::fs::write(&replay, record.to_string()).expect("write replay");
    (messages, prompt, output, replay)
}

#[test]
fn run_rlvr_with_tokenizer_replay_engine_and_math_reward() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (messages, prompt, output, replay) =
        replay_answer(tmp.path(), "6 * 7 = 42, so \\boxed{42}<|im_end|>");
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
    let loaded: Value = rollbox_tests::check_safetensors(&batch);
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
    assert!(out.contains("register one under that name"), "{out}");
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
    // Line 7 is not JSON, line 8 not UTF-8: both reported and skipped, the rest runs.
    let mut bytes = (rows + "{broken\n").into_bytes();
    bytes.extend_from_slice(b"{\"messages\": \"\xff\"}\n");
    std::fs::write(&dataset, bytes).expect("dataset");
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
    assert_eq!(stats["bad_rows"][1]["line"], 8);
    let utf8 = stats["bad_rows"][1]["error"].as_str().unwrap_or_default();
    assert!(utf8.contains("invalid UTF-8"), "{utf8}");
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

/// The tool agent on the real embedded model with real tools (the built-in calculator and
/// python-exec): the small model rarely calls tools well; every episode must still complete.
#[test]
fn tool_agent_rollout_on_the_embedded_model_completes() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let rows: String = (1..=2)
        .map(|i| {
            json!({"question": format!("Use the calculator tool to compute {i} * 17."), "answer": (17 * i).to_string()}).to_string() + "\n"
        })
        .collect();
    let dataset = tmp.path().join("rows.jsonl");
    std::fs::write(&dataset, rows).expect("dataset");
    let out_dir = tmp.path().join("out");
    let python = format!("python={},timeout=5s", c::PYTHON_EXEC_TOOL);
    let out = Command::new(env!("CARGO_BIN_EXE_rollbox"))
        .args([
            "rollout",
            &dataset.display().to_string(),
            "--workflow",
            "tool-agent",
            "--tool",
            "calculator",
            "--tool",
            &python,
            "--out",
            &out_dir.display().to_string(),
            "--config",
            r#"{"reward": "math", "max_turns": 2, "max_new_tokens_total": 48, "gconfig": {"max_new_tokens": 32, "temperature": 0.7, "top_p": 0.9}}"#,
            "--n-samples",
            "1",
            "--json",
            "--quiet",
        ])
        .env("ROLLBOX_CACHE_DIR", tmp.path())
        .output()
        .expect("rollbox runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stats: Value = serde_json::from_slice(&out.stdout).expect("--json stats");
    assert_eq!(stats["episodes"]["accepted"], 2, "{stats}");
    let lines = std::fs::read_to_string(out_dir.join("trajectories.jsonl")).expect("trajectories");
    let mut turns = 0;
    for line in lines.lines() {
        let t: Value = serde_json::from_str(line).expect("line");
        let meta = &t["metadata"];
        assert!(
            meta["turns"].as_u64().is_some_and(|n| (1..=2).contains(&n)),
            "{meta}"
        );
        assert!(meta["end"].is_string(), "{meta}");
        turns += meta["turns"].as_u64().unwrap_or_default();
    }
    eprintln!(
        "tool-agent on the embedded model: {} episodes, {turns} assistant turns, stats {stats}",
        lines.lines().count()
    );
}

/// `rollout --fuel` and a reward's `fuel=N` are enforced (issue 31): a workflow that loops
/// forever and a reward that loops forever both end out of fuel long before their 60 s
/// timeouts, and the run completes.
#[test]
fn rollout_enforces_fuel_for_workflows_and_rewards() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dataset = tmp.path().join("rows.jsonl");
    std::fs::write(
        &dataset,
        json!({"messages": [{"role": "user", "content": "What is 1 + 1?"}], "answer": "2"})
            .to_string()
            + "\n",
    )
    .expect("dataset");
    let dataset = dataset.display().to_string();
    let run = |name: &str, extra: &[&str]| -> Value {
        let out = tmp.path().join(name).display().to_string();
        let mut args = vec!["rollout", dataset.as_str(), "--out", &out, "--json"];
        args.extend(["--n-samples", "2", "--timeout", "60s"]);
        args.extend(extra);
        let start = std::time::Instant::now();
        let (ok, stdout, err) = rollbox(&args, tmp.path());
        let took = start.elapsed();
        assert!(ok, "{err}");
        // Whether fuel stopped it is asserted from the fault kinds below, not from the clock
        // (load moves that, issue 52).
        eprintln!("{name}: took {took:?}");
        let mut stats: Value = serde_json::from_str(&stdout).expect("--json");
        let dropped = std::fs::read_to_string(tmp.path().join(name).join("dropped-rows.jsonl"))
            .unwrap_or_default();
        stats["dropped_text"] = dropped.into();
        stats
    };
    let stats = run(
        "workflow",
        &["--workflow", c::ADV_LOOP, "--fuel", "10000000"],
    );
    assert_eq!(stats["episodes"]["out_of_fuel"], 2, "{stats}");
    assert!(
        stats["dropped_text"]
            .as_str()
            .is_some_and(|t| t.contains("ran out of fuel (10000000 units); raise it with --fuel")),
        "{stats}"
    );
    let spin = format!(
        "math={},fuel=10000000,timeout=60s,retries=0",
        c::REWARD_SPIN
    );
    let stats = run(
        "reward",
        &[
            "--workflow",
            c::WORKFLOW_RLVR,
            "--reward",
            &spin,
            "--config",
            r#"{"reward": "math", "gconfig": {"greedy": true, "max_new_tokens": 2}}"#,
        ],
    );
    assert!(
        stats["dropped_text"]
            .as_str()
            .is_some_and(|t| t.contains("out of fuel")),
        "{stats}"
    );
}

/// `run --fuel` and a reward's `fuel=N` under `run` are enforced (issue 33: one fuel test per
/// entry point): a workflow and a reward that loop forever end out of fuel long before their
/// 60 s timeouts.
#[test]
fn run_enforces_fuel_for_workflows_and_rewards() {
    let tmp = tempfile::tempdir().expect("tmp");
    let start = std::time::Instant::now();
    let (ok, stdout, stderr) = rollbox(
        &["run", c::ADV_LOOP, "--fuel", "10000000", "--timeout", "60s"],
        tmp.path(),
    );
    assert!(!ok, "the episode fails");
    // The failure once, in the CLI's words: the flag to raise (issue 33, part 5), and no
    // second copy logged by the library.
    assert!(
        stdout.contains("[out_of_fuel] ran out of fuel (10000000 units); raise it with --fuel"),
        "{stdout}"
    );
    assert!(!stderr.contains("ran out of fuel"), "{stderr}");
    eprintln!("took {:?}", start.elapsed());
    let spin = format!(
        "math={},fuel=10000000,timeout=60s,retries=0",
        c::REWARD_SPIN
    );
    let start = std::time::Instant::now();
    let (_, stdout, err) = rollbox(
        &[
            "run",
            c::WORKFLOW_RLVR,
            "--engine",
            "embedded",
            "--reward",
            &spin,
            "--data",
            r#"{"messages": [{"role": "user", "content": "1 + 1?"}], "answer": "2"}"#,
            "--config",
            r#"{"reward": "math", "gconfig": {"greedy": true, "max_new_tokens": 2}}"#,
        ],
        tmp.path(),
    );
    assert!(
        stdout.contains("reward   math = none") && stdout.contains("out of fuel"),
        "{stdout}{err}"
    );
    eprintln!("took {:?}", start.elapsed());
}

/// `run --max-reward-calls` is enforced: a workflow that calls the math reward 5 times gets 2
/// scores, a refusal, then a fault naming the flag to raise.
#[test]
fn run_enforces_max_reward_calls() {
    let tmp = tempfile::tempdir().expect("tmp");
    let data = r#"{"attack": "score_flood", "n": 5, "reward": "math"}"#;
    let (ok, stdout, _) = rollbox(
        &["run", c::ADV_HOST_CALLS, "--reward", "math", "--data", data],
        tmp.path(),
    );
    assert!(
        !ok && stdout.contains("score: 5 calls, 5 scored"),
        "{stdout}"
    );
    let (ok, stdout, _) = rollbox(
        &[
            "run",
            c::ADV_HOST_CALLS,
            "--reward",
            "math",
            "--max-reward-calls",
            "2",
            "--data",
            data,
        ],
        tmp.path(),
    );
    assert!(!ok, "the episode fails");
    assert!(
        stdout.contains("limit of 2 reward calls")
            && stdout.contains("raise it with --max-reward-calls"),
        "{stdout}"
    );
}

/// Guest text reaches the terminal and the log escaped (issue 32, part 5): a failure message
/// and stdout carrying a newline with a forged host log line and an ANSI clear-screen come out
/// as one escaped line each; no line of the output starts with the forged timestamp and no
/// escape byte reaches the terminal.
#[test]
fn guest_text_cannot_forge_log_lines_or_drive_the_terminal() {
    let tmp = tempfile::tempdir().expect("tmp");
    let message = "oops\n2099-01-01T00:00:00Z ERROR rollbox: FAKE host message\u{1b}[2J";
    let data = json!({"fail": [0], "message": message}).to_string();
    let (ok, stdout, stderr) = rollbox(&["run", c::SCRIPTED, "--data", &data], tmp.path());
    assert!(!ok, "the episode fails");
    for (name, text) in [("stdout", &stdout), ("stderr", &stderr)] {
        assert!(
            !text.contains('\u{1b}'),
            "{name} has an escape byte: {text:?}"
        );
        assert!(
            !text.lines().any(|l| l.starts_with("2099-")),
            "{name} has a forged line: {text}"
        );
    }
    assert!(
        stdout.contains("oops\\n2099-01-01T00:00:00Z ERROR rollbox: FAKE host message\\u{1b}[2J"),
        "{stdout}"
    );
    // `run` reports the failure once, on stdout; the log has no second copy.
    assert!(!stderr.contains("oops"), "{stderr}");
    // `rollout` logs each failed episode once, escaped.
    let rows = tmp.path().join("rows.jsonl");
    std::fs::write(&rows, format!("{data}\n")).expect("rows");
    let replay = tmp.path().join("empty.jsonl");
    std::fs::write(&replay, "").expect("replay");
    let out = tmp.path().join("out").display().to_string();
    let engine = format!("replay:{}", replay.display());
    let (ok, _, stderr) = rollbox(
        &[
            "rollout",
            &rows.display().to_string(),
            "--out",
            &out,
            "--workflow",
            c::SCRIPTED,
            "--engine",
            &engine,
            "--n-samples",
            "1",
            "--quiet",
        ],
        tmp.path(),
    );
    assert!(ok, "{stderr}");
    assert!(!stderr.contains('\u{1b}'), "{stderr:?}");
    assert!(!stderr.lines().any(|l| l.starts_with("2099-")), "{stderr}");
    assert_eq!(stderr.matches("oops\\n2099").count(), 1, "{stderr}");
}

/// Files the operator names are opened like component files (issue 32, part 5): a device, a
/// FIFO or a directory given as `--tokenizer`, `--engine replay:` or `--engine embedded:` is a
/// clear error at once (before, `/dev/zero` was read without bound and a FIFO blocked for
/// ever).
#[test]
fn operator_paths_must_be_regular_files() {
    let tmp = tempfile::tempdir().expect("tmp");
    let fifo = tmp.path().join("fifo");
    let c_path = std::ffi::CString::new(fifo.display().to_string()).expect("path");
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c_path.as_ptr(), 0o600) }, 0);
    let fifo = fifo.display().to_string();
    let dir = tmp.path().display().to_string();
    for (flag, value) in [
        ("--tokenizer", "/dev/zero".to_string()),
        ("--tokenizer", fifo.clone()),
        ("--engine", "replay:/dev/zero".to_string()),
        ("--engine", format!("replay:{fifo}")),
        ("--engine", format!("replay:{dir}")),
        ("--engine", "embedded:/dev/zero".to_string()),
        ("--engine", format!("embedded:{fifo}")),
    ] {
        let start = std::time::Instant::now();
        let (ok, _, err) = rollbox(&["run", c::TRIVIAL, flag, &value], tmp.path());
        assert!(!ok, "{flag} {value} was accepted");
        assert!(
            err.contains("not a regular file") || err.contains("is a directory"),
            "{flag} {value}: {err}"
        );
        eprintln!("{flag} {value}: refused in {:?}", start.elapsed());
    }
}

/// `rollbox --version` says what the build is (issue 55): the package version, the commit it was
/// built from, the WIT package its components target and the wasmtime with rollbox's patches.
#[test]
fn version_names_the_commit_the_wit_and_the_patched_wasmtime() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (ok, out, err) = rollbox(&["--version"], tmp.path());
    assert!(ok, "{err}");
    let line = out.trim();
    let want_start = format!("rollbox {} (commit ", env!("CARGO_PKG_VERSION"));
    assert!(line.starts_with(&want_start), "{line}");
    let commit = line[want_start.len()..].split(',').next().unwrap_or("");
    // A checkout's HEAD, as git names it here (the tests run from the repository).
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string());
    match head {
        Some(h) if std::env::var_os("ROLLBOX_COMMIT").is_none() => assert_eq!(commit, h, "{line}"),
        _ => assert!(!commit.is_empty(), "{line}"),
    }
    let wit = format!(
        "WIT {}@{}",
        rollbox_runtime::world::WIT_PACKAGE,
        rollbox_runtime::world::WIT_VERSION
    );
    assert!(line.contains(&wit), "{line}");
    assert!(
        line.ends_with("wasmtime 48.0.8 with patches 0001 0002)"),
        "{line}"
    );
}

/// python-exec is built into the binary where componentize-py was at build (issue 55; the test
/// command's setup always has it): `--tool python=python-exec` and `rollbox inspect
/// python-exec` need no file. Where it is not, asking for it names the install command.
#[test]
fn python_exec_is_built_in_or_its_absence_names_the_install() {
    let tmp = tempfile::tempdir().expect("tmp");
    let (ok, out, err) = rollbox(&["inspect", "python-exec"], tmp.path());
    match rollbox_host::builtin::PYTHON_EXEC_ABSENT {
        None => {
            assert!(ok, "{err}");
            assert!(
                out.contains("builtin:python-exec") && out.contains("tool"),
                "{out}"
            );
        }
        Some(_) => {
            assert!(
                std::env::var_os("ROLLBOX_REQUIRE_GUESTS").is_none(),
                "the test command's setup builds python-exec in"
            );
            assert!(!ok && err.contains("pip install componentize-py"), "{err}");
        }
    }
}

/// Whether componentize-py is here to build Python components (the test command installs it
/// and sets ROLLBOX_REQUIRE_GUESTS=1, where a missing one fails instead of skipping).
fn componentize_py() -> bool {
    let found = std::env::var_os("COMPONENTIZE_PY").is_some()
        || std::env::var_os("PATH").is_some_and(|p| {
            std::env::split_paths(&p).any(|d| d.join("componentize-py").is_file())
        });
    assert!(
        found || std::env::var_os("ROLLBOX_REQUIRE_GUESTS").is_none_or(|v| v != "1"),
        "componentize-py is missing (source scripts/install/test-env.sh)"
    );
    found
}

#[test]
fn build_makes_a_plain_python_reward_that_run_scores_with() {
    if !componentize_py() {
        eprintln!("skipped: componentize-py is not installed");
        return;
    }
    let tmp = tempfile::tempdir().expect("tmp");
    let file = tmp.path().join("mine.py");
    std::fs::write(
        &file,
        "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    \
         return {'score': 0.25 if ground_truth in solution_str else 0.0, 'hit': 1.0}\n",
    )
    .expect("write");
    let out_wasm = tmp.path().join("mine.wasm");
    let (ok, out, err) = rollbox(
        &[
            "build",
            "reward",
            &file.display().to_string(),
            "-o",
            &out_wasm.display().to_string(),
        ],
        tmp.path(),
    );
    assert!(ok, "{out}\n{err}");
    assert!(out.contains("reward `compute_score`"), "{out}");
    assert!(out.contains("no third-party dependencies"), "{out}");
    let (ok, out, _) = rollbox(&["inspect", &out_wasm.display().to_string()], tmp.path());
    assert!(
        ok && out.contains("world    rollbox:workflow/reward@0.1.2"),
        "{out}"
    );

    // The .py path itself as `--reward`: built on first use into the cache, then scored.
    let (messages, _, _, replay) = replay_answer(tmp.path(), "It is 42.<|im_end|>");
    let (ok, out, err) = rollbox(
        &[
            "run",
            c::WORKFLOW_RLVR,
            "--tokenizer",
            &model().display().to_string(),
            "--engine",
            &format!("replay:{}", replay.display()),
            "--reward",
            &format!("mine={}:compute_score,style=verl", file.display()),
            "--config",
            r#"{"reward": "mine"}"#,
            "--data",
            &json!({"messages": messages, "answer": "42"}).to_string(),
            "--json",
        ],
        tmp.path(),
    );
    assert!(ok, "{out}\n{err}");
    assert!(err.contains("building "), "{err}");
    let v: Value = serde_json::from_str(&out).expect("--json prints JSON");
    assert_eq!(v["stats"][0], json!(["reward", 0.25]), "{v}");

    // Bad input names the thing and the fix.
    let (ok, _, err) = rollbox(&["build", "reward", "mine.txt"], tmp.path());
    assert!(!ok && err.contains("not a Python file"), "{err}");
    let missing = format!("{}:nope", file.display());
    let (ok, _, err) = rollbox(&["build", "reward", &missing], tmp.path());
    assert!(!ok && err.contains("defines no function `nope`"), "{err}");
}
