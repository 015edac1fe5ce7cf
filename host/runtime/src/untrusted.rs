//! Sandboxed calls of reward and tool components: one attempt in a fresh instance under the
//! untrusted-call limits ([`CallReport`]), and AReaL's `AsyncRewardWrapper` semantics on top
//! (bounded concurrency, retries, 0.0 after the last timed-out attempt), done right: a timed-out
//! attempt is interrupted and its instance dropped, so no worker stays stuck.

use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::Engine;

use crate::bindings::rewards::ScoreResult;
use crate::bindings::tools::ToolResult;
use crate::bindings::types::{Accounting, Error, RewardInput};
use crate::budget::HostMemory;
use crate::component::{RewardComponent, ToolComponent};
use crate::fault::{GuestFault, MAX_FAULT_MESSAGE_BYTES, truncate};
use crate::limits::Limits;
use crate::registry::Registered;
use crate::sandbox::{GuestFuture, fuel_consumed, guarded, new_store};
use crate::services::Services;
use crate::state::{CallCtx, LogLine, RewardTools, StoreState};
use crate::text::escape_control;

/// What one attempt of a reward or tool call produced and cost.
#[derive(Debug, Clone)]
pub struct CallReport<T> {
    /// The value, or why there is none.
    pub result: Result<T, GuestFault>,
    /// Wall time of the attempt.
    pub wall: Duration,
    /// Largest linear memory, bytes.
    pub peak_memory_bytes: usize,
    /// Fuel consumed, when metering is on.
    pub fuel_consumed: Option<u64>,
    /// Captured stderr (bounded), for diagnosing a failure.
    pub stderr: String,
    /// What the guest logged (bounded by the call's log limit).
    pub logs: Vec<LogLine>,
}

/// Input of a reward call (AReaL's reward-function arguments).
#[derive(Debug, Clone, Default)]
pub struct RewardCall {
    /// Decoded prompt.
    pub prompt: String,
    /// Decoded completion.
    pub completion: String,
    /// Prompt token ids.
    pub prompt_ids: Vec<u32>,
    /// Completion token ids.
    pub completion_ids: Vec<u32>,
    /// The dataset row.
    pub data: serde_json::Value,
}

impl From<RewardCall> for RewardInput {
    fn from(call: RewardCall) -> Self {
        RewardInput {
            prompt: call.prompt,
            completion: call.completion,
            prompt_ids: call.prompt_ids,
            completion_ids: call.completion_ids,
            data: call.data.to_string(),
        }
    }
}

/// `kind: message` for an error value, as recorded in reports.
pub(crate) fn describe(e: &Error) -> String {
    let (kind, msg) = match e {
        Error::InvalidArgument(m) => ("invalid_argument", m),
        Error::LimitExceeded(m) => ("limit_exceeded", m),
        Error::Unknown(m) => ("unknown", m),
        Error::Unavailable(m) => ("unavailable", m),
        Error::Timeout(m) => ("timeout", m),
        Error::Trapped(m) => ("trapped", m),
        Error::InvalidOutput(m) => ("invalid_output", m),
        Error::Unsupported(m) => ("unsupported", m),
    };
    format!("{kind}: {msg}")
}

/// The `unknown` error for a name not in a registry (shared with `tools`).
pub(crate) fn unknown(what: &str, name: &str, names: &[String]) -> Error {
    let registered = if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    };
    Error::Unknown(format!(
        "no {what} named `{}` is registered (registered: {registered}); register one under that name",
        truncate(name, 256)
    ))
}

pub(crate) async fn score_once(
    fuel: bool,
    reward: &RewardComponent,
    input: RewardInput,
    limits: Arc<Limits>,
    host: Arc<HostMemory>,
    nested: Option<Arc<dyn RewardTools>>,
) -> CallReport<f64> {
    let pre = reward.pre.clone();
    let id = format!("reward:{}", short(&reward.info.sha256));
    attempt(
        reward.pre.engine(),
        fuel,
        id,
        limits,
        host,
        nested,
        move |store| {
            Box::pin(async move {
                let b = pre.instantiate_async(&mut *store).await?;
                b.call_score(&mut *store, &input).await
            })
        },
    )
    .await
    .and_then(|v| {
        if v.is_finite() {
            Ok(v)
        } else {
            Err(GuestFault::InvalidOutput {
                message: format!("the reward returned {v}; return a finite number"),
            })
        }
    })
}

pub(crate) async fn tool_once(
    fuel: bool,
    tool: &ToolComponent,
    name: String,
    args: String,
    limits: Arc<Limits>,
    host: Arc<HostMemory>,
) -> CallReport<String> {
    let pre = tool.pre.clone();
    let id = format!("tool:{}", short(&tool.info.sha256));
    attempt(
        tool.pre.engine(),
        fuel,
        id,
        limits,
        host,
        None,
        move |store| {
            Box::pin(async move {
                let instance = pre.instantiate_async(&mut *store).await?;
                let call = instance.get_typed_func::<(&str, &str), (Result<String, String>,)>(
                    &mut *store,
                    "call",
                )?;
                let (out,) = call.call_async(&mut *store, (&name, &args)).await?;
                Ok(out)
            })
        },
    )
    .await
}

/// Call a tool's `describe` once in a fresh sandbox under `limits`.
pub(crate) async fn describe_once(
    fuel: bool,
    tool: &ToolComponent,
    limits: Arc<Limits>,
    host: Arc<HostMemory>,
) -> CallReport<String> {
    let pre = tool.pre.clone();
    let id = format!("tool-describe:{}", short(&tool.info.sha256));
    attempt(
        tool.pre.engine(),
        fuel,
        id,
        limits,
        host,
        None,
        move |store| {
            Box::pin(async move {
                let instance = pre.instantiate_async(&mut *store).await?;
                let describe = instance.get_typed_func::<(), (String,)>(&mut *store, "describe")?;
                let (out,) = describe.call_async(&mut *store, ()).await?;
                Ok(Ok(out))
            })
        },
    )
    .await
}

/// Longest `describe` output accepted, bytes.
pub const MAX_TOOL_DESCRIPTION_BYTES: usize = 64 << 10;

/// The OpenAI tool schema of the tool registered as `name`:
/// `{"type": "function", "function": {"name", "description", "parameters"}}`. The first call
/// asks the component (`describe`, once, in a sandbox under the tool's limits) and keeps the
/// answer; a component without `describe` gets an empty description and `{"type": "object"}`.
pub(crate) async fn tool_schema(
    name: &str,
    reg: &Registered<ToolComponent>,
    services: &Services,
) -> Result<serde_json::Value, Error> {
    let tool = &reg.component;
    // Only an answer is kept: a failed `describe` (a transient instantiation failure as much
    // as a guest fault) is tried once more now and again on the next `schemas`.
    let described = tool
        .description
        .get_or_try_init(|| async {
            if !tool.describes() {
                return Ok(String::new());
            }
            let mut last = String::new();
            for _ in 0..2 {
                let _slot = services.tool_slot().await;
                let limits = reg.policy.limits.clone();
                match describe_once(
                    reg.fuel_metering,
                    tool,
                    limits,
                    services.host_memory().clone(),
                )
                .await
                .result
                {
                    Ok(text) => return Ok(text),
                    Err(f) => last = f.to_string(),
                }
            }
            Err(last)
        })
        .await;
    let invalid = |why: String| Error::InvalidOutput(format!("tool `{name}`: describe {why}"));
    let text = described.map_err(|f| invalid(format!("failed: {f}")))?;
    let (description, parameters) = if text.is_empty() && !tool.describes() {
        (
            serde_json::Value::from(""),
            serde_json::json!({"type": "object"}),
        )
    } else {
        if text.len() > MAX_TOOL_DESCRIPTION_BYTES {
            return Err(invalid(format!(
                "returned {} bytes; at most {MAX_TOOL_DESCRIPTION_BYTES}",
                text.len()
            )));
        }
        let serde_json::Value::Object(mut obj) = serde_json::from_str(text)
            .map_err(|e| invalid(format!("returned invalid JSON ({e})")))?
        else {
            return Err(invalid(
                "returned JSON that is not an object; return {\"description\", \"parameters\"}"
                    .into(),
            ));
        };
        let description = match obj.remove("description") {
            None => serde_json::Value::from(""),
            Some(d @ serde_json::Value::String(_)) => d,
            Some(_) => {
                return Err(invalid(
                    "returned a `description` that is not a string".into(),
                ));
            }
        };
        let parameters = match obj.remove("parameters") {
            None => serde_json::json!({"type": "object"}),
            Some(p @ serde_json::Value::Object(_)) => p,
            Some(_) => {
                return Err(invalid(
                    "returned `parameters` that is not a JSON Schema object".into(),
                ));
            }
        };
        (description, parameters)
    };
    Ok(serde_json::json!({
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }))
}

async fn attempt<T>(
    engine: &Engine,
    fuel: bool,
    id: String,
    limits: Arc<Limits>,
    host: Arc<HostMemory>,
    nested: Option<Arc<dyn RewardTools>>,
    call: impl for<'a> FnOnce(
        &'a mut wasmtime::Store<StoreState<CallCtx>>,
    ) -> GuestFuture<'a, Result<T, String>>,
) -> CallReport<T> {
    let start = Instant::now();
    // The call's random numbers are seeded by its id (FNV-1a), so a re-run sees the same ones.
    let seed = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    // A reward's or tool call's store holds its call state alone: nothing of the episode's
    // (engine, tensors) is there to reach; a reward's holds the registered tools it may call.
    let mut store = new_store(
        engine,
        fuel,
        StoreState::with(id, limits, host, seed, |mut call| {
            call.nested = nested;
            call
        }),
    );
    let result = match guarded(&mut store, call).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(message)) => Err(GuestFault::GuestError {
            message: truncate(&message, MAX_FAULT_MESSAGE_BYTES),
        }),
        Err(f) => Err(f),
    };
    let report = CallReport {
        result,
        wall: start.elapsed(),
        peak_memory_bytes: store.data().limiter.peak_bytes(),
        fuel_consumed: fuel_consumed(fuel, &store),
        stderr: store.data().ctx.stderr.take().0,
        logs: std::mem::take(&mut store.data_mut().ctx.logs),
    };
    if report.peak_memory_bytes >= DEFERRED_TEARDOWN_BYTES {
        reap(store);
    }
    report
}

/// Instances that grew to this much linear memory are torn down on the reaper thread.
pub const DEFERRED_TEARDOWN_BYTES: usize = 4 << 20;

/// Stores waiting for the reaper at most. Each holds a pool slot (a componentize-py
/// instance: 36 core instances) until it is torn down, so a reaper that falls behind (a loaded
/// machine) must not hold many: past this many, the caller tears its store down itself.
pub const MAX_REAP_BACKLOG: usize = 8;

/// The reaper thread's queue.
type Reaper = std::sync::mpsc::SyncSender<wasmtime::Store<StoreState<CallCtx>>>;

/// Stores sent to the reaper and not yet torn down.
static REAP_BACKLOG: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// The reaper thread's queue (`None`: the thread could not start), the thread started on
/// first use. [`start_reaper`] starts it with the engine, so it is one of the host's own threads (and a host that keeps its threads on some
/// cores keeps it there too), not a thread of whichever call first needed it.
fn reaper() -> Option<&'static Reaper> {
    use std::sync::atomic::Ordering;
    static REAPER: std::sync::OnceLock<Option<Reaper>> = std::sync::OnceLock::new();
    REAPER
        .get_or_init(|| {
            let (tx, rx) = std::sync::mpsc::sync_channel(MAX_REAP_BACKLOG);
            std::thread::Builder::new()
                .name("rollbox-reaper".into())
                .spawn(move || {
                    for store in rx {
                        drop(store);
                        REAP_BACKLOG.fetch_sub(1, Ordering::AcqRel);
                    }
                })
                .ok()
                .map(|_| tx)
        })
        .as_ref()
}

/// Start the reaper thread now (see [`reaper`]).
pub(crate) fn start_reaper() {
    reaper();
}

/// Tear `store` down off the caller's path. Resetting a large instance's memory (page scans,
/// madvise, dozens of core instances for a componentize-py component) costs ~0.16 ms; the
/// result is already known, so the caller need not wait. One reaper thread does it in order;
/// when it is [`MAX_REAP_BACKLOG`] stores behind (or cannot start), the caller drops the store
/// itself, so the backlog, and the pool slots and memory it holds, stays bounded.
fn reap(store: wasmtime::Store<StoreState<CallCtx>>) {
    use std::sync::atomic::Ordering;
    use std::sync::mpsc::TrySendError;
    let Some(tx) = reaper() else {
        return drop(store);
    };
    if REAP_BACKLOG.fetch_add(1, Ordering::AcqRel) >= MAX_REAP_BACKLOG {
        REAP_BACKLOG.fetch_sub(1, Ordering::AcqRel);
        return drop(store);
    }
    if let Err(TrySendError::Full(store) | TrySendError::Disconnected(store)) = tx.try_send(store) {
        REAP_BACKLOG.fetch_sub(1, Ordering::AcqRel);
        drop(store);
    }
}

impl<T> CallReport<T> {
    /// A call refused before it ran.
    pub(crate) fn refused(fault: GuestFault) -> CallReport<T> {
        CallReport {
            result: Err(fault),
            wall: Duration::ZERO,
            peak_memory_bytes: 0,
            fuel_consumed: None,
            stderr: String::new(),
            logs: Vec::new(),
        }
    }

    fn and_then<U>(self, f: impl FnOnce(T) -> Result<U, GuestFault>) -> CallReport<U> {
        CallReport {
            result: self.result.and_then(f),
            wall: self.wall,
            peak_memory_bytes: self.peak_memory_bytes,
            fuel_consumed: self.fuel_consumed,
            stderr: self.stderr,
            logs: self.logs,
        }
    }
}

pub(crate) fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}

/// Sums attempts into one `Accounting`.
#[derive(Default)]
struct Tally {
    wall: Duration,
    fuel: Option<u64>,
    peak: usize,
    attempts: u32,
    /// The last attempt's log lines.
    logs: Vec<LogLine>,
}

impl Tally {
    fn add<T>(&mut self, r: &mut CallReport<T>) {
        self.logs = std::mem::take(&mut r.logs);
        self.wall += r.wall;
        self.peak = self.peak.max(r.peak_memory_bytes);
        self.attempts += 1;
        if let Some(f) = r.fuel_consumed {
            self.fuel = Some(self.fuel.unwrap_or(0) + f);
        }
    }
}

/// The guest-visible error for a fault of the last attempt.
fn fault_to_error(what: &str, name: &str, attempts: u32, f: &GuestFault) -> Error {
    let msg = format!("{what} `{name}` failed on all {attempts} attempts: {f}");
    match f {
        GuestFault::Timeout { .. } => Error::Timeout(msg),
        GuestFault::InvalidOutput { .. }
        | GuestFault::BoundaryLimit { .. }
        | GuestFault::GuestError { .. } => Error::InvalidOutput(msg),
        _ => Error::Trapped(msg),
    }
}

/// Which kind of untrusted call: rewards may take the pool's reserved slots, tools may not.
#[derive(Clone, Copy)]
enum CallKind {
    Reward,
    Tool,
    /// A tool called by a reward.
    NestedTool,
}

impl CallKind {
    fn noun(self) -> &'static str {
        match self {
            CallKind::Reward => "reward",
            CallKind::Tool | CallKind::NestedTool => "tool",
        }
    }
}

/// The retry loop shared by rewards and tools: up to `1 + retries` attempts, each in a fresh
/// instance holding one slot of the shared untrusted pool. Returns the first success, or the
/// last attempt's fault, with the accounting of every attempt.
async fn with_retries<C, T, Fut>(
    kind: CallKind,
    name: &str,
    reg: &Registered<C>,
    services: &Services,
    attempt: impl Fn() -> Fut,
) -> (Result<T, GuestFault>, Tally)
where
    Fut: std::future::Future<Output = CallReport<T>>,
{
    let what = kind.noun();
    let mut tally = Tally::default();
    let mut last = None;
    for _ in 0..=reg.policy.retries {
        let _slot = match kind {
            CallKind::Reward => services.reward_slot().await,
            CallKind::Tool => services.tool_slot().await,
            CallKind::NestedTool => services.nested_slot().await,
        };
        let mut r = attempt().await;
        tally.add(&mut r);
        match r.result {
            Ok(v) => return (Ok(v), tally),
            Err(f) => {
                tracing::warn!(
                    component = name,
                    attempt = tally.attempts,
                    "{what} attempt failed: {}",
                    escape_control(&f.to_string())
                );
                last = Some(f);
            }
        }
    }
    // `retries` is unsigned, so at least one attempt ran and `last` is set.
    let fault = last.unwrap_or(GuestFault::Instantiate {
        message: format!("{what} `{name}` made no attempt"),
    });
    (Err(fault), tally)
}

/// AReaL's `AsyncRewardWrapper` semantics on [`with_retries`]: timeouts on every attempt give
/// reward 0.0 with `timed-out` set; any other failure of the last attempt is an error value.
pub(crate) async fn score_with_retries(
    name: &str,
    reg: &Registered<RewardComponent>,
    input: RewardInput,
    services: &Arc<Services>,
    tools: Arc<dyn RewardTools>,
) -> (Result<ScoreResult, Error>, Accounting) {
    let called = score_registered(name, reg, input, services, tools).await;
    let accounting = called.accounting();
    let result = match called.result {
        Ok(value) => Ok(ScoreResult {
            value,
            timed_out: false,
            accounting,
        }),
        Err(GuestFault::Timeout { limit_ms }) => {
            tracing::warn!(
                reward = name,
                "reward timed out ({limit_ms} ms) on all {} attempts; using 0.0 (the reward's `timeout` option)",
                called.attempts
            );
            Ok(ScoreResult {
                value: 0.0,
                timed_out: true,
                accounting,
            })
        }
        Err(f) => Err(fault_to_error("reward", name, called.attempts, &f)),
    };
    (result, accounting)
}

/// A registered reward or tool called by the embedder outside any episode (a trainer's reward
/// function, a verl tool): the value or the last attempt's fault, and what every attempt cost.
/// Unlike a workflow's `rewards.score`, a reward that timed out on every attempt is a
/// [`GuestFault::Timeout`] here, not 0.0: the caller decides what a timeout scores.
#[derive(Debug)]
pub struct Called<T> {
    /// The value, or why the last attempt failed.
    pub result: Result<T, GuestFault>,
    /// Wall time of all attempts.
    pub wall: Duration,
    /// Fuel consumed by all attempts, when fuel metering is on for the component.
    pub fuel_consumed: Option<u64>,
    /// Largest linear memory any attempt reached, bytes.
    pub peak_memory_bytes: usize,
    /// Attempts made (1 when the first one succeeded).
    pub attempts: u32,
    /// What the last attempt logged (the `code` reward: each case's result).
    pub logs: Vec<LogLine>,
}

impl<T> Called<T> {
    /// Refused before any attempt ran.
    pub(crate) fn refused(fault: GuestFault) -> Self {
        Called {
            result: Err(fault),
            wall: Duration::ZERO,
            fuel_consumed: None,
            peak_memory_bytes: 0,
            attempts: 0,
            logs: Vec::new(),
        }
    }

    fn new(result: Result<T, GuestFault>, tally: Tally) -> Self {
        Called {
            result,
            wall: tally.wall,
            fuel_consumed: tally.fuel,
            peak_memory_bytes: tally.peak,
            attempts: tally.attempts,
            logs: tally.logs,
        }
    }

    /// The cost as the guest sees it (`accounting`).
    pub(crate) fn accounting(&self) -> Accounting {
        Accounting {
            wall_us: self.wall.as_micros() as u64,
            fuel: self.fuel_consumed,
            peak_memory_bytes: self.peak_memory_bytes as u64,
            attempts: self.attempts,
        }
    }
}

/// [`Called`] for a reward: its call policy, the pool's reward slots and the host memory budget,
/// as a workflow's `rewards.score` gets them. Each attempt may call `tools` (the tools of the
/// caller's scope).
pub(crate) async fn score_registered(
    name: &str,
    reg: &Registered<RewardComponent>,
    input: RewardInput,
    services: &Arc<Services>,
    tools: Arc<dyn RewardTools>,
) -> Called<f64> {
    let (result, tally) = with_retries(CallKind::Reward, name, reg, services, || {
        score_once(
            reg.fuel_metering,
            &reg.component,
            input.clone(),
            reg.policy.limits.clone(),
            services.host_memory().clone(),
            Some(tools.clone()),
        )
    })
    .await;
    Called::new(result, tally)
}

/// [`Called`] for a tool, as [`score_registered`] for a reward.
pub(crate) async fn call_registered(
    name: &str,
    reg: &Registered<ToolComponent>,
    args: String,
    services: &Services,
) -> Called<String> {
    call_registered_as(CallKind::Tool, name, reg, args, services).await
}

async fn call_registered_as(
    kind: CallKind,
    name: &str,
    reg: &Registered<ToolComponent>,
    args: String,
    services: &Services,
) -> Called<String> {
    let (result, tally) = with_retries(kind, name, reg, services, || {
        tool_once(
            reg.fuel_metering,
            &reg.component,
            name.to_string(),
            args.clone(),
            reg.policy.limits.clone(),
            services.host_memory().clone(),
        )
    })
    .await;
    Called::new(result, tally)
}

/// Tool calls on [`with_retries`]: a tool has no fallback value, so every final failure is an
/// error value.
pub(crate) async fn call_with_retries(
    name: &str,
    reg: &Registered<ToolComponent>,
    args: String,
    services: &Services,
    by_reward: bool,
) -> Result<ToolResult, Error> {
    let kind = if by_reward {
        CallKind::NestedTool
    } else {
        CallKind::Tool
    };
    let called = call_registered_as(kind, name, reg, args, services).await;
    let accounting = called.accounting();
    match called.result {
        Ok(output) => Ok(ToolResult { output, accounting }),
        Err(f) => Err(fault_to_error("tool", name, called.attempts, &f)),
    }
}
