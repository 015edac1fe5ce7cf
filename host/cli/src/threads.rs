//! Threads of a tenant's own for its sandboxes (`rollbox serve --tenants`).
//!
//! A tokio worker changes task only when the running one yields, and a guest that spins yields
//! every 10 ms (`YIELD_TICKS` epoch ticks). On the server's workers, one tenant's spinning
//! guests hold each request of every other tenant that lands on their worker for up to that
//! long (and a task woken into a busy worker's LIFO slot is not stolen by an idle one). Run on
//! threads of their own, a tenant's guests are scheduled by the kernel instead: it shares the
//! cores between the threads of all tenants and of the server, and runs a thread that wakes
//! (another tenant's call, the server answering a request) in place of one that has been
//! running, without waiting for a guest to yield.
//!
//! Each tenant gets as many threads as the machine has cores, made on its first sandbox: a
//! tenant alone can still use the whole machine, and a flood of its calls holds at most that
//! many threads' share of the cores. Host work its guests ask for (tokenizing, images) runs on
//! its own blocking pool too.

use std::future::Future;

use anyhow::Context;

/// Blocking-pool threads a tenant's runtime may start per worker thread.
const BLOCKING_PER_WORKER: usize = 4;

/// What a tenant's threads run: its request/response calls, or its episodes (batch work).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lane {
    /// Reward calls and `/run_code` programs, at the server's priority.
    Calls,
    /// Episodes, at [`EPISODE_NICE`]: when a core is wanted by both, any call and the
    /// server's own threads run first.
    Episodes,
}

/// The nice value of the threads running episodes (the server's and the calls' are 0).
pub const EPISODE_NICE: i32 = 10;

impl Lane {
    /// The threads' name (Linux keeps 15 bytes; the tenant's name is in the log instead).
    pub fn thread_name(self) -> &'static str {
        match self {
            Lane::Calls => "rollbox-tenant",
            Lane::Episodes => "rollbox-episode",
        }
    }
}

/// A tenant's threads: an async runtime its sandbox calls or its episodes are spawned on.
#[derive(Debug)]
pub struct Threads {
    /// Always `Some` until dropped.
    runtime: Option<tokio::runtime::Runtime>,
}

impl Threads {
    /// `workers` threads for `tenant`'s `lane`.
    pub fn new(tenant: &str, lane: Lane, workers: usize) -> anyhow::Result<Self> {
        let workers = workers.max(1);
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder
            .worker_threads(workers)
            .max_blocking_threads(workers * BLOCKING_PER_WORKER)
            .thread_name(lane.thread_name())
            .enable_all();
        if lane == Lane::Episodes {
            builder.on_thread_start(|| lower_priority(EPISODE_NICE));
        }
        let runtime = builder
            .build()
            .with_context(|| format!("starting the threads of tenant `{tenant}`"))?;
        tracing::debug!("tenant `{tenant}`: {workers} threads for its {lane:?}");
        Ok(Threads {
            runtime: Some(runtime),
        })
    }

    /// Run `fut` on these threads; its output, or an error if it panicked or was cancelled.
    pub fn spawn<F>(&self, fut: F) -> tokio::task::JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.handle().spawn(fut)
    }

    /// The runtime's handle, to spawn on.
    pub fn handle(&self) -> &tokio::runtime::Handle {
        self.runtime
            .as_ref()
            .expect("a tenant's runtime is there until dropped")
            .handle()
    }
}

/// Set the calling thread's nice value to `nice` (Linux sets it per thread; raising it needs
/// no privilege). A failure leaves the thread as it was.
fn lower_priority(nice: i32) {
    // SAFETY: gettid and setpriority take no pointers.
    unsafe {
        let tid = libc::gettid();
        libc::setpriority(libc::PRIO_PROCESS, tid as libc::id_t, nice);
    }
}

impl Drop for Threads {
    /// Stop the threads without waiting for them: dropping a runtime waits for its tasks,
    /// which may not be done inside another runtime (the server's).
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            rt.shutdown_background();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A task on a tenant's threads runs on them, not on the caller's; dropping the threads
    /// inside another runtime does not panic.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tasks_run_on_the_tenants_threads() {
        let threads = Threads::new("a", Lane::Calls, 2).expect("threads");
        let name = threads
            .spawn(async { std::thread::current().name().map(str::to_string) })
            .await
            .expect("joined");
        assert_eq!(name.as_deref(), Some("rollbox-tenant"));
        let here = std::thread::current().name().map(str::to_string);
        assert_ne!(here.as_deref(), Some("rollbox-tenant"));
        drop(threads);
    }
}
