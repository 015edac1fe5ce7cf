//! The `rollbox` command line: inspect components, run one episode, benchmark the sandbox.

mod bench;
mod config_file;
mod engines;
mod limits;
mod rollout;
mod serve;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, bail};
use clap::{Parser, Subcommand};
use rollbox_runtime::{EpisodeOutcome, EpisodeRequest, Runtime, RuntimeConfig, Services};

/// mimalloc keeps freed pages for reuse: batch buffers (tens of MiB, allocated and freed per
/// batch) would otherwise be mmapped, page-faulted and zeroed afresh each time; that was
/// two-thirds of concat-padded's time with glibc malloc (`rollbox bench concat`).
#[global_allocator]
static ALLOC: mimalloc::MiMalloc = mimalloc::MiMalloc;

unsafe extern "C" {
    /// mimalloc's `mi_collect` (in the library the `mimalloc` crate links).
    fn mi_collect(force: bool);
}

/// Give the memory freed during setup back to the OS. Loading a tokenizer from GGUF builds and
/// drops ~60 MiB of intermediate JSON, which mimalloc would otherwise keep resident for the
/// whole run (an idle `rollbox serve` held 100 MiB, 51 MiB after this).
pub(crate) fn release_setup_memory() {
    // SAFETY: `mi_collect` only returns free pages to the OS; any thread may call it.
    unsafe { mi_collect(true) }
}

/// Turn transparent huge pages off for this process unless `engine` (an `--engine` spec) keeps
/// model weights in it; call before loading anything. See [`disable_huge_pages`].
pub(crate) fn prefer_small_pages(engine: &str) {
    if engines::kind(engine) != "embedded" {
        disable_huge_pages();
    }
}

/// Turn transparent huge pages off for this process. Without model weights the host holds many
/// small, short-lived allocations (per-episode buffers, the sandboxes' pools): with THP set to
/// `always`, each first touch takes and zeroes 2 MiB, and peak RSS at 512 episodes in flight was
/// ~140 MiB instead of ~113 (`rollbox bench rollout`). The embedded model's weights gain from
/// huge pages (one-sequence decode 10-15% faster), so with it they stay on.
pub(crate) fn disable_huge_pages() {
    #[cfg(target_os = "linux")]
    // SAFETY: prctl(PR_SET_THP_DISABLE) takes plain integers and changes only this process's
    // page-fault policy; a failure (old kernel) leaves the default in place.
    unsafe {
        libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0);
    }
}

/// Run reinforcement-learning rollout workflows as sandboxed WebAssembly components.
#[derive(Parser)]
#[command(name = "rollbox", version, about, args_override_self = true)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the world a component targets, its imports and exports, size and sha256.
    Inspect {
        /// The component file (.wasm).
        path: PathBuf,
        /// Print JSON.
        #[arg(long)]
        json: bool,
    },
    /// Run one episode of a workflow component and print the returned tensors or the error.
    Run {
        /// The workflow component file (.wasm).
        workflow: PathBuf,
        /// The dataset row, a JSON object.
        #[arg(long, default_value = "{}")]
        data: String,
        /// The workflow's configuration, a JSON object.
        #[arg(long, default_value = "{}")]
        config: String,
        /// Inference engine: `embedded[:MODEL.gguf]`, `sglang:URL[,URL...]`, `openai:URL`,
        /// `openai+llamacpp:URL` or `replay:FILE`. Without one, generate calls return
        /// `unavailable`.
        #[arg(long)]
        engine: Option<String>,
        /// Tokenizer for the `tokenizer` interface: a .gguf file, a tokenizer.json, or a
        /// directory with tokenizer.json (+ tokenizer_config.json).
        #[arg(long)]
        tokenizer: Option<PathBuf>,
        /// Register a reward component: NAME=PATH[,timeout=15s,retries=3,memory=256MiB,fuel=N].
        #[arg(long = "reward", value_parser = limits::parse_registration)]
        rewards: Vec<limits::Registration>,
        /// Register a tool component: NAME=PATH[,timeout=..,retries=..,memory=..,fuel=..].
        #[arg(long = "tool", value_parser = limits::parse_registration)]
        tools: Vec<limits::Registration>,
        /// Print JSON.
        #[arg(long)]
        json: bool,
        /// Write the accepted episode's tensors to this safetensors file (loadable with
        /// `safetensors.torch.load_file`), with provenance in its metadata.
        #[arg(long)]
        out: Option<PathBuf>,
        /// Append every engine answer to this JSONL file (replay format; re-run with
        /// --engine replay:FILE).
        #[arg(long)]
        record: Option<PathBuf>,
        #[command(flatten)]
        limits: Box<limits::LimitArgs>,
    },
    /// The main job: a JSONL dataset through a workflow, GRPO groups, safetensors batches.
    Rollout(Box<rollout::RolloutArgs>),
    /// The rollout controller over HTTP (POST /v1/episodes, POST /v1/version, /healthz, /metrics).
    Serve(Box<serve::ServeArgs>),
    /// Benchmarks that print figures.
    Bench {
        #[command(subcommand)]
        which: bench::Bench,
    },
}

fn main() -> anyhow::Result<()> {
    // candle asks for its thread count on every f32 matmul, and without `RAYON_NUM_THREADS`
    // that re-reads /proc/cpuinfo (about 5% of embedded decode time here). Pin the answer
    // it would compute, once, before any thread exists.
    if std::env::var_os("RAYON_NUM_THREADS").is_none() {
        let n = rollbox_engines::embedded::candle_thread_count();
        // SAFETY: no other thread has been started yet.
        unsafe { std::env::set_var("RAYON_NUM_THREADS", n.to_string()) };
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("ROLLBOX_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse_from(config_file::expand(std::env::args().collect())?);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    rt.block_on(async move {
        match cli.command {
            Command::Inspect { path, json } => inspect(&path, json),
            Command::Run {
                workflow,
                data,
                config,
                engine,
                tokenizer,
                rewards,
                tools,
                json,
                out,
                record,
                limits,
            } => {
                let components = Components {
                    tokenizer,
                    rewards,
                    tools,
                    out,
                    record,
                };
                run(
                    &workflow,
                    &data,
                    &config,
                    engine.as_deref(),
                    &components,
                    json,
                    &limits,
                )
                .await
            }
            Command::Rollout(args) => rollout::run(*args).await,
            Command::Serve(args) => serve::run(*args).await,
            Command::Bench { which } => bench::run(which).await,
        }
    })
}

fn inspect(path: &Path, json: bool) -> anyhow::Result<()> {
    let runtime = Runtime::new(RuntimeConfig::default(), Services::new())?;
    let info = runtime.inspect(path)?;
    if json {
        println!("{}", serde_json::to_string_pretty(&info)?);
        return Ok(());
    }
    println!("file     {}", info.path.display());
    println!("sha256   {}", info.sha256);
    println!("size     {} bytes", info.size_bytes);
    match info.world {
        Some(w) => println!("world    rollbox:workflow/{w}@0.1.0"),
        None => println!("world    none of rollbox's (exports no run-episode, score or call)"),
    }
    println!("imports  ({})", info.imports.len());
    for i in &info.imports {
        println!("  {i}");
    }
    println!("exports  ({})", info.exports.len());
    for e in &info.exports {
        println!("  {e}");
    }
    Ok(())
}

/// Services with the engine and tokenizer asked for: `--tokenizer` when given, else the
/// embedded engine's own. Returns the tokenizer too.
pub(crate) fn services_for(
    engine: Option<&str>,
    tokenizer: Option<&Path>,
    record: Option<&Path>,
) -> anyhow::Result<(Services, Option<Arc<rollbox_tokenizer::HostTokenizer>>)> {
    let version = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let mut services = Services::new().with_version(version.clone());
    let mut tok = match tokenizer {
        Some(path) => Some(Arc::new(
            rollbox_tokenizer::HostTokenizer::load(path)
                .with_context(|| format!("loading the tokenizer {}", path.display()))?,
        )),
        None => None,
    };
    if let Some(spec) = engine {
        let e = engines::build(spec, tok.as_ref(), version)?;
        if tok.is_none() {
            tok = e.tokenizer;
        }
        let backend = match record {
            Some(path) => Arc::new(rollbox_engines::replay::RecordingBackend::new(
                e.backend, path,
            )?),
            None => e.backend,
        };
        services = services.with_backend(backend);
    }
    if let Some(t) = &tok {
        services = services.with_tokenizer(t.clone());
    }
    Ok((services, tok))
}

fn parse_object(what: &str, text: &str) -> anyhow::Result<serde_json::Value> {
    let v: serde_json::Value =
        serde_json::from_str(text).with_context(|| format!("--{what} is not valid JSON"))?;
    if !v.is_object() {
        bail!("--{what} must be a JSON object, e.g. '{{\"input_ids\": [1, 2]}}'");
    }
    Ok(v)
}

/// Reward and tool components to register before running.
struct Components {
    tokenizer: Option<PathBuf>,
    rewards: Vec<limits::Registration>,
    tools: Vec<limits::Registration>,
    /// Where to write the episode's tensors (`--out`).
    out: Option<PathBuf>,
    /// Where to record engine answers (`--record`).
    record: Option<PathBuf>,
}

async fn run(
    workflow: &Path,
    data: &str,
    config: &str,
    engine: Option<&str>,
    components: &Components,
    json: bool,
    limit_args: &limits::LimitArgs,
) -> anyhow::Result<()> {
    let limits = limit_args.to_limits()?;
    let services = services_for(
        engine,
        components.tokenizer.as_deref(),
        components.record.as_deref(),
    )?
    .0;
    let fuel = limits.fuel.is_some()
        || components
            .rewards
            .iter()
            .chain(&components.tools)
            .any(|r| r.policy.limits.fuel.is_some());
    let runtime = Runtime::new(
        RuntimeConfig {
            fuel,
            ..RuntimeConfig::default()
        },
        services,
    )?;
    for r in &components.rewards {
        runtime.register_reward(&r.name, &r.path, r.policy.clone())?;
    }
    for t in &components.tools {
        runtime.register_tool(&t.name, &t.path, t.policy.clone())?;
    }
    let component = runtime.load_workflow(workflow)?;
    let mut request = EpisodeRequest::new("r0-s0", parse_object("data", data)?);
    request.config = parse_object("config", config)?.into();
    let report = runtime
        .run_episode(&component, request, Arc::new(limits))
        .await;
    if let (Some(path), EpisodeOutcome::Accepted(t)) = (&components.out, &report.outcome) {
        let mut meta = std::collections::BTreeMap::new();
        meta.insert("rollbox_version".into(), env!("CARGO_PKG_VERSION").into());
        meta.insert("episode".into(), report.id.clone());
        meta.insert("workflow_sha256".into(), component.info().sha256.clone());
        for r in components.rewards.iter().chain(&components.tools) {
            let info = runtime.inspect(&r.path)?;
            meta.insert(format!("component_sha256.{}", r.name), info.sha256);
        }
        meta.insert("metadata".into(), t.metadata_json.to_string());
        rollbox_tensor::write_safetensors(path, &t.tensors, &meta)
            .with_context(|| format!("writing --out {}", path.display()))?;
    }
    if json {
        let tensors: Vec<serde_json::Value> = match &report.outcome {
            EpisodeOutcome::Accepted(t) => t
                .tensors
                .iter()
                .map(|(k, v)| serde_json::json!({"name": k, "dtype": v.dtype().name(), "shape": v.shape()}))
                .collect(),
            _ => Vec::new(),
        };
        let out = serde_json::json!({
            "summary": report.summary(),
            "tensors": tensors,
            "metadata": match &report.outcome { EpisodeOutcome::Accepted(t) => t.metadata(), _ => serde_json::Value::Null },
            "stats": report.stats,
            "reward_calls": report.reward_calls,
            "logs": report.logs,
            "stdout": report.stdout,
            "stderr": report.stderr,
            "sha256": component.info().sha256,
        });
        println!("{}", serde_json::to_string_pretty(&out)?);
    } else {
        println!(
            "episode  {} ({:.1} ms, {} generate calls, {} tokens)",
            report.id,
            report.wall.as_secs_f64() * 1e3,
            report.generate_calls,
            report.generated_tokens
        );
        match &report.outcome {
            EpisodeOutcome::Accepted(t) => {
                println!("accepted {} tensors", t.tensors.len());
                for (name, tensor) in &t.tensors {
                    println!(
                        "  {name:<16} {:<5} {:?}",
                        tensor.dtype().name(),
                        tensor.shape()
                    );
                }
                println!("metadata {}", t.metadata_json);
            }
            EpisodeOutcome::Rejected => println!("rejected (the workflow returned nothing)"),
            EpisodeOutcome::Failed(f) => println!("failed   [{}] {f}", f.kind()),
        }
        for c in &report.reward_calls {
            println!(
                "reward   {} = {} ({} attempts, {:.2} ms{}{})",
                c.name,
                c.value
                    .map(|v| v.to_string())
                    .unwrap_or_else(|| "none".into()),
                c.attempts,
                c.wall_us as f64 / 1e3,
                if c.timed_out { ", timed out" } else { "" },
                c.error
                    .as_deref()
                    .map(|e| format!(", {e}"))
                    .unwrap_or_default()
            );
        }
        for (k, v) in &report.stats {
            println!("stat     {k} = {v}");
        }
        for l in &report.logs {
            println!("log      [{}] {}", l.level, l.message);
        }
        if !report.stdout.is_empty() {
            println!("stdout   {}", report.stdout.trim_end());
        }
        if !report.stderr.is_empty() {
            println!("stderr   {}", report.stderr.trim_end());
        }
    }
    if matches!(report.outcome, EpisodeOutcome::Failed(_)) {
        std::process::exit(1);
    }
    Ok(())
}
