//! Tool sessions: one instance of a registered tool kept alive across calls, so what the tool
//! keeps in its linear memory (an interpreter's modules and variables, files in memory) is there
//! on the next call. A session is opened for an episode or a trainer's trajectory and closed
//! with it.
//!
//! Limits are the tool's: the timeout per call; memory, fuel and the soft limits for the
//! session's whole life (its store is never refilled); [`MAX_SESSION_CALLS`] calls and
//! [`MAX_SESSION_LIFETIME`] of wall time in all. A call takes an untrusted-call slot only while
//! it runs, so an idle session holds none. The first fault (a timeout, a trap, memory, fuel, a
//! limit) ends the session: its instance is dropped and its memory freed at once, and every
//! later call returns that fault.
//!
//! A session's instance holds a slot of its tool's instance pool for the session's life, so a
//! runtime holds at most [`session_cap`] sessions at once (a sixteenth of its instance slots, at
//! most [`MAX_SESSIONS`]); more are refused when opened, and fresh calls always find slots.
//!
//! Sessions are opened by the embedder ([`crate::Runtime::open_session`]) or by a guest: the
//! `session` resource of the WIT `tools` interface, which a workflow or a reward opens for the
//! tools its scope reaches. A guest's call holds at most
//! [`MAX_SESSIONS_PER_CALL`] at once (`OpenSessions` in its
//! `CallCtx`), and its sessions are closed when the call (the episode, the reward call) ends,
//! whatever way it ends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, OwnedSemaphorePermit};
use wasmtime::Store;
use wasmtime::component::{Func, InstancePre};

use crate::bindings::environment::Environment;
use crate::bindings::tools::ToolResult;
use crate::bindings::types::Error;
use crate::component::EnvironmentComponent;
use crate::fault::{GuestFault, MAX_FAULT_MESSAGE_BYTES, truncate};
use crate::limits::Limits;
use crate::registry::Registries;
use crate::sandbox::{GuestFuture, fuel_consumed, guarded, new_store};
use crate::scope::Scope;
use crate::services::Services;
use crate::state::{CallCtx, GuestSession, HostFuture, RewardTools, StoreState};
use crate::untrusted::{Called, unknown};

pub use crate::state::MAX_SESSIONS_PER_CALL;

/// Sessions a runtime holds open at once at most, whatever its pool's size.
pub const MAX_SESSIONS: usize = 256;

/// Sessions a runtime with `max_instances` pool slots (per pool) holds at once: a sixteenth of
/// them (62 of the default 1,000), so that sessions of a componentize-py tool (dozens of core
/// instances each) leave its pool's core-instance slots to fresh calls.
pub fn session_cap(max_instances: u32) -> usize {
    (max_instances as usize / 16).clamp(1, MAX_SESSIONS)
}

/// Calls one session takes; the next is refused and ends it.
pub const MAX_SESSION_CALLS: u32 = 10_000;

/// Wall time from a session's opening after which its next call is refused and ends it.
pub const MAX_SESSION_LIFETIME: Duration = Duration::from_secs(3600);

/// A live instance of a tool, called any number of times ([`crate::Runtime::open_session`]).
pub struct ToolSession {
    core: Core<Func>,
}

/// A live instance of an environment for one episode: `reset` with the row, then `step` with
/// each action ([`crate::Runtime::open_session`]). Its limits and ending are a tool
/// session's.
pub struct EnvSession {
    core: Core<Environment>,
}

/// What one `step` of an environment gave back.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// What the model sees next.
    pub observation: String,
    /// The step's reward.
    pub reward: f64,
    /// Whether the episode is over.
    pub done: bool,
    /// Anything else the environment said, a JSON object.
    pub metadata: serde_json::Value,
}

/// What both kinds of session share: one store kept across calls, its limits and its ending.
struct Core<E> {
    /// `tool` or `environment`, for messages.
    kind: &'static str,
    /// The registered tool's name (what its `call` is given), or the environment's.
    name: String,
    services: Arc<Services>,
    fuel_metering: bool,
    /// Opened by a reward: its calls take the pool of tool calls made by rewards.
    by_reward: bool,
    opened: Instant,
    state: Mutex<State<E>>,
    /// This session's place under the host's cap, given back when it is dropped.
    _permit: OwnedSemaphorePermit,
}

type SessionStore = Box<Store<StoreState<CallCtx>>>;

enum State<E> {
    Live {
        store: SessionStore,
        exports: Arc<E>,
        calls: u32,
    },
    /// Ended by a fault (or closed): what every later call returns.
    Ended(GuestFault),
}

impl std::fmt::Debug for ToolSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSession")
            .field("name", &self.core.name)
            .finish_non_exhaustive()
    }
}

impl std::fmt::Debug for EnvSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EnvSession")
            .field("name", &self.core.name)
            .finish_non_exhaustive()
    }
}

/// A store for a session of `what` (named `id`) under `limits`, whose `tools` (an
/// environment's) are `nested`.
fn session_store(
    pre_engine: &wasmtime::Engine,
    id: String,
    limits: Arc<Limits>,
    fuel_metering: bool,
    services: &Services,
    nested: Option<Arc<dyn RewardTools>>,
) -> SessionStore {
    let seed = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    Box::new(new_store(
        pre_engine,
        fuel_metering,
        StoreState::with(
            id,
            limits,
            services.host_memory().clone(),
            seed,
            |mut call| {
                call.nested = nested;
                call
            },
        ),
    ))
}

/// One of the host's session places, or `limit-exceeded` naming the cap.
fn permit(services: &Services) -> Result<OwnedSemaphorePermit, Error> {
    services.session_permit().ok_or_else(|| {
        Error::LimitExceeded(format!(
            "this host holds {} tool sessions open, the most it allows (a sixteenth of `max_instances`); close one first",
            services.session_cap()
        ))
    })
}

impl ToolSession {
    /// Open a session of the tool `scope` reaches as `name`, under its limits (capped by the
    /// scope's), taking one of the host's session places. `by_reward`: opened by a reward
    /// call, whose tool calls draw on a pool of their own.
    pub(crate) async fn open(
        services: &Arc<Services>,
        registries: &Registries,
        scope: &Scope,
        name: &str,
        by_reward: bool,
    ) -> Result<ToolSession, Error> {
        let Some(reg) = scope.tool(registries, name) else {
            return Err(unknown("tool", name, &scope.tool_names(registries)));
        };
        let permit = permit(services)?;
        let tool = &reg.component;
        let id = format!(
            "session:{name}:{}",
            crate::untrusted::short(&tool.info.sha256)
        );
        let mut store = session_store(
            tool.pre.engine(),
            id,
            reg.policy.limits.clone(),
            reg.fuel_metering,
            services,
            None,
        );
        let pre: InstancePre<_> = tool.pre.clone();
        let what = format!("tool `{name}`");
        let call = guarded(&mut store, |store| {
            Box::pin(async move {
                let instance = pre.instantiate_async(&mut *store).await?;
                instance
                    .get_func(&mut *store, "call")
                    .ok_or_else(|| wasmtime::Error::msg("the tool exports no `call`"))
            })
        })
        .await
        .map_err(|f| session_error(&what, &f))?;
        Ok(ToolSession {
            core: Core::new(
                "tool",
                name,
                services,
                reg.fuel_metering,
                by_reward,
                store,
                call,
                permit,
            ),
        })
    }

    /// The registered name of the session's tool.
    pub fn name(&self) -> &str {
        &self.core.name
    }

    /// Call the session's instance with `args` (the tool's JSON arguments). Calls on one
    /// session run one at a time, in the order they are made.
    pub async fn call(&self, args: String) -> Called<String> {
        let name = self.core.name.clone();
        self.core
            .run(move |store, func: Arc<Func>| {
                Box::pin(async move {
                    let typed = func.typed::<(&str, &str), (Result<String, String>,)>(&*store)?;
                    let (out,) = typed.call_async(&mut *store, (&name, &args)).await?;
                    Ok(out)
                })
            })
            .await
    }

    /// [`ToolSession::call`] as a guest's `session.call` returns it.
    pub(crate) async fn call_for_guest(&self, args: String) -> Result<ToolResult, Error> {
        let called = self.call(args).await;
        let accounting = called.accounting();
        match called.result {
            Ok(output) => Ok(ToolResult { output, accounting }),
            Err(f) => Err(session_error(&self.core.what(), &f)),
        }
    }

    /// End the session now: its instance is dropped and its memory freed; later calls return
    /// an error saying it was closed.
    pub async fn close(&self) {
        self.core.close().await;
    }
}

impl EnvSession {
    /// Instantiate `env` (named `name` in messages) under `limits` for one episode, its
    /// `tools` those `nested` reaches.
    pub(crate) async fn open(
        services: &Arc<Services>,
        name: &str,
        env: &EnvironmentComponent,
        limits: Arc<Limits>,
        fuel_metering: bool,
        nested: Arc<dyn RewardTools>,
    ) -> Result<EnvSession, Error> {
        let permit = permit(services)?;
        let id = format!("env:{name}:{}", crate::untrusted::short(&env.info.sha256));
        let mut store = session_store(
            env.pre.engine(),
            id,
            limits,
            fuel_metering,
            services,
            Some(nested),
        );
        let pre = env.pre.clone();
        let what = format!("environment `{name}`");
        let exports = guarded(&mut store, |store| {
            Box::pin(async move { pre.instantiate_async(&mut *store).await })
        })
        .await
        .map_err(|f| session_error(&what, &f))?;
        Ok(EnvSession {
            core: Core::new(
                "environment",
                name,
                services,
                fuel_metering,
                false,
                store,
                exports,
                permit,
            ),
        })
    }

    /// Start the episode from `row` (a JSON object): the first observation.
    pub async fn reset(&self, row: String) -> Called<String> {
        self.core
            .run(move |store, env: Arc<Environment>| {
                Box::pin(async move { env.call_reset(&mut *store, &row).await })
            })
            .await
    }

    /// Apply the model's `action`. A step whose metadata is not a JSON object is the
    /// environment's fault (`invalid_output`), and ends the session.
    pub async fn step(&self, action: String) -> Called<Step> {
        let called = self
            .core
            .run(move |store, env: Arc<Environment>| {
                Box::pin(async move { env.call_step(&mut *store, &action).await })
            })
            .await;
        let Called {
            result,
            wall,
            fuel_consumed,
            peak_memory_bytes,
            attempts,
            logs,
        } = called;
        let result = match result {
            Ok(r) => {
                let metadata = match r.metadata.as_str() {
                    "" => Ok(serde_json::json!({})),
                    text => serde_json::from_str::<serde_json::Value>(text)
                        .ok()
                        .filter(serde_json::Value::is_object)
                        .ok_or_else(|| GuestFault::InvalidOutput {
                            message: "a step's metadata is not a JSON object".into(),
                        }),
                };
                match (metadata, r.reward.is_finite()) {
                    (Ok(metadata), true) => Ok(Step {
                        observation: r.observation,
                        reward: r.reward,
                        done: r.done,
                        metadata,
                    }),
                    (Err(f), _) => Err(f),
                    (Ok(_), false) => Err(GuestFault::InvalidOutput {
                        message: format!("a step's reward is {}", r.reward),
                    }),
                }
            }
            Err(f) => Err(f),
        };
        if let Err(f @ GuestFault::InvalidOutput { .. }) = &result {
            self.core.end(f.clone()).await;
        }
        Called {
            result,
            wall,
            fuel_consumed,
            peak_memory_bytes,
            attempts,
            logs,
        }
    }

    /// End the episode's session now and free its instance.
    pub async fn close(&self) {
        self.core.close().await;
    }
}

impl<E: Send + Sync + 'static> Core<E> {
    #[allow(clippy::too_many_arguments, reason = "one constructor for both kinds")]
    fn new(
        kind: &'static str,
        name: &str,
        services: &Arc<Services>,
        fuel_metering: bool,
        by_reward: bool,
        store: SessionStore,
        exports: E,
        permit: OwnedSemaphorePermit,
    ) -> Self {
        Core {
            kind,
            name: name.to_string(),
            services: services.clone(),
            fuel_metering,
            by_reward,
            opened: Instant::now(),
            state: Mutex::new(State::Live {
                store,
                exports: Arc::new(exports),
                calls: 0,
            }),
            _permit: permit,
        }
    }

    /// `tool `NAME`` or `environment `NAME``, for messages.
    fn what(&self) -> String {
        format!("{} `{}`", self.kind, self.name)
    }

    /// Run one call of the session's instance under the per-call deadline, taking a pool slot
    /// while it runs; a fault (anything but the guest's own error value) ends the session.
    async fn run<T: Send + 'static>(
        &self,
        op: impl for<'a> FnOnce(
            &'a mut Store<StoreState<CallCtx>>,
            Arc<E>,
        ) -> GuestFuture<'a, Result<T, String>>
        + Send
        + 'static,
    ) -> Called<T> {
        let mut state = self.state.lock().await;
        // Taken out for the call: a call dropped half-way (its caller cancelled) leaves the
        // session ended, never an instance stopped mid-call to be called again.
        let cancelled = GuestFault::LimitExceeded {
            message: format!(
                "a call of the session of {} was cancelled while it ran; open a new session",
                self.what()
            ),
            setting: None,
        };
        let live = std::mem::replace(&mut *state, State::Ended(cancelled));
        let (mut store, exports, mut calls) = match live {
            State::Live {
                store,
                exports,
                calls,
            } => (store, exports, calls),
            State::Ended(fault) => {
                let refused = ended(&fault);
                *state = State::Ended(fault);
                return Called::refused(refused);
            }
        };
        if calls >= MAX_SESSION_CALLS {
            let fault = GuestFault::LimitExceeded {
                message: format!(
                    "the session of {} took its {MAX_SESSION_CALLS} calls; open a new session",
                    self.what()
                ),
                setting: None,
            };
            *state = State::Ended(fault.clone());
            return Called::refused(fault);
        }
        if self.opened.elapsed() >= MAX_SESSION_LIFETIME {
            let fault = GuestFault::LimitExceeded {
                message: format!(
                    "the session of {} is over its {} s lifetime; open a new session",
                    self.what(),
                    MAX_SESSION_LIFETIME.as_secs()
                ),
                setting: None,
            };
            *state = State::Ended(fault.clone());
            return Called::refused(fault);
        }
        calls += 1;
        let _slot = match self.by_reward {
            true => self.services.nested_slot().await,
            false => self.services.tool_slot().await,
        };
        let start = Instant::now();
        let fuel_before = fuel_consumed(self.fuel_metering, &store).unwrap_or(0);
        {
            let ctx = &mut store.data_mut().ctx;
            ctx.deadline = start + ctx.limits.timeout;
            ctx.logs.clear();
        }
        let e = exports.clone();
        let result = guarded(&mut store, move |store| op(store, e)).await;
        let result = match result {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(message)) => Err(GuestFault::GuestError {
                message: truncate(&message, MAX_FAULT_MESSAGE_BYTES),
            }),
            Err(f) => Err(f),
        };
        let report = Called {
            wall: start.elapsed(),
            fuel_consumed: fuel_consumed(self.fuel_metering, &store)
                .map(|after| after.saturating_sub(fuel_before)),
            peak_memory_bytes: store.data().limiter.peak_bytes(),
            attempts: 1,
            logs: std::mem::take(&mut store.data_mut().ctx.logs),
            result,
        };
        // Output is the call's: what the guest wrote is not carried to the next call.
        let _ = store.data().ctx.stdout.take();
        let _ = store.data().ctx.stderr.take();
        *state = match &report.result {
            // A guest error value is the guest's answer; the instance is intact.
            Ok(_) | Err(GuestFault::GuestError { .. }) => State::Live {
                store,
                exports,
                calls,
            },
            Err(f) => State::Ended(f.clone()),
        };
        report
    }

    /// End the session with `fault`.
    async fn end(&self, fault: GuestFault) {
        *self.state.lock().await = State::Ended(fault);
    }

    async fn close(&self) {
        self.end(GuestFault::LimitExceeded {
            message: format!(
                "the session of {} was closed; open a new session",
                self.what()
            ),
            setting: None,
        })
        .await;
    }
}

/// The fault a call on an ended session returns.
fn ended(fault: &GuestFault) -> GuestFault {
    match fault {
        GuestFault::LimitExceeded { .. } => fault.clone(),
        other => GuestFault::LimitExceeded {
            message: truncate(
                &format!("the session ended on an earlier call ({other}); open a new session"),
                MAX_FAULT_MESSAGE_BYTES,
            ),
            setting: None,
        },
    }
}

/// The guest-visible error for a session's fault.
fn session_error(what: &str, f: &GuestFault) -> Error {
    let msg = truncate(
        &format!("the session of {what}: {f}"),
        MAX_FAULT_MESSAGE_BYTES,
    );
    match f {
        GuestFault::Timeout { .. } => Error::Timeout(msg),
        GuestFault::LimitExceeded { .. } => Error::LimitExceeded(msg),
        GuestFault::InvalidOutput { .. }
        | GuestFault::BoundaryLimit { .. }
        | GuestFault::GuestError { .. } => Error::InvalidOutput(msg),
        _ => Error::Trapped(msg),
    }
}

impl GuestSession for ToolSession {
    fn call(&self, args: String) -> HostFuture<'_, Result<ToolResult, Error>> {
        Box::pin(self.call_for_guest(args))
    }
}
