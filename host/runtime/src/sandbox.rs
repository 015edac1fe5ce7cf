//! One guarded guest call: a fresh store with every limit applied, a deadline enforced by
//! epoch interruption plus an outer timeout, and failures classified into a [`GuestFault`].

use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, Instant};

use wasmtime::{Store, UpdateDeadline};

use crate::fault::{FaultContext, GuestFault, classify};
use crate::state::{Sandboxed, StoreState};

/// Extra wall time allowed beyond the deadline for the outer timeout, which only fires when
/// the guest is blocked in a host call (epoch interruption cannot reach it there).
const OUTER_TIMEOUT_GRACE: Duration = Duration::from_millis(100);

/// Handles past `max_handles` the component model itself allows (the few handles WASI stdio
/// and the instance use), so the guest-visible tensor limit is reached first.
const HANDLE_SLACK: usize = 64;

/// Epoch ticks a guest runs before it yields to the executor (8-10 ms). The deadline is checked
/// at every tick. Yielding at each tick preempted short guests at random, microseconds in; a
/// preempted episode then waited behind every queued one (`rollbox-bench rollout`, 512 in
/// flight: p50 42 ms), and with two ticks rare stalls of this shared VM still caused bursts of
/// yields (p99 4-72 ms in some runs); with five, none were seen (p99 0.34-0.39 ms).
pub(crate) const YIELD_TICKS: u32 = 5;

/// A guest call's future, borrowing the store.
pub(crate) type GuestFuture<'a, R> = Pin<Box<dyn Future<Output = wasmtime::Result<R>> + Send + 'a>>;

/// A store with `limits` applied: memory limiter, hostcall fuel, handle cap, fuel, and an
/// epoch callback that checks the deadline every tick, interrupts past it, charges host work
/// to the fuel, and yields after [`YIELD_TICKS`] ticks of running.
pub(crate) fn new_store<C: Sandboxed>(
    engine: &wasmtime::Engine,
    fuel_metering: bool,
    state: StoreState<C>,
) -> Store<StoreState<C>> {
    let limits = state.ctx.call().limits.clone();
    let mut store = Store::new(engine, state);
    store.limiter(|s| &mut s.limiter);
    store.set_hostcall_fuel(limits.max_boundary_bytes);
    store.set_max_component_handles(limits.max_handles.saturating_add(HANDLE_SLACK));
    if fuel_metering {
        // A store starts with zero fuel; unmetered stores get effectively unlimited fuel.
        let _ = store.set_fuel(limits.fuel.unwrap_or(u64::MAX));
    }
    store.set_epoch_deadline(1);
    let mut ticks_running = 0;
    store.epoch_deadline_callback(move |mut cx| {
        // The call's deadline, as host calls check it (a session sets it anew for each call).
        if Instant::now() >= cx.data().ctx.call().deadline {
            return Ok(UpdateDeadline::Interrupt);
        }
        // Host work done for the guest since the last tick is taken from its fuel.
        crate::host_work::settle_host_fuel(&mut cx, fuel_metering)?;
        ticks_running += 1;
        if ticks_running < YIELD_TICKS {
            return Ok(UpdateDeadline::Continue(1));
        }
        ticks_running = 0;
        Ok(UpdateDeadline::Yield(1))
    });
    store
}

/// Run `call` on `store` under its deadline; classify any failure.
pub(crate) async fn guarded<R, C: Sandboxed>(
    store: &mut Store<StoreState<C>>,
    call: impl for<'a> FnOnce(&'a mut Store<StoreState<C>>) -> GuestFuture<'a, R>,
) -> Result<R, GuestFault> {
    let limits = store.data().ctx.call().limits.clone();
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
            let ctx = store.data().ctx.call();
            let (stderr, _) = ctx.stderr.take();
            let cx = FaultContext {
                timeout: limits.timeout,
                fuel: limits.fuel,
                max_boundary_bytes: limits.max_boundary_bytes,
                refused: ctx.refused.as_ref(),
                stderr: &stderr,
            };
            Err(classify(&e, &cx))
        }
    }
}

/// Fuel consumed by the store, when fuel metering is on.
pub(crate) fn fuel_consumed<C: Sandboxed>(
    fuel_metering: bool,
    store: &Store<StoreState<C>>,
) -> Option<u64> {
    if !fuel_metering {
        return None;
    }
    let start = store.data().ctx.call().limits.fuel.unwrap_or(u64::MAX);
    store.get_fuel().ok().map(|left| start.saturating_sub(left))
}
