//! One workflow episode's request and report: what goes in, and the outcome (accepted
//! tensors, rejected, or a typed failure) with the episode's captured output, logs and stats;
//! and taking a returned output out of the store. `Runtime::run_episode` runs it.

use std::sync::Arc;
use std::time::Duration;

use rollbox_tensor::{HostTensor, TensorData};
use serde::Serialize;

use crate::bindings;
use crate::bindings::episode::EpisodeOutput;
use crate::budget::Reservation;
use crate::component::ComponentInfo;
use crate::fault::GuestFault;
use crate::limits::Limits;
use crate::registry::Registries;
use crate::scope::Scope;
use crate::services::Services;
use crate::state::{CallCtx, Sandboxed, StoreState};
use crate::views::{
    CallsView, EngineState, EngineView, EpisodeCalls, HostView, TensorLedger, TensorView,
};

pub use crate::state::LogLine;
pub use crate::views::RewardRecord;

/// The episode side of the store: the call's [`CallCtx`], the host's services, and one state
/// per host interface family ([`crate::views`]), each reached by its interfaces through a view
/// of its own. Read back after the call into an `EpisodeReport`.
pub(crate) struct EpisodeCtx {
    /// What every guest call has (limits, output, logs, deadline).
    pub(crate) call: CallCtx,
    pub(crate) services: Arc<Services>,
    /// `engine`'s counters.
    pub(crate) engine: EngineState,
    /// `tensor`'s and `vision`'s tensors.
    pub(crate) tensors: TensorLedger,
    /// `rewards`' and `tools`' scope and records.
    pub(crate) calls: EpisodeCalls,
}

impl Sandboxed for EpisodeCtx {
    fn call(&self) -> &CallCtx {
        &self.call
    }
    fn call_mut(&mut self) -> &mut CallCtx {
        &mut self.call
    }
}

/// An episode's store state.
pub(crate) type EpisodeState = StoreState<EpisodeCtx>;

impl StoreState<EpisodeCtx> {
    /// An episode's store state: [`StoreState::with`] and the episode's counters, with
    /// `services` for its host calls, reaching the rewards and tools of `scope`.
    pub(crate) fn episode(
        id: String,
        limits: Arc<Limits>,
        services: Arc<Services>,
        (registries, scope): (Arc<Registries>, Scope),
        seed: u64,
    ) -> Self {
        StoreState::with(id, limits, services.host_memory().clone(), seed, |call| {
            EpisodeCtx {
                call,
                services,
                engine: EngineState::default(),
                tensors: TensorLedger::default(),
                calls: EpisodeCalls::new(registries, scope),
            }
        })
    }

    /// `engine`'s view of the store.
    pub(crate) fn engine_view(&mut self) -> EngineView<'_> {
        let cx = &mut self.ctx;
        EngineView {
            call: &mut cx.call,
            services: &cx.services,
            state: &mut cx.engine,
        }
    }

    /// `tensor`'s and `vision`'s view of the store.
    pub(crate) fn tensor_view(&mut self) -> TensorView<'_> {
        let cx = &mut self.ctx;
        TensorView {
            table: &mut self.table,
            call: &mut cx.call,
            services: &cx.services,
            ledger: &mut cx.tensors,
        }
    }

    /// `rewards`' and `tools`' view of the store.
    pub(crate) fn calls_view(&mut self) -> CallsView<'_> {
        let cx = &mut self.ctx;
        CallsView {
            call: &mut cx.call,
            services: &cx.services,
            calls: &mut cx.calls,
        }
    }

    /// `tokenizer`'s view of the store.
    pub(crate) fn host_view(&mut self) -> HostView<'_> {
        let cx = &mut self.ctx;
        HostView {
            call: &mut cx.call,
            services: &cx.services,
        }
    }
}

/// A compiled, type-checked workflow component, ready to instantiate per episode.
#[derive(Clone)]
pub struct WorkflowComponent {
    pub(crate) info: ComponentInfo,
    pub(crate) pre: bindings::workflow::WorkflowPre<EpisodeState>,
}

impl WorkflowComponent {
    /// Where it came from, its hash, imports and exports.
    pub fn info(&self) -> &ComponentInfo {
        &self.info
    }
}

/// A JSON value held as its compact text and shared: a dataset row or a workflow config is
/// serialized once, and every episode given it gets the same text (the guest receives JSON
/// text anyway), instead of a deep copy of a parsed value serialized again per episode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonText(Arc<str>);

impl JsonText {
    /// The JSON text.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The value, parsed again.
    pub fn to_value(&self) -> serde_json::Result<serde_json::Value> {
        serde_json::from_str(&self.0)
    }

    /// JSON text checked to be one valid JSON value (without building it).
    pub fn parse(text: String) -> serde_json::Result<JsonText> {
        serde_json::from_str::<serde::de::IgnoredAny>(&text)?;
        Ok(JsonText(text.into()))
    }
}

impl From<&serde_json::Value> for JsonText {
    fn from(v: &serde_json::Value) -> Self {
        JsonText(v.to_string().into())
    }
}

impl From<serde_json::Value> for JsonText {
    fn from(v: serde_json::Value) -> Self {
        JsonText::from(&v)
    }
}

impl std::fmt::Display for JsonText {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// What the host gives a workflow for one episode.
#[derive(Debug, Clone, PartialEq)]
pub struct EpisodeRequest {
    /// Unique id, e.g. `r12-s3`.
    pub id: String,
    /// The dataset row (a JSON object).
    pub data: JsonText,
    /// The workflow's configuration (a JSON object).
    pub config: JsonText,
    /// Index in the GRPO group.
    pub sample_index: u32,
    /// Seed for the workflow's own randomness.
    pub seed: u64,
}

impl EpisodeRequest {
    /// A request for one row with an empty config.
    pub fn new(id: impl Into<String>, data: impl Into<JsonText>) -> Self {
        EpisodeRequest {
            id: id.into(),
            data: data.into(),
            config: JsonText("{}".into()),
            sample_index: 0,
            seed: 0,
        }
    }
}

/// The trajectories of an accepted episode.
#[derive(Debug, Clone)]
pub struct Trajectory {
    /// The tensor dict, in the order the workflow returned it.
    pub tensors: Vec<(String, HostTensor)>,
    /// The workflow's metadata object as the JSON text it returned (checked to be an object;
    /// kept as text, since most runs only write or forward it).
    pub metadata_json: JsonText,
    /// The episode's share of the host-wide memory budget for these tensors, given back when
    /// the last clone of the trajectory is dropped (after its batch is written).
    pub memory: Arc<Reservation>,
}

impl Trajectory {
    /// The workflow's metadata object, parsed.
    pub fn metadata(&self) -> serde_json::Value {
        self.metadata_json.to_value().unwrap_or_default()
    }

    /// The tensor named `key`.
    pub fn get(&self, key: &str) -> Option<&HostTensor> {
        self.tensors.iter().find(|(k, _)| k == key).map(|(_, t)| t)
    }

    /// The values of the f32 tensor `key` (`None`: absent or another dtype).
    pub fn f32s(&self, key: &str) -> Option<Vec<f32>> {
        match self.get(key)?.data().ok()? {
            TensorData::F32(v) => Some(v),
            _ => None,
        }
    }

    /// The values of the i32 tensor `key` (`None`: absent or another dtype).
    pub fn i32s(&self, key: &str) -> Option<Vec<i32>> {
        match self.get(key)?.data().ok()? {
            TensorData::I32(v) => Some(v),
            _ => None,
        }
    }

    /// The values of the bool tensor `key` (`None`: absent or another dtype).
    pub fn bools(&self, key: &str) -> Option<Vec<bool>> {
        match self.get(key)?.data().ok()? {
            TensorData::Bool(v) => Some(v),
            _ => None,
        }
    }

    /// Rows (the first dimension of `input_ids`; `None` without it).
    pub fn rows(&self) -> Option<usize> {
        self.get("input_ids")?.shape().first().copied()
    }
}

/// How an episode ended.
#[derive(Debug, Clone)]
pub enum EpisodeOutcome {
    /// The workflow returned trajectories.
    Accepted(Trajectory),
    /// The workflow returned nothing (AReaL's `None`).
    Rejected,
    /// The episode failed; never fatal to the host.
    Failed(GuestFault),
}

impl EpisodeOutcome {
    /// `accepted`, `rejected` or the fault kind.
    pub fn kind(&self) -> &'static str {
        match self {
            EpisodeOutcome::Accepted(_) => "accepted",
            EpisodeOutcome::Rejected => "rejected",
            EpisodeOutcome::Failed(f) => f.kind(),
        }
    }
}

/// Everything known about one finished episode.
#[derive(Debug, Clone)]
pub struct EpisodeReport {
    /// The episode id.
    pub id: String,
    /// How it ended.
    pub outcome: EpisodeOutcome,
    /// Captured stdout (bounded).
    pub stdout: String,
    /// Captured stderr (bounded).
    pub stderr: String,
    /// Bytes of stdout and stderr dropped past the limits.
    pub output_dropped_bytes: u64,
    /// Log lines, in order.
    pub logs: Vec<LogLine>,
    /// Scalar stats, in order.
    pub stats: Vec<(String, f64)>,
    /// Log lines and stats dropped past the limit.
    pub dropped_logs: u64,
    /// Generate requests made.
    pub generate_calls: u32,
    /// Tokens generated.
    pub generated_tokens: u64,
    /// Largest linear memory, bytes.
    pub peak_memory_bytes: usize,
    /// Fuel consumed (when metering is on).
    pub fuel_consumed: Option<u64>,
    /// Wall time of the whole episode.
    pub wall: Duration,
    /// CPU time of host work done for it (tokenizer calls, image processing), which counts
    /// toward its fuel when metered (`HOST_FUEL_PER_MS`).
    pub host_cpu: Duration,
    /// Reward calls made, in order, with their accounting.
    pub reward_calls: Vec<RewardRecord>,
}

/// Summary of an episode for logs and `--json` output (no tensor data).
#[derive(Debug, Serialize)]
pub struct EpisodeSummary<'a> {
    /// Episode id.
    pub id: &'a str,
    /// `accepted`, `rejected` or a fault kind.
    pub outcome: &'static str,
    /// The fault, when it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<&'a GuestFault>,
    /// Generate requests.
    pub generate_calls: u32,
    /// Generated tokens.
    pub generated_tokens: u64,
    /// Wall time, ms.
    pub wall_ms: f64,
}

impl EpisodeReport {
    /// The report of an episode refused before it ran (nothing captured, nothing spent).
    pub(crate) fn refused(id: String, fault: GuestFault) -> EpisodeReport {
        EpisodeReport {
            id,
            outcome: EpisodeOutcome::Failed(fault),
            stdout: String::new(),
            stderr: String::new(),
            output_dropped_bytes: 0,
            logs: Vec::new(),
            stats: Vec::new(),
            dropped_logs: 0,
            generate_calls: 0,
            generated_tokens: 0,
            peak_memory_bytes: 0,
            fuel_consumed: None,
            wall: Duration::ZERO,
            host_cpu: Duration::ZERO,
            reward_calls: Vec::new(),
        }
    }

    /// The report of an episode stopped from outside after `wall` (its future dropped, as a
    /// tenant's spent sandbox time stops it): nothing of what it captured is kept.
    pub fn stopped(id: String, fault: GuestFault, wall: Duration) -> EpisodeReport {
        EpisodeReport {
            wall,
            ..EpisodeReport::refused(id, fault)
        }
    }

    /// A serialisable summary.
    pub fn summary(&self) -> EpisodeSummary<'_> {
        EpisodeSummary {
            id: &self.id,
            outcome: self.outcome.kind(),
            error: match &self.outcome {
                EpisodeOutcome::Failed(f) => Some(f),
                _ => None,
            },
            generate_calls: self.generate_calls,
            generated_tokens: self.generated_tokens,
            wall_ms: self.wall.as_secs_f64() * 1e3,
        }
    }
}

/// Move the returned tensors out of the store's table and check the dict's shape.
pub(crate) fn take_output(
    store: &mut wasmtime::Store<EpisodeState>,
    output: EpisodeOutput,
) -> Result<Trajectory, GuestFault> {
    let table = &mut store.data_mut().table;
    if output.tensors.len() > rollbox_tensor::MAX_KEYS {
        return Err(GuestFault::InvalidOutput {
            message: format!(
                "the tensor dict has {} keys; at most {} are allowed",
                output.tensors.len(),
                rollbox_tensor::MAX_KEYS
            ),
        });
    }
    let mut tensors: Vec<(String, HostTensor)> = Vec::with_capacity(output.tensors.len());
    let mut seen = std::collections::HashSet::with_capacity(output.tensors.len());
    for (name, handle) in output.tensors {
        rollbox_tensor::check_key_name(&name).map_err(|e| GuestFault::InvalidOutput {
            message: e.to_string(),
        })?;
        let tensor = table
            .delete(handle)
            .map_err(|e| GuestFault::InvalidOutput {
                message: format!("tensor `{name}` is not a live tensor handle: {e}"),
            })?;
        if !seen.insert(name.clone()) {
            return Err(GuestFault::InvalidOutput {
                message: format!("the tensor dict has the key `{name}` twice; keys must be unique"),
            });
        }
        tensors.push((name, tensor));
    }
    rollbox_tensor::validate_trajectory(&tensors).map_err(|e| GuestFault::InvalidOutput {
        message: e.to_string(),
    })?;
    let metadata_json = check_metadata(output.metadata)?;
    let memory = Arc::new(std::mem::take(&mut store.data_mut().ctx.tensors.memory));
    Ok(Trajectory {
        tensors,
        metadata_json,
        memory,
    })
}

/// Largest metadata object a workflow may return, bytes (after removing insignificant
/// whitespace). It is written with every trajectory line (`trajectories.jsonl` and the batch
/// header), so a guest cannot bloat the output past this per trajectory.
pub const MAX_METADATA_BYTES: usize = 64 << 10;

/// The metadata a workflow returned: empty means `{}`, otherwise one JSON object of at most
/// [`MAX_METADATA_BYTES`], kept compact (one line: it goes into JSONL as it is).
fn check_metadata(text: String) -> Result<JsonText, GuestFault> {
    if text.trim().is_empty() {
        return Ok(JsonText("{}".into()));
    }
    let object = text.trim_start().starts_with('{');
    let text = JsonText::parse(text).map_err(|e| GuestFault::InvalidOutput {
        message: format!("metadata is not valid JSON ({e}); return a JSON object such as {{}}"),
    })?;
    if !object {
        return Err(GuestFault::InvalidOutput {
            message: "metadata must be a JSON object".into(),
        });
    }
    let compact = compact_json(text.as_str());
    if compact.len() > MAX_METADATA_BYTES {
        return Err(GuestFault::InvalidOutput {
            message: format!(
                "metadata is {} bytes; at most {MAX_METADATA_BYTES} (it is written with every trajectory): keep large data in tensors",
                compact.len()
            ),
        });
    }
    Ok(JsonText(compact.into()))
}

/// Valid JSON text without its insignificant whitespace (outside strings), byte for byte
/// otherwise: numbers keep their digits, strings their escapes.
fn compact_json(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let (mut in_string, mut escaped) = (false, false);
    for c in text.chars() {
        if in_string {
            out.push(c);
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
        } else if c == '"' {
            in_string = true;
            out.push(c);
        } else if !matches!(c, ' ' | '\t' | '\n' | '\r') {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_is_kept_compact_and_bounded() {
        let m = check_metadata("{\n  \"a b\": [1.50, \"x\\\" y\"],\n  \"c\": {}\n}".into())
            .expect("object");
        assert_eq!(m.as_str(), r#"{"a b":[1.50,"x\" y"],"c":{}}"#);
        let big = format!("{{\"k\": \"{}\"}}", "x".repeat(MAX_METADATA_BYTES));
        let e = check_metadata(big).expect_err("too big").to_string();
        assert!(e.contains("at most 65536"), "{e}");
    }

    #[test]
    fn metadata_must_be_one_json_object() {
        let ok = |t: &str| check_metadata(t.into()).map(|m| m.as_str().to_string());
        assert_eq!(ok("").expect("empty"), "{}");
        assert_eq!(
            ok(r#" {"a": [1, {"b": null}]} "#).expect("object"),
            r#"{"a":[1,{"b":null}]}"#
        );
        for bad in ["[1]", "3", "\"x\"", "{\"a\": 1} {}", "{\"a\": }", "{"] {
            let e = check_metadata(bad.into()).expect_err(bad).to_string();
            assert!(
                e.contains("not valid JSON") || e.contains("must be a JSON object"),
                "{bad}: {e}"
            );
        }
        let value = Trajectory {
            tensors: Vec::new(),
            metadata_json: check_metadata(r#"{"k": "v"}"#.into()).expect("object"),
            memory: Default::default(),
        }
        .metadata();
        assert_eq!(value["k"], "v");
    }
}
