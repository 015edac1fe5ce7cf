//! One module per subcommand, and the flags they share.
//!
//! A subcommand is a module here with its flags (`#[derive(Args)]`) and an `async fn run`,
//! plus its variant and arm in `main.rs`.

pub mod components;
pub mod inspect;
pub mod new;
pub mod rollout;
pub mod run;
pub mod serve;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::AtomicI32;

use anyhow::{Context as _, bail};
use clap::Args;
use rollbox_engines::{ENGINE_SPECS, EngineSpec};
use rollbox_runtime::{Runtime, Services};
use rollbox_tokenizer::HostTokenizer;

use crate::limits::{Registration, parse_registration, parse_tool_registration};

/// The components and engine of a job: `run`, `rollout` and `serve` flatten these.
#[derive(Args, Debug, Clone, Default)]
pub struct ComponentArgs {
    #[arg(long, value_name = "SPEC", help = format!(
        "Inference engine: {ENGINE_SPECS}. Default: `embedded` for rollout and serve; for run none (generate calls return `unavailable`)"
    ))]
    pub engine: Option<EngineSpec>,
    /// Tokenizer for the `tokenizer` interface: a .gguf file, a tokenizer.json, or a
    /// directory with tokenizer.json (+ tokenizer_config.json). Default: the embedded model's.
    #[arg(long)]
    pub tokenizer: Option<PathBuf>,
    /// Register a reward component: NAME=PATH[,timeout=15s,retries=3,memory=256MiB,fuel=N];
    /// PATH (or NAME alone) may be a built-in's name (`math`). rollout and serve register the
    /// built-in math reward as `math` when none is given.
    #[arg(long = "reward", value_parser = parse_registration)]
    pub rewards: Vec<Registration>,
    /// Register a tool component: NAME=PATH[,timeout=5s,retries=0,memory=128MiB,fuel=N];
    /// PATH (or NAME alone) may be a built-in's name (`calculator`).
    #[arg(long = "tool", value_parser = parse_tool_registration)]
    pub tools: Vec<Registration>,
    /// Append every engine answer to this JSONL file (replay format; re-run with
    /// --engine replay:FILE).
    #[arg(long)]
    pub record: Option<PathBuf>,
    /// The host-wide memory budget (e.g. 8GiB) that every episode's, reward's and tool's
    /// linear memory, tensors and host-call working memory are reserved from; past it the
    /// episode asking gets `limit_exceeded` and new episodes wait. Default 60% of physical
    /// memory (or of the cgroup's limit).
    #[arg(long, value_name = "SIZE")]
    pub max_host_memory: Option<String>,
}

impl ComponentArgs {
    /// Services with the engine and tokenizer asked for: `--tokenizer` when given, else the
    /// embedded engine's own. Returns the tokenizer too.
    pub fn services(&self) -> anyhow::Result<(Services, Option<Arc<HostTokenizer>>)> {
        if let Some(s) = &self.max_host_memory {
            let bytes = crate::limits::parse_size(s).context("--max-host-memory")?;
            rollbox_runtime::host_memory().set_limit(bytes);
        }
        let version = Arc::new(AtomicI32::new(0));
        let mut services = Services::new().with_version(version.clone());
        let mut tok = match &self.tokenizer {
            Some(path) => {
                Some(Arc::new(HostTokenizer::load(path).with_context(|| {
                    format!("loading the tokenizer {}", path.display())
                })?))
            }
            None => None,
        };
        if let Some(spec) = &self.engine {
            let e = spec.build(tok.as_ref(), version)?;
            if tok.is_none() {
                tok = e.tokenizer;
            }
            let backend = match &self.record {
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

    /// Whether any registered component asks for fuel metering.
    pub fn wants_fuel(&self) -> bool {
        self.rewards
            .iter()
            .chain(&self.tools)
            .any(|r| r.policy.limits.fuel.is_some())
    }

    /// Register the rewards and tools with `runtime`; returns each one's `(name, sha256)` (from
    /// the registration, which already read and hashed the file).
    pub fn register(&self, runtime: &Runtime) -> anyhow::Result<Vec<(String, String)>> {
        let mut shas = Vec::new();
        for r in &self.rewards {
            let path = crate::builtin::resolve("reward", &r.path)?;
            let info = runtime
                .register_reward(&r.name, &path, r.policy.clone())
                .with_context(|| registering("reward", r))?;
            shas.push((r.name.clone(), info.sha256));
        }
        for t in &self.tools {
            let path = crate::builtin::resolve("tool", &t.path)?;
            let info = runtime
                .register_tool(&t.name, &path, t.policy.clone())
                .with_context(|| registering("tool", t))?;
            shas.push((t.name.clone(), info.sha256));
        }
        Ok(shas)
    }
}

fn registering(kind: &str, r: &Registration) -> String {
    format!("registering {kind} `{}` ({})", r.name, r.path.display())
}

/// `--what` as a JSON object.
pub fn parse_object(what: &str, text: &str) -> anyhow::Result<serde_json::Value> {
    let v: serde_json::Value =
        serde_json::from_str(text).with_context(|| format!("--{what} is not valid JSON"))?;
    if !v.is_object() {
        bail!("--{what} must be a JSON object, e.g. '{{\"input_ids\": [1, 2]}}'");
    }
    Ok(v)
}
