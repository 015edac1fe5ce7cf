//! Host work done for a guest (tokenizer calls, image processing): run off the async workers,
//! timed in CPU, charged to the episode that asked, and bounded by its deadline.
//!
//! * **Deadline.** The episode's wall-clock limit includes its host calls (the outer timeout
//!   of `sandbox::guarded`); host work that is done in steps (images) checks the deadline
//!   between steps and stops there, and work is not started past it.
//! * **Fuel.** With fuel metering on, each host call's CPU time is charged to the episode's
//!   fuel at [`HOST_FUEL_PER_MS`]: taken from the store at the next epoch tick of the guest,
//!   or when the episode returns, so a guest cannot escape its budget by having the host work
//!   for it. An episode whose charge passes what it has left ends `out_of_fuel`.
//! * **Accounting.** The CPU time is summed in the episode report (`host_cpu`): the thread's
//!   CPU clock for work on the blocking pool, the monotonic clock for short work done inline.

use std::time::{Duration, Instant};

use wasmtime::{AsContextMut, Trap};

use crate::bindings::types::Error;
use crate::state::{CallCtx, Sandboxed, StoreState};

/// Fuel charged per millisecond of host CPU spent on a guest's behalf (one unit per
/// nanosecond): about what the guest would burn in that time itself, since a unit of fuel is
/// roughly one wasm instruction and this machine retires ~1 per ns per core in wasm code.
pub const HOST_FUEL_PER_MS: u64 = 1_000_000;

/// CPU time of the calling thread.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_THREAD_CPUTIME_ID is always supported
    // on Linux. On failure `ts` stays zero and the call is charged nothing.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// `f` and the time it took by the monotonic clock: for short host work done inline on an
/// async worker (it does not yield, so this is its CPU time plus any preemption), where the
/// thread CPU clock's two system calls (~1 µs each here) would cost more than the work.
pub(crate) fn timed_inline<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = Instant::now();
    let out = f();
    (out, start.elapsed())
}

/// `f` and the CPU time it took on this thread.
pub(crate) fn timed<T>(f: impl FnOnce() -> T) -> (T, Duration) {
    let start = thread_cpu();
    let out = f();
    (out, thread_cpu().saturating_sub(start))
}

/// Run `f` on tokio's blocking pool; returns its result and CPU time.
pub(crate) async fn offload<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> wasmtime::Result<(T, Duration)> {
    tokio::task::spawn_blocking(move || timed(f))
        .await
        .map_err(|e| wasmtime::format_err!("host task failed: {e}"))
}

/// The `timeout` error value for host work asked for or stopped past the deadline.
pub(crate) fn past_deadline(what: &str) -> Error {
    Error::Timeout(format!(
        "{what} stopped: the episode is past its deadline (`timeout`)"
    ))
}

impl CallCtx {
    /// Charge `cpu` of host work to this episode (and its fuel, when metered).
    pub(crate) fn charge_host(&mut self, cpu: Duration) {
        self.host_cpu += cpu;
        let fuel = cpu.as_nanos().saturating_mul(u128::from(HOST_FUEL_PER_MS)) / 1_000_000;
        let fuel = u64::try_from(fuel).unwrap_or(u64::MAX);
        self.host_fuel_debt = self.host_fuel_debt.saturating_add(fuel);
    }

    /// Whether the episode's deadline has passed.
    pub(crate) fn past_deadline(&self) -> bool {
        Instant::now() >= self.deadline
    }
}

/// Take the host work charged since the last settlement from the store's fuel (when metered);
/// `Trap::OutOfFuel` when it passes what is left (the fuel is then empty).
pub(crate) fn settle_host_fuel<C: Sandboxed>(
    mut store: impl AsContextMut<Data = StoreState<C>>,
    fuel_metering: bool,
) -> Result<(), Trap> {
    let mut cx = store.as_context_mut();
    let debt = std::mem::take(&mut cx.data_mut().ctx.call_mut().host_fuel_debt);
    if !fuel_metering || debt == 0 {
        return Ok(());
    }
    let left = cx.get_fuel().unwrap_or(0);
    let _ = cx.set_fuel(left.saturating_sub(debt));
    if debt > left {
        return Err(Trap::OutOfFuel);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_measured_and_sleep_is_not() {
        let ((), slept) = timed(|| std::thread::sleep(Duration::from_millis(20)));
        assert!(slept < Duration::from_millis(10), "{slept:?}");
        let (x, spun) = timed(|| {
            let start = Instant::now();
            let mut x = 0u64;
            while start.elapsed() < Duration::from_millis(20) {
                x = std::hint::black_box(x.wrapping_add(1));
            }
            x
        });
        assert!(x > 0);
        assert!(spun >= Duration::from_millis(5), "{spun:?}");
    }
}
