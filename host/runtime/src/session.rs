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

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::{Mutex, OwnedSemaphorePermit};
use wasmtime::Store;
use wasmtime::component::Func;

use crate::component::ToolComponent;
use crate::fault::{GuestFault, MAX_FAULT_MESSAGE_BYTES, truncate};
use crate::limits::Limits;
use crate::sandbox::{fuel_consumed, guarded, new_store};
use crate::services::Services;
use crate::state::{CallCtx, StoreState};
use crate::untrusted::Called;

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
    name: String,
    services: Arc<Services>,
    fuel_metering: bool,
    opened: Instant,
    state: Mutex<State>,
    /// This session's place under [`MAX_SESSIONS`], given back when it is dropped.
    _permit: OwnedSemaphorePermit,
}

enum State {
    Live {
        store: Box<Store<StoreState<CallCtx>>>,
        call: Func,
        calls: u32,
    },
    /// Ended by a fault (or closed): what every later call returns.
    Ended(GuestFault),
}

impl std::fmt::Debug for ToolSession {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ToolSession")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

impl ToolSession {
    /// Instantiate `tool` (registered as `name`) under `limits` for a session.
    pub(crate) async fn open(
        name: &str,
        tool: &ToolComponent,
        limits: Arc<Limits>,
        fuel_metering: bool,
        services: Arc<Services>,
        permit: OwnedSemaphorePermit,
    ) -> Result<ToolSession, GuestFault> {
        let id = format!(
            "session:{name}:{}",
            crate::untrusted::short(&tool.info.sha256)
        );
        let seed = id.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
            (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
        });
        let mut store = Box::new(new_store(
            tool.pre.engine(),
            fuel_metering,
            StoreState::with(id, limits, services.host_memory().clone(), seed, |call| {
                call
            }),
        ));
        let pre = tool.pre.clone();
        let call = guarded(&mut store, |store| {
            Box::pin(async move {
                let instance = pre.instantiate_async(&mut *store).await?;
                instance
                    .get_func(&mut *store, "call")
                    .ok_or_else(|| wasmtime::Error::msg("the tool exports no `call`"))
            })
        })
        .await?;
        Ok(ToolSession {
            name: name.to_string(),
            services,
            fuel_metering,
            opened: Instant::now(),
            state: Mutex::new(State::Live {
                store,
                call,
                calls: 0,
            }),
            _permit: permit,
        })
    }

    /// The registered name of the session's tool.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Call the session's instance with `args` (the tool's JSON arguments). Calls on one
    /// session run one at a time, in the order they are made.
    pub async fn call(&self, args: String) -> Called<String> {
        let mut state = self.state.lock().await;
        let State::Live { store, call, calls } = &mut *state else {
            let State::Ended(fault) = &*state else {
                unreachable!("a session is live or ended")
            };
            return Called::refused(ended(fault));
        };
        if *calls >= MAX_SESSION_CALLS {
            let fault = GuestFault::LimitExceeded {
                message: format!(
                    "the session of `{}` took its {MAX_SESSION_CALLS} calls; open a new session",
                    self.name
                ),
                setting: None,
            };
            *state = State::Ended(fault.clone());
            return Called::refused(fault);
        }
        if self.opened.elapsed() >= MAX_SESSION_LIFETIME {
            let fault = GuestFault::LimitExceeded {
                message: format!(
                    "the session of `{}` is over its {} s lifetime; open a new session",
                    self.name,
                    MAX_SESSION_LIFETIME.as_secs()
                ),
                setting: None,
            };
            *state = State::Ended(fault.clone());
            return Called::refused(fault);
        }
        *calls += 1;
        let _slot = self.services.tool_slot().await;
        let start = Instant::now();
        let fuel_before = fuel_consumed(self.fuel_metering, store).unwrap_or(0);
        {
            let ctx = &mut store.data_mut().ctx;
            ctx.deadline = start + ctx.limits.timeout;
            ctx.logs.clear();
        }
        let name = self.name.clone();
        let func = *call;
        let result = guarded(store, move |store| {
            Box::pin(async move {
                let typed = func.typed::<(&str, &str), (Result<String, String>,)>(&*store)?;
                let (out,) = typed.call_async(&mut *store, (&name, &args)).await?;
                Ok(out)
            })
        })
        .await;
        let result = match result {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(message)) => Err(GuestFault::GuestError {
                message: truncate(&message, MAX_FAULT_MESSAGE_BYTES),
            }),
            Err(f) => Err(f),
        };
        let report = Called {
            wall: start.elapsed(),
            fuel_consumed: fuel_consumed(self.fuel_metering, store)
                .map(|after| after.saturating_sub(fuel_before)),
            peak_memory_bytes: store.data().limiter.peak_bytes(),
            attempts: 1,
            logs: std::mem::take(&mut store.data_mut().ctx.logs),
            result,
        };
        // Output is the call's: what the guest wrote is not carried to the next call.
        let _ = store.data().ctx.stdout.take();
        let _ = store.data().ctx.stderr.take();
        match &report.result {
            // A guest error value is the tool's answer; the instance is intact.
            Ok(_) | Err(GuestFault::GuestError { .. }) => {}
            Err(f) => *state = State::Ended(f.clone()),
        }
        report
    }

    /// End the session now: its instance is dropped and its memory freed; later calls return
    /// an error saying it was closed.
    pub async fn close(&self) {
        *self.state.lock().await = State::Ended(GuestFault::LimitExceeded {
            message: format!(
                "the session of `{}` was closed; open a new session",
                self.name
            ),
            setting: None,
        });
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
