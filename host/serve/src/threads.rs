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
//!
//! A tenant's `episode_cpus` pins its episode threads (and their blocking pool) to those cores,
//! one thread each, and [`set_apart`] keeps every other thread of the server off them (its
//! HTTP workers, the engine, every tenant's calls and unpinned episodes): the other cores stay
//! free for calls and the server whatever the pinned episodes do. Priority alone cannot give
//! that on a small virtual machine: with every vCPU busy, the hypervisor takes time from the
//! guest (steal) and a call that wakes still waits for it; and a call woken on the episodes'
//! core waits for the scheduler to preempt them.

use std::future::Future;
use std::sync::OnceLock;

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
    /// The cores they are pinned to (`None`: any).
    cpus: Option<CpuSet>,
}

impl Threads {
    /// Threads for `tenant`'s `lane`: one per core of `cpus`, each pinned to them, or (`None`)
    /// one per core left to the server by [`set_apart`], pinned to those, or one per core of
    /// the machine, unpinned.
    pub fn new(tenant: &str, lane: Lane, cpus: Option<&CpuSet>) -> anyhow::Result<Self> {
        let pin = cpus.or_else(|| SHARED.get()).cloned();
        let workers = match &pin {
            Some(set) => set.len(),
            None => std::thread::available_parallelism().map_or(1, |n| n.get()),
        };
        let mut builder = tokio::runtime::Builder::new_multi_thread();
        builder
            .worker_threads(workers)
            .max_blocking_threads(workers * BLOCKING_PER_WORKER)
            .thread_name(lane.thread_name())
            .enable_all();
        let on = pin
            .as_ref()
            .map_or(String::new(), |c| format!(" on cores {c}"));
        builder.on_thread_start(move || {
            if lane == Lane::Episodes {
                lower_priority(EPISODE_NICE);
            }
            if let Some(set) = &pin {
                set.pin_current_thread();
            }
        });
        let runtime = builder
            .build()
            .with_context(|| format!("starting the threads of tenant `{tenant}`"))?;
        tracing::debug!("tenant `{tenant}`: {workers} threads for its {lane:?}{on}");
        Ok(Threads {
            runtime: Some(runtime),
            cpus: cpus.cloned(),
        })
    }

    /// The cores the tenant's entry pinned them to (`None`: none named).
    pub fn cpus(&self) -> Option<&CpuSet> {
        self.cpus.as_ref()
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

/// Cores a tenant's threads are pinned to (`episode_cpus = "1-3,6"` in the tenants file).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CpuSet {
    /// Core numbers, ascending, each once.
    cpus: Vec<usize>,
}

impl CpuSet {
    /// Parse a core list as Linux writes one (`0`, `2-5`, `0,2-3`): every core must be one
    /// this process may run on (its affinity mask, e.g. a container's cpuset), so a typo
    /// fails at start instead of leaving threads unpinned.
    pub fn parse(text: &str) -> Result<CpuSet, String> {
        let allowed = process_cpus().to_vec();
        let mut cpus = Vec::new();
        for part in text.split(',').map(str::trim) {
            let (lo, hi) = part.split_once('-').unwrap_or((part, part));
            let core = |s: &str| {
                s.trim().parse::<usize>().map_err(|_| {
                    format!("{text:?} is not a core list like \"1\", \"2-5\" or \"0,2-3\"")
                })
            };
            let (lo, hi) = (core(lo)?, core(hi)?);
            if lo > hi {
                return Err(format!("{text:?}: the range {part} runs backwards"));
            }
            for c in lo..=hi {
                if !allowed.contains(&c) {
                    return Err(format!(
                        "{text:?} names core {c}, which this server may not run on (it may run on {})",
                        CpuSet { cpus: allowed }
                    ));
                }
                cpus.push(c);
            }
        }
        cpus.sort_unstable();
        cpus.dedup();
        Ok(CpuSet { cpus })
    }

    /// How many cores.
    pub fn len(&self) -> usize {
        self.cpus.len()
    }

    /// Whether the set has no core (never, once parsed).
    pub fn is_empty(&self) -> bool {
        self.cpus.is_empty()
    }

    /// Every core of any of `sets`; `None` when there is none.
    pub fn union<'a>(sets: impl IntoIterator<Item = &'a CpuSet>) -> Option<CpuSet> {
        let mut cpus: Vec<usize> = sets.into_iter().flat_map(|s| s.cpus.clone()).collect();
        cpus.sort_unstable();
        cpus.dedup();
        (!cpus.is_empty()).then_some(CpuSet { cpus })
    }

    /// Keep the calling thread on these cores. A failure leaves it as it was, with a warning.
    fn pin_current_thread(&self) {
        if let Err(e) = self.pin(0) {
            tracing::warn!("pinning a thread to cores {self}: {e}; it runs on any core");
        }
    }

    /// Keep thread `tid` (0: the calling one) on these cores.
    fn pin(&self, tid: libc::pid_t) -> std::io::Result<()> {
        // SAFETY: cpu_set_t is plain data (all zeroes is the empty set); CPU_SET is given
        // cores below CPU_SETSIZE (they come from the process's own mask, which holds no
        // other), and sched_setaffinity reads exactly size_of::<cpu_set_t>() bytes.
        let done = unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            for &c in &self.cpus {
                libc::CPU_SET(c, &mut set);
            }
            libc::sched_setaffinity(tid, std::mem::size_of::<libc::cpu_set_t>(), &set)
        };
        if done == 0 {
            Ok(())
        } else {
            Err(std::io::Error::last_os_error())
        }
    }
}

/// The cores left to the server's threads once [`set_apart`] has run; unset: any.
static SHARED: OnceLock<CpuSet> = OnceLock::new();

/// Keep every thread of the process, and so every thread they start, off `reserved` (the
/// cores tenants' episodes are pinned to): the server's own threads, the engine's, and every
/// tenant's calls and unpinned episodes run on the cores left. Returns those, or `None` when
/// `reserved` leaves none (nothing is moved then). Done once, at start: a second call returns
/// what the first set apart.
pub fn set_apart(reserved: &CpuSet) -> anyhow::Result<Option<&'static CpuSet>> {
    if let Some(shared) = SHARED.get() {
        return Ok(Some(shared));
    }
    let left: Vec<usize> = process_cpus()
        .iter()
        .copied()
        .filter(|c| !reserved.cpus.contains(c))
        .collect();
    if left.is_empty() {
        return Ok(None);
    }
    let shared = SHARED.get_or_init(|| CpuSet { cpus: left });
    // A thread started while this runs takes its starter's mask: look again until no thread
    // is new (at start-up few threads start, so a second pass finds none).
    let mut done = std::collections::HashSet::new();
    for _ in 0..16 {
        let mut moved = false;
        let tasks = std::fs::read_dir("/proc/self/task").context("listing the server's threads")?;
        for task in tasks {
            let Some(tid) = task?.file_name().to_str().and_then(|t| t.parse().ok()) else {
                continue;
            };
            if !done.insert(tid) {
                continue;
            }
            moved = true;
            match shared.pin(tid) {
                Ok(()) => {}
                // It ended meanwhile.
                Err(e) if e.raw_os_error() == Some(libc::ESRCH) => {}
                Err(e) => {
                    return Err(e)
                        .with_context(|| format!("keeping thread {tid} on cores {shared}"));
                }
            }
        }
        if !moved {
            break;
        }
    }
    Ok(Some(shared))
}

/// The cores [`set_apart`] left to the server's threads, once it has run.
pub fn shared_cpus() -> Option<&'static CpuSet> {
    SHARED.get()
}

/// The cores the process could run on when first asked, before [`set_apart`] narrowed its
/// threads: what `episode_cpus` may name.
fn process_cpus() -> &'static [usize] {
    static CPUS: OnceLock<Vec<usize>> = OnceLock::new();
    CPUS.get_or_init(allowed_cpus)
}

impl std::fmt::Display for CpuSet {
    /// As Linux writes a core list: `0-3,6`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut i = 0;
        while i < self.cpus.len() {
            let mut j = i;
            while j + 1 < self.cpus.len() && self.cpus[j + 1] == self.cpus[j] + 1 {
                j += 1;
            }
            let sep = if i == 0 { "" } else { "," };
            if i == j {
                write!(f, "{sep}{}", self.cpus[i])?;
            } else {
                write!(f, "{sep}{}-{}", self.cpus[i], self.cpus[j])?;
            }
            i = j + 1;
        }
        Ok(())
    }
}

/// The cores this process may run on (all it can see if the mask cannot be read).
fn allowed_cpus() -> Vec<usize> {
    // SAFETY: sched_getaffinity writes at most size_of::<cpu_set_t>() bytes into `set`;
    // CPU_ISSET reads cores below CPU_SETSIZE only.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) == 0 {
            return (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &set))
                .collect();
        }
    }
    (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect()
}

/// Set the calling thread's nice value to `nice` (Linux sets it per thread; raising it needs
/// no privilege). A failure leaves the thread as it was.
fn lower_priority(nice: i32) {
    // SAFETY: setpriority takes no pointers.
    unsafe {
        libc::setpriority(libc::PRIO_PROCESS, thread_id(), nice);
    }
}

/// The calling thread's id, by the system call: glibc's `gettid` wrapper is 2.30's, newer than
/// the release artifacts' glibc 2.28.
fn thread_id() -> libc::id_t {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::id_t }
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
mod tests;
