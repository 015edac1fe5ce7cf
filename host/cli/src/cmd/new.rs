//! `rollbox new workflow|reward|tool NAME --lang rust|python`: a component project that
//! builds as it is, the path a new author takes. The project carries what it needs (the SDK
//! and the WIT, copied from this rollbox), a README with the build and run commands and one
//! test row.

use std::path::PathBuf;

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};

use rollbox_host::sdk::FILES;

mod versions {
    include!(concat!(env!("OUT_DIR"), "/scaffold_versions.rs"));
}

/// What to make.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    /// A workflow (the workflow world): a row in, trajectories out.
    Workflow,
    /// A reward (the reward world): a completion in, a score out; sandboxed, imports only log.
    Reward,
    /// A tool (the tool world): a call in, its output out; sandboxed, imports only log.
    Tool,
}

/// The language of the project.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Lang {
    /// A cdylib crate built for wasm32-wasip2.
    Rust,
    /// A module built with componentize-py.
    Python,
}

/// Flags of `rollbox new`.
#[derive(Args, Debug)]
pub struct NewArgs {
    /// What to make.
    kind: Kind,
    /// The component's name (lowercase letters, digits, `-`, `_`); also the folder's.
    name: String,
    /// The language.
    #[arg(long, value_enum, default_value = "rust")]
    lang: Lang,
    /// Where to make the folder (default: here).
    #[arg(long, default_value = ".")]
    dir: PathBuf,
}

impl Kind {
    fn world(self) -> &'static str {
        match self {
            Kind::Workflow => "workflow",
            Kind::Reward => "reward",
            Kind::Tool => "tool",
        }
    }
}

/// Write the project; print where and what to run next.
pub fn run(a: NewArgs) -> anyhow::Result<()> {
    let name = a.name.as_str();
    let valid = name.starts_with(|c: char| c.is_ascii_lowercase())
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_');
    if !valid || name.len() > 64 {
        bail!(
            "`{name}` is not a component name: use lowercase letters, digits, `-` and `_`, starting with a letter (e.g. `my-reward`)"
        );
    }
    let root = a.dir.join(name);
    if root.exists() {
        bail!(
            "{} exists already; choose another NAME or --dir",
            root.display()
        );
    }
    let files = project(a.kind, a.lang, name);
    for (path, text) in &files {
        let path = root.join(path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, text).with_context(|| format!("writing {}", path.display()))?;
    }
    #[cfg(unix)]
    if a.lang == Lang::Python {
        use std::os::unix::fs::PermissionsExt as _;
        std::fs::set_permissions(
            root.join("build.sh"),
            std::fs::Permissions::from_mode(0o755),
        )?;
    }
    println!(
        "made {} ({} {}, {} files); next: see {}",
        root.display(),
        match a.lang {
            Lang::Rust => "Rust",
            Lang::Python => "Python",
        },
        a.kind.world(),
        files.len(),
        root.join("README.md").display()
    );
    Ok(())
}

/// `my-reward` -> `MyReward`.
fn type_name(name: &str) -> String {
    name.split(['-', '_'])
        .map(|p| {
            let mut c = p.chars();
            c.next()
                .map(|f| f.to_ascii_uppercase().to_string() + c.as_str())
                .unwrap_or_default()
        })
        .collect()
}

/// The project's files.
fn project(kind: Kind, lang: Lang, name: &str) -> Vec<(PathBuf, String)> {
    let ty = type_name(name);
    let module = name.replace('-', "_");
    let world = kind.world();
    let fill = |t: &str| {
        t.replace("{{name}}", name)
            .replace("{{type}}", &ty)
            .replace("{{module}}", &module)
            .replace("{{world}}", world)
            .replace("{{rollbox}}", env!("CARGO_PKG_VERSION"))
    };
    let mut out: Vec<(PathBuf, String)> = Vec::new();
    let sdk = |out: &mut Vec<(PathBuf, String)>, prefix: &str| {
        for (path, text) in FILES.iter().filter(|(p, _)| p.starts_with(prefix)) {
            out.push((PathBuf::from(path), (*text).to_string()));
        }
    };
    sdk(&mut out, "wit/");
    out.push((
        "data.jsonl".into(),
        match kind {
            Kind::Tool => "{\"name\": \"reverse\", \"args\": {\"text\": \"rollbox\"}}\n".into(),
            _ => "{\"question\": \"What is 6 * 7?\", \"answer\": \"42\"}\n".into(),
        },
    ));
    match lang {
        Lang::Rust => {
            sdk(&mut out, "rollbox-sdk/");
            out.push((
                "rollbox-sdk/Cargo.toml".into(),
                format!(
                    "[package]\nname = \"rollbox-sdk\"\nversion = \"{}\"\nedition = \"2024\"\npublish = false\n\n[dependencies]\nwit-bindgen = {{ version = \"{}\", default-features = false, features = [\"macros\", \"realloc\", \"std\"] }}\nserde_json = {{ version = \"{}\", features = [\"preserve_order\", \"raw_value\"] }}\n\n[features]\ndefault = [\"workflow\"]\nworkflow = []\nreward = []\ntool = []\n",
                    env!("CARGO_PKG_VERSION"),
                    versions::WIT_BINDGEN,
                    versions::SERDE_JSON
                ),
            ));
            out.push(("Cargo.toml".into(), fill(RUST_CARGO)));
            out.push(("rust-toolchain.toml".into(), RUST_TOOLCHAIN.into()));
            out.push((
                "src/lib.rs".into(),
                fill(match kind {
                    Kind::Workflow => RUST_WORKFLOW,
                    Kind::Reward => RUST_REWARD,
                    Kind::Tool => RUST_TOOL,
                }),
            ));
            out.push(("README.md".into(), fill(&readme(kind, lang))));
        }
        Lang::Python => {
            sdk(&mut out, "rollbox_sdk/");
            out.push((
                format!("{module}.py").into(),
                fill(match kind {
                    Kind::Workflow => PY_WORKFLOW,
                    Kind::Reward => PY_REWARD,
                    Kind::Tool => PY_TOOL,
                }),
            ));
            out.push((
                "build.sh".into(),
                fill(PY_BUILD).replace(
                    "{{stub}}",
                    if kind == Kind::Workflow {
                        ""
                    } else {
                        " --stub-wasi"
                    },
                ),
            ));
            out.push(("README.md".into(), fill(&readme(kind, lang))));
        }
    }
    out
}

fn readme(kind: Kind, lang: Lang) -> String {
    let (build, wasm) = match lang {
        Lang::Rust => (
            "cargo build --release --target wasm32-wasip2",
            "target/wasm32-wasip2/release/{{module}}.wasm",
        ),
        Lang::Python => (
            "pip install componentize-py==0.25.1   # once\n./build.sh",
            "{{module}}.wasm",
        ),
    };
    let try_it = match kind {
        Kind::Workflow => format!(
            "rollbox run {wasm} --engine embedded --data \"$(head -1 data.jsonl)\"   # one episode\nrollbox rollout data.jsonl --workflow {wasm} --out out   # the dataset, GRPO groups"
        ),
        Kind::Reward => format!(
            "rollbox rollout data.jsonl --reward {{{{name}}}}={wasm},timeout=5s --config '{{\"reward\": \"{{{{name}}}}\"}}' --out out"
        ),
        Kind::Tool => format!(
            "rollbox run WORKFLOW.wasm --tool {{{{name}}}}={wasm},timeout=5s ...   # a workflow that calls it (tools.call)"
        ),
    };
    format!(
        "# {{{{name}}}}\n\nA rollbox {{{{world}}}} component, made by `rollbox new` (rollbox {{{{rollbox}}}}).\n\n\
         Build:\n\n```sh\n{build}\n```\n\nTry it:\n\n```sh\n{try_it}\n```\n\n\
         `data.jsonl` holds one test row. The SDK and the WIT are copied in (`wit/`, {sdk}); a newer\n\
         rollbox's `rollbox new` writes newer copies.\n",
        sdk = match lang {
            Lang::Rust => "`rollbox-sdk/`",
            Lang::Python => "`rollbox_sdk/`",
        }
    )
}

const RUST_TOOLCHAIN: &str =
    "[toolchain]\nchannel = \"1.95.0\"\ntargets = [\"wasm32-wasip2\"]\nprofile = \"minimal\"\n";

const RUST_CARGO: &str = r#"[package]
name = "{{name}}"
version = "0.1.0"
edition = "2024"
publish = false

[lib]
crate-type = ["cdylib"]

[dependencies]
rollbox-sdk = { path = "rollbox-sdk", default-features = false, features = ["{{world}}"] }
serde_json = "1"

[profile.release]
opt-level = 3
strip = true

# Its own workspace, wherever the folder is.
[workspace]
"#;

const RUST_WORKFLOW: &str = r#"//! {{name}}: one chat turn. The prompt comes from the row (`messages`, `prompt`, `question` or
//! `problem`; config `prompt_key`), one generation, then the reward component the config names
//! (`reward`, default `math`) scores it against the row's answer.

use rollbox_sdk::trajectory::single_turn;
use rollbox_sdk::{
    Episode, Error, ModelRequest, Output, RewardInput, Workflow, engine, log, rewards, tokenizer,
};

struct {{type}};

impl Workflow for {{type}} {
    fn run_episode(episode: Episode) -> Result<Option<Output>, Error> {
        let reward = episode.config["reward"].as_str().unwrap_or("math").to_string();
        let input_ids =
            tokenizer::apply_chat_template(&episode.messages()?, &episode.chat_options())?;
        let resp = engine::generate(&ModelRequest::new(input_ids.clone(), episode.gconfig()?))?;
        let input = RewardInput {
            prompt: tokenizer::decode(&input_ids, false)?,
            completion: tokenizer::decode(&resp.output_tokens, false)?,
            prompt_ids: resp.input_tokens.clone(),
            completion_ids: resp.output_tokens.clone(),
            data: episode.reward_data()?,
        };
        let scored = rewards::score(&reward, &input)?;
        log::stat("reward", scored.value);
        Ok(Some(single_turn(&resp, scored.value as f32)?))
    }
}

rollbox_sdk::export_workflow!({{type}});
"#;

const RUST_REWARD: &str = r#"//! {{name}}: 1.0 when the last number in the completion is the row's `answer`, else 0.0.

use rollbox_sdk::Error;
use rollbox_sdk::reward::{Reward, RewardInput};

struct {{type}};

impl Reward for {{type}} {
    fn score(input: RewardInput) -> Result<f64, Error> {
        let row: serde_json::Value = serde_json::from_str(&input.data)?;
        let answer = match &row["answer"] {
            serde_json::Value::String(s) => s.trim().to_string(),
            serde_json::Value::Number(n) => n.to_string(),
            _ => return Err(Error::msg("the row has no `answer`")),
        };
        let last = input
            .completion
            .split(|c: char| !(c.is_ascii_digit() || c == '.' || c == '-'))
            .map(|t| t.trim_end_matches('.'))
            .filter(|t| t.chars().any(|c| c.is_ascii_digit()))
            .last();
        Ok(if last == Some(answer.as_str()) { 1.0 } else { 0.0 })
    }
}

rollbox_sdk::export_reward!({{type}});
"#;

const RUST_TOOL: &str = r#"//! {{name}}: `reverse` returns `args.text` reversed.

use rollbox_sdk::Error;
use rollbox_sdk::tool::Tool;

struct {{type}};

impl Tool for {{type}} {
    fn describe() -> serde_json::Value {
        serde_json::json!({
            "description": "Reverse a text.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "The text to reverse"}},
                "required": ["text"]
            }
        })
    }

    fn call(name: String, args: String) -> Result<String, Error> {
        let args: serde_json::Value = serde_json::from_str(&args)?;
        match name.as_str() {
            "reverse" => {
                let text = args["text"]
                    .as_str()
                    .ok_or_else(|| Error::msg("`text` (a string) is missing"))?;
                Ok(text.chars().rev().collect())
            }
            other => Err(Error::msg(format!("no tool `{other}`; this component has `reverse`"))),
        }
    }
}

rollbox_sdk::export_tool!({{type}});
"#;

const PY_WORKFLOW: &str = r#""""{{name}}: one chat turn, as AReaL's RLVRWorkflow. The prompt comes from the row (`messages`,
`prompt`, `question` or `problem`), one generation, then the reward component the config names
(`reward`, default `math`) scores it against the row's answer.
"""

import rollbox_sdk as rollbox
from rollbox_sdk import AsyncRewardWrapper, GenerationHyperparameters, ModelRequest, RolloutWorkflow


class {{type}}(RolloutWorkflow):
    def __init__(self, reward_fn: str = "math", gconfig: GenerationHyperparameters | None = None):
        self.reward = AsyncRewardWrapper(reward_fn)
        self.gconfig = gconfig or GenerationHyperparameters(max_new_tokens=256)

    @classmethod
    def from_config(cls, config: dict):
        return cls(
            reward_fn=config.get("reward", "math"),
            gconfig=GenerationHyperparameters.from_config(config.get("gconfig")),
        )

    async def arun_episode(self, engine, data):
        config = rollbox.episode.config
        messages = rollbox.prompt_messages(data, config)
        input_ids = rollbox.apply_chat_template(
            rollbox.tokenizer, messages, tokenize=True, add_generation_prompt=True
        )
        resp = await engine.agenerate(ModelRequest(input_ids=input_ids, gconfig=self.gconfig))
        tok = rollbox.tokenizer
        reward = await self.reward(
            tok.decode(input_ids),
            tok.decode(resp.output_tokens),
            resp.input_tokens,
            resp.output_tokens,
            **rollbox.reward_data(data, config),
        )
        rollbox.stats_tracker.get(rollbox.workflow_context.stat_scope()).scalar(reward=reward)
        return rollbox.single_turn(resp, reward)


WitWorld = rollbox.export({{type}})
"#;

const PY_REWARD: &str = r#""""{{name}}: 1.0 when the last number in the completion is the row's `answer`, else 0.0."""

import json
import re

import wit_world
from componentize_py_types import Err


class WitWorld(wit_world.WitWorld):
    def score(self, input) -> float:
        row = json.loads(input.data) if input.data else {}
        if not isinstance(row, dict) or "answer" not in row:
            raise Err("the row has no `answer`")
        numbers = re.findall(r"-?\d+(?:\.\d+)?", input.completion)
        return 1.0 if numbers and numbers[-1] == str(row["answer"]).strip() else 0.0
"#;

const PY_TOOL: &str = r#""""{{name}}: `reverse` returns `args["text"]` reversed."""

import json

import wit_world
from componentize_py_types import Err


class WitWorld(wit_world.WitWorld):
    def describe(self) -> str:
        return json.dumps({
            "description": "Reverse a text.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "The text to reverse"}},
                "required": ["text"],
            },
        })

    def call(self, name: str, args: str) -> str:
        if name != "reverse":
            raise Err(f"no tool `{name}`; this component has `reverse`")
        text = json.loads(args).get("text")
        if not isinstance(text, str):
            raise Err("`text` (a string) is missing")
        return text[::-1]
"#;

const PY_BUILD: &str = r#"#!/usr/bin/env bash
# Build {{module}}.wasm (a rollbox {{world}} component) with componentize-py 0.25.1.
set -euo pipefail
cd "$(dirname "$0")"
componentize-py -d wit -w {{world}} componentize{{stub}} -p . {{module}} -o {{module}}.wasm
echo "built $(pwd)/{{module}}.wasm"
"#;
