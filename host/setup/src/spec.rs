//! [`HostSpec`]: everything a rollbox host is built from, as data. The CLI fills it from flags
//! and a TOML file, the Python package from keyword arguments, an embedding program from code
//! or JSON; [`HostSpec::build`](crate::HostSpec::build) turns it into a [`Host`](crate::Host).
//!
//! Limits are keyed by the runtime's table ([`LIMIT_KEYS`](rollbox_runtime::limits::LIMIT_KEYS)): every entry point takes the same
//! keys with the same grammar, and a key it does not know is refused with the list.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rollbox_engines::EngineSpec;
use rollbox_runtime::limits::{LimitKey, LimitUnit};
use rollbox_runtime::{CallPolicy, LimitError, LimitSpec};
use serde::de::Error as _;
use serde::{Deserialize, Deserializer};

/// Everything a [`Host`](crate::Host) is built from.
///
/// ```
/// let spec: rollbox_host::HostSpec = serde_json::from_str(r#"{
///     "workflow": "rlvr",
///     "rewards": {"math": {"path": "math", "timeout": "5s", "fuel": 100000000}},
///     "engine": "replay:answers.jsonl",
///     "limits": {"timeout": "60s", "max_memory": "256MiB"},
///     "config": {"reward": "math"}
/// }"#).unwrap();
/// assert_eq!(spec.rewards["math"].retries, None);
/// assert!(spec.wants_fuel());
/// ```
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HostSpec {
    /// The workflow component: a `.wasm` path, or a built-in's name (`rlvr`).
    pub workflow: PathBuf,
    /// Other workflows by name (a `.wasm` path or a built-in's name each), compiled with the
    /// host for whoever runs episodes by name (`rollbox serve`'s requests); never `default`.
    #[serde(default)]
    pub workflows: BTreeMap<String, PathBuf>,
    /// Reward components by the name workflows call them with.
    #[serde(default)]
    pub rewards: BTreeMap<String, ComponentSpec>,
    /// Tool components by name.
    #[serde(default)]
    pub tools: BTreeMap<String, ComponentSpec>,
    /// Environment components by name (the `environment` world), each opened per episode
    /// (`Components::open_environment`) under its limits (a tool's defaults).
    #[serde(default)]
    pub environments: BTreeMap<String, ComponentSpec>,
    /// The tokenizer of the `tokenizer` interface: a `.gguf`, a `tokenizer.json`, or a folder
    /// with one. Default: the engine's own (the embedded model's).
    #[serde(default)]
    pub tokenizer: Option<PathBuf>,
    /// The inference engine (`embedded`, `sglang:URL`, `replay:FILE`, ...). `None`: no engine
    /// of rollbox's; generate calls get `unavailable` unless the embedder brings its own
    /// ([`HostSpec::build_with_engine`](crate::HostSpec::build_with_engine)).
    #[serde(default, deserialize_with = "engine_spec")]
    pub engine: Option<EngineSpec>,
    /// Append every engine answer to this JSONL file (replay format).
    #[serde(default)]
    pub record: Option<PathBuf>,
    /// Limits of each workflow episode, over [`Limits::default`].
    #[serde(default)]
    pub limits: LimitSpec,
    /// The host-wide memory budget, bytes: every episode's, reward's and tool's memory is
    /// reserved from it. `None`: 60% of physical memory (or of the cgroup's limit).
    #[serde(default, deserialize_with = "size_opt")]
    pub max_host_memory: Option<u64>,
    /// Sandbox instances alive at once (the pool's slots), across episodes, rewards and
    /// tools. `None`: the runtime's default (1 000).
    #[serde(default)]
    pub max_instances: Option<u32>,
    /// The workflow's configuration, a JSON object.
    #[serde(default = "empty_object", deserialize_with = "object")]
    pub config: serde_json::Value,
}

impl HostSpec {
    /// A spec of `workflow` alone: no engine, rewards or tools, default limits, `{}` config.
    pub fn new(workflow: impl Into<PathBuf>) -> Self {
        HostSpec {
            workflow: workflow.into(),
            workflows: BTreeMap::new(),
            rewards: BTreeMap::new(),
            tools: BTreeMap::new(),
            environments: BTreeMap::new(),
            tokenizer: None,
            engine: None,
            record: None,
            limits: LimitSpec::default(),
            max_host_memory: None,
            max_instances: None,
            config: empty_object(),
        }
    }

    /// Whether any limit of the spec sets fuel: the runtime then meters fuel (which costs
    /// 10-20% of guest speed, so it is off otherwise).
    pub fn wants_fuel(&self) -> bool {
        self.limits.sets_fuel()
            || self
                .rewards
                .values()
                .chain(self.tools.values())
                .chain(self.environments.values())
                .any(|c| c.limits.sets_fuel())
    }
}

/// A host-wide setting: one value for the host as a whole (every episode, reward and tool
/// call it runs), where a limit of [`LIMIT_KEYS`](rollbox_runtime::limits::LIMIT_KEYS) holds per
/// episode or call. [`HOST_KEYS`] is every one: each edge reads them the same way, by key, and
/// a key is the [`HostSpec`] field it sets, the `rollbox` flag with dashes
/// (`--max-host-memory`) and the Python keyword.
#[derive(Debug)]
pub struct HostKey {
    /// The key, `snake_case`.
    pub key: &'static str,
    /// What it bounds, with its default.
    pub help: &'static str,
    /// How its value is written.
    pub unit: LimitUnit,
    set: fn(&mut HostSpec, u64),
}

/// Every host-wide setting.
pub const HOST_KEYS: &[HostKey] = &[
    HostKey {
        key: "max_host_memory",
        help: "The host's memory budget (e.g. 8GiB), which every episode's, reward's and tool's linear memory, tensors, request bodies and host-call working memory are reserved from; past it the caller gets `limit_exceeded` and new episodes wait. Each host has its own; hosts that set none share one default: 60% of physical memory (or of the cgroup's limit)",
        unit: LimitUnit::Bytes,
        set: |s, v| s.max_host_memory = Some(v),
    },
    HostKey {
        key: "max_instances",
        help: "Sandbox instances alive at once (the pool's slots), across episodes, rewards and tools. Default 1000",
        unit: LimitUnit::Count,
        set: |s, v| s.max_instances = Some(u32::try_from(v).unwrap_or(u32::MAX)),
    },
];

impl HostKey {
    /// The entry of `key`; `None` for an unknown key.
    pub fn find(key: &str) -> Option<&'static HostKey> {
        HOST_KEYS.iter().find(|k| k.key == key)
    }

    /// The keys, for messages.
    pub fn names() -> String {
        HOST_KEYS
            .iter()
            .map(|k| k.key)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl HostSpec {
    /// Set the host-wide setting `key` ([`HOST_KEYS`]) from its text (`8GiB`, `500`).
    pub fn set_host_text(&mut self, key: &str, text: &str) -> Result<(), String> {
        let k = HostKey::find(key).ok_or_else(|| {
            format!(
                "unknown host-wide setting `{key}`; use {}",
                HostKey::names()
            )
        })?;
        let value = match k.unit {
            LimitUnit::Bytes => rollbox_runtime::limits::parse_size(text).map(|n| n as u64),
            _ => text
                .trim()
                .parse::<u64>()
                .map_err(|_| format!("`{text}` is not a whole number")),
        }
        .map_err(|e| format!("{key}: {e}"))?;
        if value == 0 {
            return Err(format!("{key}: give a positive value (or leave it out)"));
        }
        (k.set)(self, value);
        Ok(())
    }
}

/// A reward or tool: the component and its call policy over the defaults of its kind
/// (rewards: 15 s, 256 MiB, 3 retries; tools: 5 s, 128 MiB, no retries).
///
/// Written as a string `PATH[,key=value...]` or as `{"path": ..., "retries": N, <limit
/// key>: value, ...}`; the keys are `retries`, the limit keys ([`LIMIT_KEYS`](rollbox_runtime::limits::LIMIT_KEYS), `memory`
/// for `max_memory`), and for a Python file `style` and `requirements`.
#[derive(Debug, Clone, PartialEq)]
pub struct ComponentSpec {
    /// A `.wasm` path, a built-in's name (`math`, `calculator`), or a Python file
    /// (`my_reward.py[:FUNCTION]`, built on first use: [`crate::pybuild`]).
    pub path: PathBuf,
    /// Attempts after the first one; `None`: the kind's default.
    pub retries: Option<u32>,
    /// Limits of each call, over the kind's defaults.
    pub limits: LimitSpec,
    /// A Python reward's trainer shape (`verl`, `trl`, `areal`, `openrlhf`); `None`: told from
    /// its parameters.
    pub style: Option<String>,
    /// A Python file's requirements file; `None`: its third-party imports.
    pub requirements: Option<PathBuf>,
}

impl ComponentSpec {
    /// The component at `path` with its kind's defaults.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        ComponentSpec {
            path: path.into(),
            retries: None,
            limits: LimitSpec::default(),
            style: None,
            requirements: None,
        }
    }

    /// `PATH[,key=value...]` (a path, or a built-in's name, then options).
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts = text.split(',');
        let path = parts.next().unwrap_or_default().trim();
        if path.is_empty() {
            return Err(format!(
                "`{text}` names no component: use PATH or a built-in's name [,timeout=15s,retries=3,memory=256MiB,fuel=N]"
            ));
        }
        let mut spec = ComponentSpec::new(path);
        for opt in parts {
            let Some((k, v)) = opt.split_once('=') else {
                return Err(format!("option `{opt}` in `{text}` should be key=value"));
            };
            spec.set(k.trim(), v)
                .map_err(|e| format!("in `{text}`: {e}"))?;
        }
        Ok(spec)
    }

    /// Set option `key` (`retries`, `style`, `requirements` or a limit key) from its text.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), String> {
        match key {
            "style" => {
                self.style = Some(value.trim().to_string());
                return Ok(());
            }
            "requirements" => {
                self.requirements = Some(PathBuf::from(value.trim()));
                return Ok(());
            }
            _ => {}
        }
        if key == "retries" {
            self.retries = Some(
                value
                    .trim()
                    .parse()
                    .map_err(|_| format!("retries `{value}` is not a whole number"))?,
            );
            return Ok(());
        }
        self.limits.set_text(key, value).map_err(|e| match e {
            LimitError::Unknown(k) => format!(
                "unknown option `{k}`; use retries, style, requirements or a limit ({})",
                LimitKey::names()
            ),
            LimitError::Value(e) => e,
        })
    }

    /// The call policy: `defaults` with this spec's settings, validated.
    pub fn policy(&self, defaults: CallPolicy) -> anyhow::Result<CallPolicy> {
        Ok(CallPolicy {
            limits: std::sync::Arc::new(self.limits.apply((*defaults.limits).clone())?),
            retries: self.retries.unwrap_or(defaults.retries),
        })
    }
}

impl<'de> Deserialize<'de> for ComponentSpec {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        match serde_json::Value::deserialize(d)? {
            serde_json::Value::String(s) => ComponentSpec::parse(&s).map_err(D::Error::custom),
            serde_json::Value::Object(map) => {
                let mut spec = ComponentSpec::new(PathBuf::new());
                for (k, v) in map {
                    match (k.as_str(), v) {
                        ("path", serde_json::Value::String(p)) => spec.path = p.into(),
                        ("path", _) => return Err(D::Error::custom("`path` must be a string")),
                        (k, v) => spec.set(k, &value_text(&v)).map_err(D::Error::custom)?,
                    }
                }
                if spec.path.as_os_str().is_empty() {
                    return Err(D::Error::custom(
                        "a component needs a `path` (a .wasm file or a built-in's name)",
                    ));
                }
                Ok(spec)
            }
            _ => Err(D::Error::custom(
                "a component is \"PATH[,timeout=15s,...]\" or {\"path\": ..., \"timeout\": ...}",
            )),
        }
    }
}

/// A JSON value as option text: strings as they are, numbers and the rest as JSON.
fn value_text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

fn empty_object() -> serde_json::Value {
    serde_json::Value::Object(serde_json::Map::new())
}

fn object<'de, D: Deserializer<'de>>(d: D) -> Result<serde_json::Value, D::Error> {
    let v = serde_json::Value::deserialize(d)?;
    if !v.is_object() {
        return Err(D::Error::custom(
            "config must be a JSON object, e.g. {\"reward\": \"math\"}",
        ));
    }
    Ok(v)
}

fn engine_spec<'de, D: Deserializer<'de>>(d: D) -> Result<Option<EngineSpec>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|s| s.parse().map_err(D::Error::custom))
        .transpose()
}

fn size_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<serde_json::Value>::deserialize(d)? {
        None => Ok(None),
        Some(serde_json::Value::Number(n)) => n
            .as_u64()
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("`{n}` is not a number of bytes"))),
        Some(serde_json::Value::String(s)) => rollbox_runtime::limits::parse_size(&s)
            .map(|n| Some(n as u64))
            .map_err(D::Error::custom),
        Some(other) => Err(D::Error::custom(format!(
            "`{other}` is not a size like 8GiB"
        ))),
    }
}

#[cfg(test)]
mod tests;
