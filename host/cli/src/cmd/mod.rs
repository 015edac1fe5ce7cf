//! One module per subcommand, and the flags they share.
//!
//! A subcommand is a module here with its flags (`#[derive(Args)]`) and an `async fn run`,
//! plus its variant and arm in `main.rs`.

pub mod build;
pub mod components;
pub mod inspect;
pub mod new;
pub mod rollout;
pub mod run;
pub mod serve;

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::Args;
use rollbox_engines::{ENGINE_SPECS, EngineSpec};
use rollbox_host::{ComponentSpec, HostSpec};

use crate::limits::{HostArgs, LimitArgs, parse_registration};

/// A `--reward`/`--tool` registration: the name workflows use and the component.
#[derive(Debug, Clone)]
pub struct Registration {
    /// The name workflows call it by.
    pub name: String,
    /// The component and its call policy.
    pub spec: ComponentSpec,
}

fn registration(s: &str) -> Result<Registration, String> {
    parse_registration(s).map(|(name, spec)| Registration { name, spec })
}

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
    /// Register a reward component: NAME=PATH[,timeout=15s,retries=3,memory=256MiB,fuel=N]
    /// (any limit flag's name works as an option: max_boundary_bytes=1MiB); PATH (or NAME
    /// alone) may be a built-in's name (`math`). rollout and serve register the built-in
    /// math reward as `math` when none is given.
    #[arg(long = "reward", value_parser = registration)]
    pub rewards: Vec<Registration>,
    /// Register a tool component: NAME=PATH[,timeout=5s,retries=0,memory=128MiB,fuel=N];
    /// PATH (or NAME alone) may be a built-in's name (`calculator`).
    #[arg(long = "tool", value_parser = registration)]
    pub tools: Vec<Registration>,
    /// Append every engine answer to this JSONL file (replay format; re-run with
    /// --engine replay:FILE).
    #[arg(long)]
    pub record: Option<PathBuf>,
    #[command(flatten)]
    pub host: HostArgs,
}

impl ComponentArgs {
    /// The host spec of `workflow` with these components, `limits` and `config`.
    pub fn spec(
        &self,
        workflow: PathBuf,
        limits: &LimitArgs,
        config: serde_json::Value,
    ) -> anyhow::Result<HostSpec> {
        let mut spec = HostSpec::new(workflow);
        spec.rewards = by_name("--reward", &self.rewards)?;
        spec.tools = by_name("--tool", &self.tools)?;
        spec.tokenizer = self.tokenizer.clone();
        spec.engine = self.engine.clone();
        spec.record = self.record.clone();
        spec.limits = limits.0.clone();
        spec.config = config;
        self.host.apply(&mut spec)?;
        Ok(spec)
    }
}

/// Registrations by name; a name given twice is refused.
fn by_name(flag: &str, list: &[Registration]) -> anyhow::Result<BTreeMap<String, ComponentSpec>> {
    let mut map = BTreeMap::new();
    for r in list {
        if map.insert(r.name.clone(), r.spec.clone()).is_some() {
            bail!("{flag} `{}` is given twice; give each name once", r.name);
        }
    }
    Ok(map)
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
