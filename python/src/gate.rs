//! Rust futures as asyncio awaitables, and the GIL taken from the runtime's threads, safe while
//! the interpreter exits.
//!
//! A future's result reaches its asyncio future through `loop.call_soon_threadsafe`, called
//! from a tokio thread holding the GIL. That call writes to the loop's wake-up socket and lets
//! the GIL go while it writes; the loop may then finish the program, and the interpreter starts
//! finalizing. CPython ends a thread that asks for the GIL after that point with
//! `pthread_exit` (3.10 to 3.13), which unwinds through Rust frames that cannot be unwound:
//! SIGABRT or SIGSEGV at exit, after every result came back (about 1 run in 3 of a script
//! gathering 200 `call_tool`s).
//!
//! So every entry into Python from a runtime thread goes through [`attach`], which counts the
//! threads inside; an `atexit` hook ([`drain`], registered when the module loads) closes the
//! gate and waits, with the GIL released, for those inside to leave. `atexit` hooks run before
//! CPython marks itself finalizing. After that, a future's result is dropped (no one can await
//! it) and an engine call fails as unavailable.

use std::future::Future;
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use pyo3::exceptions::PyRuntimeError;
use pyo3::prelude::*;
use tokio::task::AbortHandle;

/// Who is inside Python from a runtime thread, and whether new entries are refused.
struct Gate {
    state: Mutex<(bool, usize)>,
    left: Condvar,
}

static GATE: Gate = Gate {
    state: Mutex::new((false, 0)),
    left: Condvar::new(),
};

/// How long the exit hook waits for threads inside Python: each is only building a result and
/// queueing it on the loop, so this bounds a wedged thread, not a normal one.
const DRAIN_WAIT: Duration = Duration::from_secs(10);

/// Run `f` with the GIL from a thread Python did not start; None once the interpreter is
/// exiting (after [`drain`]), when `f` is not run.
pub(crate) fn attach<R>(f: impl FnOnce(Python<'_>) -> R) -> Option<R> {
    {
        let mut s = GATE.state.lock().unwrap_or_else(|p| p.into_inner());
        if s.0 {
            return None;
        }
        s.1 += 1;
    }
    struct Leave;
    impl Drop for Leave {
        fn drop(&mut self) {
            let mut s = GATE.state.lock().unwrap_or_else(|p| p.into_inner());
            s.1 -= 1;
            if s.1 == 0 {
                GATE.left.notify_all();
            }
        }
    }
    let _leave = Leave;
    Some(Python::attach(f))
}

/// The `atexit` hook: refuse new entries from runtime threads and wait, without the GIL, for
/// those inside to leave.
#[pyfunction]
pub(crate) fn drain(py: Python<'_>) {
    py.detach(|| {
        let mut s = GATE.state.lock().unwrap_or_else(|p| p.into_inner());
        s.0 = true;
        let _ = GATE
            .left
            .wait_timeout_while(s, DRAIN_WAIT, |s| s.1 > 0)
            .unwrap_or_else(|p| p.into_inner());
    });
}

/// Sets the asyncio future's result or exception on the loop's thread, unless it was
/// cancelled meanwhile.
#[pyclass(frozen)]
struct Complete;

#[pymethods]
impl Complete {
    fn __call__(&self, fut: &Bound<'_, PyAny>, ok: bool, value: &Bound<'_, PyAny>) -> PyResult<()> {
        if fut.call_method0("cancelled")?.is_truthy()? {
            return Ok(());
        }
        fut.call_method1(if ok { "set_result" } else { "set_exception" }, (value,))?;
        Ok(())
    }
}

/// Aborts the Rust task when its asyncio future is cancelled.
#[pyclass(frozen)]
struct OnDone {
    abort: AbortHandle,
}

#[pymethods]
impl OnDone {
    fn __call__(&self, fut: &Bound<'_, PyAny>) -> PyResult<()> {
        if fut.call_method0("cancelled")?.is_truthy()? {
            self.abort.abort();
        }
        Ok(())
    }
}

/// `fut` as an awaitable on the running event loop: run on the tokio runtime, its output
/// turned into a Python value by `finish` with the GIL (on a blocking thread, so no runtime
/// worker waits for the GIL). Cancelling the awaitable drops `fut` at its next await.
pub(crate) fn awaitable<'py, T, F, G>(
    py: Python<'py>,
    fut: F,
    finish: G,
) -> PyResult<Bound<'py, PyAny>>
where
    T: Send + 'static,
    F: Future<Output = T> + Send + 'static,
    G: FnOnce(Python<'_>, T) -> PyResult<Py<PyAny>> + Send + 'static,
{
    let event_loop = pyo3_async_runtimes::tokio::get_current_locals(py)?
        .event_loop(py)
        .unbind();
    let py_fut = event_loop.bind(py).call_method0("create_future")?;
    let target = py_fut.clone().unbind();
    let runtime = pyo3_async_runtimes::tokio::get_runtime();
    let task = runtime.spawn(fut);
    py_fut.call_method1(
        "add_done_callback",
        (OnDone {
            abort: task.abort_handle(),
        },),
    )?;
    runtime.spawn(async move {
        let result = match task.await {
            Ok(v) => Ok(v),
            Err(e) if e.is_cancelled() => return,
            Err(e) => Err(panic_message(e.into_panic())),
        };
        let deliver = move || {
            attach(|py| {
                let fut = target.bind(py);
                if fut.call_method0("cancelled")?.is_truthy()? {
                    return Ok(());
                }
                let (ok, value) = match result.map(|v| finish(py, v)) {
                    Ok(Ok(v)) => (true, v),
                    Ok(Err(e)) => (false, e.into_value(py).into_any()),
                    Err(m) => (false, PyRuntimeError::new_err(m).into_value(py).into_any()),
                };
                event_loop
                    .bind(py)
                    .call_method1("call_soon_threadsafe", (Complete, fut, ok, value))?;
                PyResult::Ok(())
            })
        };
        // A loop closed meanwhile refuses the call; the result has no one to go to then.
        let _ = tokio::task::spawn_blocking(deliver).await;
    });
    Ok(py_fut)
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    let m = p
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown".into());
    format!("rollbox panicked: {m}")
}
