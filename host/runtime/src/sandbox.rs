//! One guarded guest call: a fresh store with every limit applied, a deadline enforced by
//! epoch interruption plus an outer timeout, and failures classified into a [`GuestFault`].

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use wasmtime::{Store, UpdateDeadline};

use crate::fault::{FaultContext, GuestFault, classify};
use crate::limits::Limits;
use crate::services::Services;
use crate::state::StoreState;

/// Extra wall time allowed beyond the deadline for the outer timeout, which only fires when
/// the guest is blocked in a host call (epoch interruption cannot reach it there).
const OUTER_TIMEOUT_GRACE: Duration = Duration::from_millis(100);

/// Handles past `max_handles` the component model itself allows (the few handles WASI stdio
/// and the instance use), so the guest-visible tensor limit is reached first.
const HANDLE_SLACK: usize = 64;

/// Epoch ticks a guest runs before it yields to the executor: it has then run at least one
/// whole tick (2-4 ms). With one tick, a guest yielded at the first tick after it started, even
/// microseconds in: short guests were preempted at random, went to the back of the executor's
/// queue, and a preempted reward kept its slot of the untrusted pool meanwhile, so the other
/// episodes queued behind it (`rollbox bench rollout`, 512 in flight: episode p50 42 ms, with
/// two ticks 0.12 ms).
pub(crate) const YIELD_TICKS: u64 = 2;

/// A guest call's future, borrowing the store.
pub(crate) type GuestFuture<'a, R> = Pin<Box<dyn Future<Output = wasmtime::Result<R>> + Send + 'a>>;

/// A store with `limits` applied: memory limiter, hostcall fuel, handle cap, fuel, and an
/// epoch callback that yields after [`YIELD_TICKS`] ticks of running and interrupts at the
/// deadline.
pub(crate) fn new_store(
    engine: &wasmtime::Engine,
    fuel_metering: bool,
    services: Arc<Services>,
    id: String,
    limits: Arc<Limits>,
) -> Store<StoreState> {
    let state = StoreState::new(id, limits.clone(), services);
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limiter);
    store.set_hostcall_fuel(limits.max_boundary_bytes);
    store.set_max_component_handles(limits.max_handles.saturating_add(HANDLE_SLACK));
    if fuel_metering {
        // A store starts with zero fuel; unmetered stores get effectively unlimited fuel.
        let _ = store.set_fuel(limits.fuel.unwrap_or(u64::MAX));
    }
    let deadline = Instant::now() + limits.timeout;
    store.set_epoch_deadline(YIELD_TICKS);
    store.epoch_deadline_callback(move |_| {
        if Instant::now() >= deadline {
            Ok(UpdateDeadline::Interrupt)
        } else {
            Ok(UpdateDeadline::Yield(YIELD_TICKS))
        }
    });
    store
}

/// Run `call` on `store` under its deadline; classify any failure.
pub(crate) async fn guarded<R>(
    store: &mut Store<StoreState>,
    call: impl for<'a> FnOnce(&'a mut Store<StoreState>) -> GuestFuture<'a, R>,
) -> Result<R, GuestFault> {
    let limits = store.data().ctx.limits.clone();
    let outcome = {
        let fut = call(store);
        tokio::time::timeout(limits.timeout + OUTER_TIMEOUT_GRACE, fut).await
    };
    match outcome {
        Err(_elapsed) => Err(GuestFault::Timeout {
            limit_ms: limits.timeout.as_millis() as u64,
        }),
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => {
            let ctx = &store.data().ctx;
            let (stderr, _) = ctx.stderr.take();
            let cx = FaultContext {
                timeout: limits.timeout,
                fuel: limits.fuel,
                max_boundary_bytes: limits.max_boundary_bytes,
                refused: ctx.refused.as_deref(),
                stderr: &stderr,
            };
            Err(classify(&e, &cx))
        }
    }
}

/// Fuel consumed by the store, when fuel metering is on.
pub(crate) fn fuel_consumed(fuel_metering: bool, store: &Store<StoreState>) -> Option<u64> {
    if !fuel_metering {
        return None;
    }
    let start = store.data().ctx.limits.fuel.unwrap_or(u64::MAX);
    store.get_fuel().ok().map(|left| start.saturating_sub(left))
}
