//! Paths of the guest components built by `build.rs`, and helpers shared by the integration
//! tests in `tests/tests/`.

/// Paths of built components, one constant per test program and workflow crate.
pub mod components {
    include!(concat!(env!("OUT_DIR"), "/components.rs"));
}

/// Whether the guest at `path` (a [`components`] constant) was built. `build.rs` skips a guest
/// whose toolchain is absent (componentize-py, componentize-js, the C toolchain; never under
/// `scripts/test.sh`, which sets `ROLLBOX_REQUIRE_GUESTS`); a test that needs one then says
/// so on stderr and returns early: `if !built(c::PYTHON_REWARD) { return; }`.
pub fn built(path: &str) -> bool {
    match components::SKIPPED.iter().find(|(p, _)| *p == path) {
        None => true,
        Some((_, why)) => {
            eprintln!("skipped: {path} was not built: {why}");
            false
        }
    }
}

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use rollbox_engines::replay::ReplayBackend;
use rollbox_engines::testing::FakeBackend;
use rollbox_engines::{InferenceBackend, StopReason};
use rollbox_runtime::{
    CallPolicy, EpisodeReport, EpisodeRequest, Limits, RewardComponent, Runtime, RuntimeConfig,
    Scope, Services, ToolComponent, WorkflowComponent,
};
use rollbox_tokenizer::HostTokenizer;

/// A backend that answers every prompt with `[7, 8, 2]` (logprobs -0.1, -0.2, -0.3, stop),
/// cut to `max_new_tokens`, after `delay`. Deterministic; for sandbox tests where the engine's
/// answer is not the subject.
pub fn fixed_backend(delay: Duration) -> FakeBackend {
    FakeBackend::fixed(vec![7, 8, 2], vec![-0.1, -0.2, -0.3], StopReason::Stop).with_delay(delay)
}

/// A replay engine spec (`replay:FILE`, FILE written in `dir`) answering the prompt `[1, 2, 3]`
/// (what `adv_hoard` and the trivial guests ask) with three tokens and a stop.
pub fn replay_123(dir: &Path) -> String {
    let path = dir.join("answers.jsonl");
    std::fs::write(
        &path,
        r#"{"input_ids":[1,2,3],"output_tokens":[7,8,2],"output_logprobs":[-0.1,-0.2,-0.3],"stop_reason":"stop"}"#,
    )
    .expect("replay file");
    format!("replay:{}", path.display())
}

/// The peak resident memory of process `pid` so far (`VmHWM`), bytes (0 once it is gone).
pub fn peak_rss(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb << 10)
}

/// Compiled-component cache shared by the tests of one target directory.
pub fn test_cache_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("workspace root")
        .join("target")
        .join("test-component-cache")
}

/// A runtime with a small instance pool, the shared test cache and `backend`.
pub fn runtime_with(backend: Option<Arc<dyn InferenceBackend>>, fuel: bool) -> Runtime {
    let mut services = Services::new();
    if let Some(b) = backend {
        services = services.with_backend(b);
    }
    Runtime::new(
        RuntimeConfig {
            cache_dir: Some(test_cache_dir()),
            fuel,
            max_instances: 64,
            ..RuntimeConfig::default()
        },
        services,
    )
    .expect("runtime starts")
}

/// A runtime whose engine answers at once.
pub fn runtime() -> Runtime {
    runtime_with(Some(Arc::new(fixed_backend(Duration::ZERO))), false)
}

/// A safetensors file as Python's `safetensors` package loads it (`scripts/ci/check_safetensors.py`:
/// tensor names, dtypes, shapes and values, and the metadata), as JSON; panics with Python's
/// error when it does not load.
pub fn check_safetensors(path: &Path) -> serde_json::Value {
    let py = std::process::Command::new("python3")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/ci/check_safetensors.py"))
        .arg(path)
        .output()
        .expect("python3 runs (scripts/install/test-env.sh installs safetensors and numpy)");
    assert!(
        py.status.success(),
        "{}",
        String::from_utf8_lossy(&py.stderr)
    );
    serde_json::from_slice(&py.stdout).expect("JSON from check_safetensors.py")
}

/// The default model file (`$ROLLBOX_MODEL_DIR`, default `~/.cache/rollbox/models`), which
/// `scripts/install/fetch-model.sh` downloads; panics with that hint when it is missing.
pub fn model_path() -> PathBuf {
    let dir = std::env::var_os("ROLLBOX_MODEL_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(std::env::var("HOME").expect("HOME is set")).join(".cache/rollbox/models")
        });
    let path = dir.join("SmolLM2-135M-Instruct.Q4_1.gguf");
    assert!(
        path.is_file(),
        "{} is missing: run scripts/install/fetch-model.sh",
        path.display()
    );
    path
}

/// Run the echo workflow on `[1, 2, 3]` and return its `input_ids`: the prompt followed by the
/// engine's answer (`[1, 2, 3, 7, 8, 2]` with a [`fixed_backend`]); panics unless the episode is
/// accepted. Run after each hostile guest to show it left the host serving.
pub async fn echo_input_ids(rt: &Runtime) -> Vec<i32> {
    let echo = rt
        .load::<WorkflowComponent>(Path::new(components::WORKFLOW_ECHO))
        .expect("echo loads");
    let r = rt
        .run_episode(
            &Scope::default(),
            &echo,
            rollbox_runtime::EpisodeRequest::new(
                "echo-s0",
                serde_json::json!({"input_ids": [1, 2, 3]}),
            ),
            Arc::new(rollbox_runtime::Limits::default()),
        )
        .await;
    let rollbox_runtime::EpisodeOutcome::Accepted(t) = &r.outcome else {
        panic!(
            "the next episode should be accepted, got {} (stderr: {})",
            r.outcome.kind(),
            r.stderr
        )
    };
    match t.get("input_ids").expect("input_ids").data() {
        Ok(rollbox_tensor::TensorData::I32(v)) => v,
        other => panic!("input_ids should be i32 data, got {other:?}"),
    }
}

/// [`echo_input_ids`] answered by a [`fixed_backend`].
pub async fn assert_serves_echo(rt: &Runtime) {
    assert_eq!(echo_input_ids(rt).await, vec![1, 2, 3, 7, 8, 2]);
}

/// Wrap a core module into a component of the rollbox `world` (`"tool"`, `"reward"`, ...):
/// the world's WIT metadata embedded, then encoded by `wit-component`. For hand-made and
/// generated hostile components.
pub fn component_from_core(module: Vec<u8>, world: &str) -> Result<Vec<u8>, String> {
    let mut resolve = wit_parser::Resolve::default();
    let wit = Path::new(env!("CARGO_MANIFEST_DIR")).join("../wit");
    let (pkg, _) = resolve
        .push_dir(&wit)
        .map_err(|e| format!("parsing wit/: {e:#}"))?;
    encode_component(module, resolve, pkg, world)
}

/// [`component_from_core`] for a world of the WIT package in `wit` (text), e.g. an older
/// version of the rollbox contract.
pub fn component_from_wit(module: Vec<u8>, wit: &str, world: &str) -> Result<Vec<u8>, String> {
    let mut resolve = wit_parser::Resolve::default();
    let pkg = resolve
        .push_str("old.wit", wit)
        .map_err(|e| format!("parsing the WIT text: {e:#}"))?;
    encode_component(module, resolve, pkg, world)
}

fn encode_component(
    mut module: Vec<u8>,
    resolve: wit_parser::Resolve,
    pkg: wit_parser::PackageId,
    world: &str,
) -> Result<Vec<u8>, String> {
    let world = resolve
        .select_world(&[pkg], Some(world))
        .map_err(|e| format!("{e:#}"))?;
    wit_component::embed_component_metadata(
        &mut module,
        &resolve,
        world,
        wit_component::StringEncoding::UTF8,
    )
    .map_err(|e| format!("{e:#}"))?;
    wit_component::ComponentEncoder::default()
        .module(&module)
        .map_err(|e| format!("{e:#}"))?
        .validate(true)
        .encode()
        .map_err(|e| format!("{e:#}"))
}

/// Whether the soak budget is on: `ROLLBOX_LONG_TESTS=1`, which `.ci/run` sets. Fuzz loops and
/// stream sizes take their long value then, and a short one in the README's test command
/// (`scripts/test.sh`) and a bare `cargo test`; each test's own variable still overrides both.
pub fn long_tests() -> bool {
    std::env::var("ROLLBOX_LONG_TESTS").is_ok_and(|v| v == "1")
}

/// A size or duration for a soak test: the variable `var` when set (it must parse), else
/// `long` under [`long_tests`], else `short`.
pub fn soak_budget<T: std::str::FromStr>(var: &str, short: T, long: T) -> T {
    match std::env::var(var) {
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{var}=`{v}` does not parse")),
        Err(_) if long_tests() => long,
        Err(_) => short,
    }
}

/// The fuzzers' seed: `ROLLBOX_FUZZ_SEED` when set (to repeat a run), else from the clock.
pub fn fuzz_seed() -> u64 {
    match std::env::var("ROLLBOX_FUZZ_SEED") {
        Ok(v) => v.trim().parse().expect("ROLLBOX_FUZZ_SEED is a u64"),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as u64),
    }
}

/// The SmolLM2 tokenizer the workflow tests run on (`model_path`).
pub fn tokenizer() -> Arc<HostTokenizer> {
    Arc::new(HostTokenizer::load(&model_path()).expect("tokenizer"))
}

/// A recorded engine answer in the replay format: `output` for `prompt`, logprobs -0.1, -0.2,
/// ... and `stop` (`stop` or `length`).
pub fn replay_record(prompt: &[u32], output: &[u32], stop: &str) -> String {
    let logprobs: Vec<f32> = (0..output.len()).map(|i| -0.1 * (i + 1) as f32).collect();
    serde_json::json!({"input_ids": prompt, "output_tokens": output, "output_logprobs": logprobs, "stop_reason": stop}).to_string()
}

/// A runtime on `tok` with `backend` and the math reward registered as `math`.
pub fn workflow_runtime(tok: &Arc<HostTokenizer>, backend: Arc<dyn InferenceBackend>) -> Runtime {
    let services = Services::new()
        .with_tokenizer(tok.clone())
        .with_backend(backend);
    let rt = Runtime::new(
        RuntimeConfig {
            cache_dir: Some(test_cache_dir()),
            max_instances: 16,
            ..RuntimeConfig::default()
        },
        services,
    )
    .expect("runtime");
    rt.register::<RewardComponent>(
        "math",
        Path::new(components::REWARD_MATH),
        CallPolicy::default(),
    )
    .expect("math reward");
    rt
}

/// [`workflow_runtime`] with the replay engine answering `records` (replay-format lines).
pub fn replay_runtime(tok: &Arc<HostTokenizer>, records: &[String]) -> Runtime {
    let backend = ReplayBackend::from_jsonl_str(&records.join("\n")).expect("replay");
    workflow_runtime(tok, Arc::new(backend))
}

/// One episode (`r0-s0`) of the workflow at `path` on `data` with `config`.
pub async fn run_workflow(
    rt: &Runtime,
    path: &str,
    data: serde_json::Value,
    config: serde_json::Value,
) -> EpisodeReport {
    let w = rt
        .load::<WorkflowComponent>(Path::new(path))
        .expect("workflow loads");
    rt.run_episode(
        &Scope::default(),
        &w,
        EpisodeRequest {
            config: config.into(),
            ..EpisodeRequest::new("r0-s0", data)
        },
        Arc::new(Limits::default()),
    )
    .await
}

/// `bytes` of words of random lowercase letters (7 letters and a space, from a fixed seed):
/// text the tokenizer's word cache cannot help with, for tests of long tokenizer calls.
pub fn random_words(bytes: usize) -> String {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..bytes)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if i % 8 == 7 {
                ' '
            } else {
                (b'a' + (x % 26) as u8) as char
            }
        })
        .collect()
}

/// A `width` x `height` RGB gradient as a base64 PNG: a few KiB of PNG, a large image once
/// decoded (1024x1024: 25 MB of Qwen2-VL pixel values).
pub fn gradient_png_base64(width: u32, height: u32) -> String {
    use base64::Engine as _;
    let img = image::RgbImage::from_fn(width, height, |x, y| {
        image::Rgb([(x % 256) as u8, (y % 256) as u8, ((x + y) % 256) as u8])
    });
    let mut png = std::io::Cursor::new(Vec::new());
    img.write_to(&mut png, image::ImageFormat::Png)
        .expect("encode PNG");
    base64::engine::general_purpose::STANDARD.encode(png.into_inner())
}

/// A `width` x `height` black 16-bit RGB PNG as base64: issue 52's decompression bomb (7071 x
/// 7071, 50 megapixels: a small file, 300 MB decoded).
pub fn black_rgb16_png_base64(width: u32, height: u32) -> String {
    use base64::Engine as _;
    use image::ImageEncoder as _;
    use image::codecs::png::{CompressionType, FilterType, PngEncoder};
    // Zero samples are the same bytes in either endianness.
    let pixels = vec![0u8; width as usize * height as usize * 6];
    let mut png = Vec::new();
    PngEncoder::new_with_quality(&mut png, CompressionType::Fast, FilterType::NoFilter)
        .write_image(&pixels, width, height, image::ExtendedColorType::Rgb16)
        .expect("encode PNG");
    base64::engine::general_purpose::STANDARD.encode(png)
}

/// Check that the generated page at `path` (relative to the repository root) is `page`, or
/// rewrite it when `ROLLBOX_BLESS` is set. `what` says what the page is made from, and `test`
/// is the cargo command that rewrites it.
pub fn check_generated_page(path: &str, page: &str, what: &str, test: &str) {
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(path);
    if std::env::var_os("ROLLBOX_BLESS").is_some() {
        std::fs::write(&file, page).unwrap_or_else(|e| panic!("writing {path}: {e}"));
    }
    let on_disk = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        on_disk == page,
        "{path} is not {what}: rewrite it with `ROLLBOX_BLESS=1 {test}`"
    );
}

/// The built-in `code` reward (`REWARD_CODE`) with python-exec registered as its runner
/// `python`: `case_timeout` and 1 GiB per test case, the reward itself 120 s, no retries.
pub fn code_runtime(case_timeout: Duration) -> Runtime {
    let rt = runtime();
    let case = rollbox_runtime::CallPolicy {
        limits: Arc::new(rollbox_runtime::Limits {
            timeout: case_timeout,
            max_memory: 1 << 30,
            max_boundary_bytes: 16 << 20,
            ..rollbox_runtime::Limits::untrusted_tool()
        }),
        retries: 0,
    };
    rt.register::<ToolComponent>("python", Path::new(components::PYTHON_EXEC_TOOL), case)
        .expect("python-exec");
    let reward = rollbox_runtime::CallPolicy {
        limits: Arc::new(rollbox_runtime::Limits {
            timeout: Duration::from_secs(120),
            max_boundary_bytes: 64 << 20,
            ..rollbox_runtime::Limits::untrusted_call()
        }),
        retries: 0,
    };
    rt.register::<RewardComponent>("code", Path::new(components::REWARD_CODE), reward)
        .expect("code reward");
    rt
}

/// Score `completion` against `row` with the reward registered as `code`: the score, or the
/// fault of its last attempt.
pub async fn score_code(
    rt: &Runtime,
    completion: &str,
    row: serde_json::Value,
) -> Result<f64, rollbox_runtime::GuestFault> {
    rt.score(
        &Scope::default(),
        "code",
        rollbox_runtime::RewardCall {
            prompt: String::new(),
            completion: completion.into(),
            prompt_ids: vec![],
            completion_ids: vec![],
            data: row,
        },
    )
    .await
    .expect("the code reward is registered")
    .result
}
