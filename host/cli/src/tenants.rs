//! Tenants of a shared `rollbox serve` (`--tenants FILE`): who may call the server, with which
//! API keys, which of its components, and how much of it each may take.
//!
//! ```toml
//! [[tenant]]
//! name = "team-a"
//! # SHA-256 of each API key, in hex: printf %s "$KEY" | sha256sum
//! key_sha256 = ["4c2b...e1"]
//! rewards = ["math"]               # registered rewards it may call (default: all)
//! tools = ["python"]               # registered tools (default: all); /run_code needs `python`
//! workflows = ["default"]          # `default` (--workflow) and --extra-workflow names
//! component_dirs = ["/srv/team-a"] # a request may name a workflow file beneath these
//! component_sha256 = ["9f86...08"] # or one the server has compiled, as "sha256:HEX"
//! timeout = "30s"                  # each episode and call, at most (never past the server's)
//! max_memory = "1GiB"              # each episode's and call's memory, at most
//! max_requests_in_flight = 8       # more get 429 with Retry-After
//! max_episodes_in_flight = 64      # over all its /v1/episodes requests; more wait
//! max_reward_calls_in_flight = 16  # reward and /run_code calls; more wait
//! sandbox_seconds_per_minute = 120 # time its sandboxes run; past it, 429 with Retry-After
//! max_body_bytes = 16777216        # at most the server's cap
//! max_rows_per_request = 1024      # rows of /v1/episodes, samples of /get_reward
//! episode_cpus = "1-3"             # its episodes run on these cores only, set apart from
//!                                   # the server's other threads (default: any)
//! ```
//!
//! The file holds hashes, never keys: whoever reads it cannot call the server. It must be a
//! regular file owned by the user running the server (or root) and writable by nobody else,
//! checked on the opened file (links are followed: Kubernetes mounts secrets as links).
//! A request's `Authorization: Bearer KEY` (or `Basic` with the key as the password: a URL
//! `http://team-a:KEY@host/get_reward` for trainers that only take a URL) is hashed and
//! compared with every key of every tenant, each comparison over all 32 bytes, so the time
//! taken does not depend on how much of a hash matched nor on which tenant's key it is.
//! `SIGHUP` reads the file again: a key left out of it is refused from then on, and counters,
//! requests in flight and time used carry over by tenant name.
//!
//! A tenant's sandbox time is the wall time of its reward and tool calls and of its episodes
//! (each runs on one thread, so this bounds the CPU its guests take; an episode's time also
//! holds its waits for the engine). It refills at `sandbox_seconds_per_minute / 60` per second
//! up to a minute's worth; a request is admitted while some is left, and the calls of an
//! admitted request all run (one request can overdraw by at most its own calls' time).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Deserialize;
use sha2::{Digest, Sha256};

/// Largest tenants file, bytes.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// A tenant as the file gives it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantEntry {
    name: String,
    key_sha256: Vec<String>,
    rewards: Option<Vec<String>>,
    tools: Option<Vec<String>>,
    workflows: Option<Vec<String>>,
    #[serde(default)]
    component_dirs: Vec<PathBuf>,
    #[serde(default)]
    component_sha256: Vec<String>,
    timeout: Option<String>,
    max_memory: Option<String>,
    max_requests_in_flight: Option<usize>,
    max_episodes_in_flight: Option<usize>,
    max_reward_calls_in_flight: Option<usize>,
    sandbox_seconds_per_minute: Option<u64>,
    max_body_bytes: Option<usize>,
    max_rows_per_request: Option<usize>,
    episode_cpus: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantsFile {
    #[serde(default)]
    tenant: Vec<TenantEntry>,
}

/// What one tenant may take at once, each at most the server's own cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quota {
    /// Requests in flight; more are answered 429.
    pub requests_in_flight: usize,
    /// Episodes in flight over all the tenant's `/v1/episodes` requests; more wait.
    pub episodes_in_flight: usize,
    /// Reward and `/run_code` calls in flight over all its requests; more wait.
    pub reward_calls_in_flight: usize,
    /// Sandbox time a minute, seconds (`None`: the tenant's calls are not metered).
    pub sandbox_seconds_per_minute: Option<u64>,
    /// Request body, bytes.
    pub body_bytes: usize,
    /// Rows of a `/v1/episodes` request, samples of a `/get_reward` one.
    pub rows_per_request: usize,
}

/// A tenant's counters, requests in flight and time used, kept across reloads of the file.
#[derive(Debug, Default)]
pub struct Usage {
    in_flight: AtomicUsize,
    /// Requests let through.
    pub requests: AtomicU64,
    /// Requests answered 429 (at the in-flight quota).
    pub throttled: AtomicU64,
    /// Requests answered 429 for want of sandbox time.
    pub out_of_time: AtomicU64,
    /// Microseconds the tenant's sandboxes have run (reward, tool and episode calls).
    pub sandbox_us: Arc<AtomicU64>,
    /// Microseconds its reward and tool calls waited for a place in the sandbox pool.
    pub queue_wait_us: AtomicU64,
    /// Its sandbox time left (`None` until first asked).
    bucket: Mutex<Option<Bucket>>,
    /// Its episodes' slots, with the quota they were made for.
    episodes: Mutex<Option<(usize, Arc<tokio::sync::Semaphore>)>>,
    /// The threads its calls and its episodes run on, made on first use (`None`: they could
    /// not be started, and they run on the server's workers).
    threads: std::sync::OnceLock<Option<crate::threads::Threads>>,
    episode_threads: std::sync::OnceLock<Option<crate::threads::Threads>>,
}

/// Sandbox time left, as of `at`.
#[derive(Debug)]
struct Bucket {
    left_us: f64,
    at: Instant,
    /// `Usage::sandbox_us` already taken off.
    seen_us: u64,
}

/// A tenant: its name, keys (hashed), the components it may use and its quota.
#[derive(Debug)]
pub struct Tenant {
    pub name: String,
    keys: Vec<[u8; 32]>,
    /// Registered rewards it may call (`None`: all).
    pub rewards: Option<Vec<String>>,
    /// Registered tools it may call (`None`: all).
    pub tools: Option<Vec<String>>,
    /// Workflows it may run (`default` is `--workflow`; `None`: all).
    pub workflows: Option<Vec<String>>,
    /// Directories its requests may load workflows from by path.
    pub component_dirs: Vec<PathBuf>,
    /// Content hashes (lowercase hex) of workflows its requests may name as `sha256:HEX`.
    pub component_sha256: Vec<String>,
    /// Each of its episodes' and calls' time limit, at most (`None`: as the server registered).
    pub timeout: Option<Duration>,
    /// Each of its episodes' and calls' memory, at most, bytes (`None`: as registered).
    pub max_memory_bytes: Option<u64>,
    pub quota: Quota,
    /// The cores its episodes run on (`None`: any).
    pub episode_cpus: Option<crate::threads::CpuSet>,
    pub usage: Arc<Usage>,
}

/// A request counted against its tenant's in-flight quota until dropped.
#[derive(Debug)]
pub struct InFlight {
    usage: Arc<Usage>,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.usage.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

impl Tenant {
    /// Count a request against the in-flight quota; `None` when the tenant is at it.
    pub fn admit(&self) -> Option<InFlight> {
        let cap = self.quota.requests_in_flight;
        let admitted = self
            .usage
            .in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < cap).then_some(n + 1)
            })
            .is_ok();
        if admitted {
            self.usage.requests.fetch_add(1, Ordering::Relaxed);
            Some(InFlight {
                usage: self.usage.clone(),
            })
        } else {
            self.usage.throttled.fetch_add(1, Ordering::Relaxed);
            None
        }
    }

    /// Requests of this tenant in flight now.
    pub fn in_flight(&self) -> usize {
        self.usage.in_flight.load(Ordering::Acquire)
    }

    /// `None` while the tenant has sandbox time left (or is not metered); else how long until
    /// it has some again. Counts a refusal.
    pub fn out_of_time(&self) -> Option<Duration> {
        let per_minute = self.quota.sandbox_seconds_per_minute?;
        let full = per_minute as f64 * 1e6;
        let per_second = full / 60.0;
        let now = Instant::now();
        let used = self.usage.sandbox_us.load(Ordering::Acquire);
        let mut bucket = self.usage.bucket.lock().unwrap_or_else(|p| p.into_inner());
        let b = bucket.get_or_insert(Bucket {
            left_us: full,
            at: now,
            seen_us: used,
        });
        let refilled = b.left_us + per_second * now.duration_since(b.at).as_secs_f64();
        b.left_us = refilled.min(full) - used.saturating_sub(b.seen_us) as f64;
        b.at = now;
        b.seen_us = used;
        if b.left_us > 0.0 {
            return None;
        }
        self.usage.out_of_time.fetch_add(1, Ordering::Relaxed);
        Some(Duration::from_secs_f64(-b.left_us / per_second).max(Duration::from_secs(1)))
    }

    /// Whether the tenant may call the registered reward `name`.
    pub fn may_reward(&self, name: &str) -> bool {
        self.rewards
            .as_ref()
            .is_none_or(|r| r.iter().any(|n| n == name))
    }

    /// Whether the tenant may run the workflow `name`.
    pub fn may_workflow(&self, name: &str) -> bool {
        self.workflows
            .as_ref()
            .is_none_or(|w| w.iter().any(|n| n == name))
    }

    /// Whether the tenant may call the registered tool `name`.
    pub fn may_tool(&self, name: &str) -> bool {
        self.tools
            .as_ref()
            .is_none_or(|t| t.iter().any(|n| n == name))
    }

    /// What the tenant's episodes draw on together: its episodes in flight and its sandbox
    /// time.
    pub fn shared_episodes(&self) -> rollbox_rollout::SharedEpisodes {
        let n = self.quota.episodes_in_flight;
        let mut slots = self
            .usage
            .episodes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        let in_flight = match &*slots {
            Some((cap, s)) if *cap == n => s.clone(),
            // A new quota (a reload) gets new slots; requests already running keep theirs.
            _ => {
                let s = Arc::new(tokio::sync::Semaphore::new(n));
                *slots = Some((n, s.clone()));
                s
            }
        };
        rollbox_rollout::SharedEpisodes {
            in_flight,
            sandbox_us: self.usage.sandbox_us.clone(),
            threads: self.episode_threads().map(|t| t.handle().clone()),
        }
    }

    /// The tenant's episodes running now, over all its requests.
    pub fn episodes_in_flight(&self) -> usize {
        let slots = self
            .usage
            .episodes
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        slots
            .as_ref()
            .map_or(0, |(cap, s)| cap.saturating_sub(s.available_permits()))
    }

    /// The threads the tenant's reward calls and `/run_code` programs run on, one per core,
    /// started on first use; `None` when they could not be started (logged once), and the
    /// caller runs them where it is.
    pub fn threads(&self) -> Option<&crate::threads::Threads> {
        self.lane(&self.usage.threads, crate::threads::Lane::Calls)
    }

    /// The threads the tenant's episodes run on, at a lower priority than any call (see
    /// [`crate::threads::Lane::Episodes`]); as [`Tenant::threads`] otherwise.
    pub fn episode_threads(&self) -> Option<&crate::threads::Threads> {
        self.lane(&self.usage.episode_threads, crate::threads::Lane::Episodes)
    }

    fn lane<'a>(
        &'a self,
        cell: &'a std::sync::OnceLock<Option<crate::threads::Threads>>,
        lane: crate::threads::Lane,
    ) -> Option<&'a crate::threads::Threads> {
        cell.get_or_init(|| {
            let cpus = match lane {
                crate::threads::Lane::Episodes => self.episode_cpus.as_ref(),
                crate::threads::Lane::Calls => None,
            };
            crate::threads::Threads::new(&self.name, lane, cpus)
                .inspect_err(|e| tracing::warn!("{e:#}; they run on the server's threads"))
                .ok()
        })
        .as_ref()
    }

    /// Count `d` of sandbox time against the tenant.
    pub fn charge(&self, d: Duration) {
        let us = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.usage.sandbox_us.fetch_add(us, Ordering::AcqRel);
    }
}

/// The tenants of a server, from `--tenants FILE`; [`Tenants::reload`] reads the file again.
pub struct Tenants {
    path: PathBuf,
    server: Quota,
    registered: Registered,
    current: RwLock<Arc<Vec<Arc<Tenant>>>>,
}

impl Tenants {
    /// Read and check `path`; `server` caps every tenant's quota (and is the default of what
    /// a tenant leaves out, but for requests in flight: 4); a tenant's `rewards` and `tools`
    /// must be among `registered`.
    pub fn load(path: &Path, server: Quota, registered: Registered) -> anyhow::Result<Self> {
        let tenants = read(path, server, &registered, &HashMap::new())?;
        Ok(Tenants {
            path: path.to_path_buf(),
            server,
            registered,
            current: RwLock::new(Arc::new(tenants)),
        })
    }

    /// Read the file again; on an error the tenants stay as they were. Returns how many there
    /// are now.
    pub fn reload(&self) -> anyhow::Result<usize> {
        let usage: HashMap<String, Arc<Usage>> = self
            .all()
            .iter()
            .map(|t| (t.name.clone(), t.usage.clone()))
            .collect();
        let tenants = read(&self.path, self.server, &self.registered, &usage)?;
        let n = tenants.len();
        *self.current.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(tenants);
        Ok(n)
    }

    /// Every tenant, in the file's order.
    pub fn all(&self) -> Arc<Vec<Arc<Tenant>>> {
        self.current
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// The tenant whose key `authorization` (an `Authorization` header's value) carries, if
    /// any: `Bearer KEY`, the key hashed and compared with every key of every tenant.
    pub fn authenticate(&self, authorization: Option<&[u8]>) -> Option<Arc<Tenant>> {
        let key = bearer(authorization?)?;
        let digest: [u8; 32] = Sha256::digest(&key).into();
        let mut found = None;
        for tenant in self.all().iter() {
            for k in &tenant.keys {
                // Every key is compared in full, a match or not.
                if constant_time_eq(k, &digest) {
                    found = Some(tenant.clone());
                }
            }
        }
        found
    }
}

/// Turns between tenants for the sandbox pool, shared by time: at most `n` calls pass at
/// once, and a place that frees goes to the waiting tenant whose calls have used the least
/// time, counting the time so far of its calls in flight (ties: the next by name after the
/// last served). A tenant whose calls each run to a
/// long timeout thus takes no more of the pool's time than one whose calls are quick, and a
/// tenant with thousands of calls queued delays another's next call by at most one call per
/// place. A tenant that starts waiting again begins at the least time of those waiting, so
/// time it left unused is not banked against the others. A tenant holding as many places as
/// its cap (`max_reward_calls_in_flight`) is passed over until one of its calls ends.
///
/// With two places or more, the last free place is kept for a tenant that holds none and has
/// asked for one within [`RESERVE_WINDOW`]: a tenant whose calls spin to a long timeout cannot
/// fill the pool while another is calling, so the other's next call finds a place at once
/// instead of waiting for a spinning call to end. A reserved place nobody takes within the
/// window goes to those waiting.
pub struct FairGate {
    state: Mutex<GateState>,
}

/// How long after a tenant last asked for a place the last free one is kept for it.
pub const RESERVE_WINDOW: Duration = Duration::from_secs(1);

/// A waiting call's place, handed over with the moment it was taken.
type Turn = tokio::sync::oneshot::Sender<Instant>;

struct GateState {
    free: usize,
    waiting: std::collections::BTreeMap<Arc<str>, std::collections::VecDeque<Turn>>,
    /// Time each tenant's finished calls held a place.
    used: HashMap<Arc<str>, Duration>,
    /// Places each tenant holds now.
    holding: HashMap<Arc<str>, Held>,
    /// The tenant served last.
    last: Arc<str>,
    /// What the places' start times in [`Held::started_ns`] count from.
    base: Instant,
    /// Places in all.
    places: usize,
    /// When a task will next look again at places kept free for a reservation.
    wake_at: Option<Instant>,
}

/// The places one tenant holds: how many, the most it may, and the sum of the moments they
/// were taken (ns after [`GateState::base`]), so the time its calls in flight have held them
/// is `n * now - started_ns` without a list.
#[derive(Clone, Copy)]
struct Held {
    n: usize,
    cap: usize,
    started_ns: u128,
    /// When it last asked for a place.
    asked: Instant,
}

impl GateState {
    /// Whether `tenant` may take another place (it holds fewer than its cap).
    fn under_cap(&self, tenant: &Arc<str>) -> bool {
        self.holding.get(tenant).is_none_or(|h| h.n < h.cap)
    }

    /// Until when the last free place is kept from `tenant` for another that holds none and
    /// asked within [`RESERVE_WINDOW`] (`None`: it is not).
    fn reserved_from(&self, tenant: &Arc<str>, now: Instant) -> Option<Instant> {
        if self.places < 2 || self.free > 1 {
            return None;
        }
        self.holding
            .iter()
            .filter(|(t, h)| *t != tenant && h.n == 0)
            .map(|(_, h)| h.asked + RESERVE_WINDOW)
            .filter(|until| *until > now)
            .max()
    }

    /// Whether `tenant` may take a free place now.
    fn may_take(&self, tenant: &Arc<str>, now: Instant) -> bool {
        self.under_cap(tenant) && self.reserved_from(tenant, now).is_none()
    }

    fn ns(&self, at: Instant) -> u128 {
        at.saturating_duration_since(self.base).as_nanos()
    }

    /// The time `tenant`'s calls have held places as of `now`: its finished calls' and the
    /// time so far of those in flight (a call that spins to a long timeout counts while it
    /// spins, not only once it ends).
    fn used_at(&self, tenant: &Arc<str>, now: Instant) -> Duration {
        let done = self.used.get(tenant).copied().unwrap_or_default();
        let running = self.holding.get(tenant).map_or(0, |h| {
            (h.n as u128 * self.ns(now)).saturating_sub(h.started_ns)
        });
        done + Duration::from_nanos(u64::try_from(running).unwrap_or(u64::MAX))
    }

    fn take(&mut self, tenant: &Arc<str>, at: Instant) {
        let ns = self.ns(at);
        let h = self.holding.entry(tenant.clone()).or_insert(Held {
            n: 0,
            cap: usize::MAX,
            started_ns: 0,
            asked: at,
        });
        h.n += 1;
        h.started_ns += ns;
        self.last = tenant.clone();
    }

    /// Return a place `tenant` took at `since`, counting the time it held it.
    fn give_back(&mut self, tenant: &Arc<str>, since: Instant) {
        let ns = self.ns(since);
        if let Some(h) = self.holding.get_mut(tenant) {
            h.n = h.n.saturating_sub(1);
            h.started_ns = h.started_ns.saturating_sub(ns);
        }
        *self.used.entry(tenant.clone()).or_default() += since.elapsed();
    }
}

/// A place in the gate, held by one call of `tenant`; handed on when dropped.
pub struct GatePass {
    gate: Arc<FairGate>,
    tenant: Arc<str>,
    since: Instant,
}

impl FairGate {
    /// A gate with `n` places (at least one).
    pub fn new(n: usize) -> Arc<Self> {
        Arc::new(FairGate {
            state: Mutex::new(GateState {
                free: n.max(1),
                waiting: Default::default(),
                used: HashMap::new(),
                holding: HashMap::new(),
                last: Arc::from(""),
                base: Instant::now(),
                places: n.max(1),
                wake_at: None,
            }),
        })
    }

    /// Wait for a place for one call of `tenant`, which may hold at most `cap` at once.
    pub async fn enter(self: &Arc<Self>, tenant: &Arc<str>, cap: usize) -> GatePass {
        let turn = {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            let now = Instant::now();
            let held = s.holding.entry(tenant.clone()).or_insert(Held {
                n: 0,
                cap,
                started_ns: 0,
                asked: now,
            });
            held.cap = cap.max(1);
            held.asked = now;
            let others_first = s.waiting.keys().any(|t| s.may_take(t, now));
            if s.free > 0 && !others_first && s.may_take(tenant, now) {
                s.free -= 1;
                s.take(tenant, now);
                Err(now)
            } else {
                if !s.waiting.contains_key(tenant) {
                    // Level with the least finished time of those waiting: time left unused
                    // is not banked (the time of their calls in flight still counts for them).
                    let floor = s
                        .waiting
                        .keys()
                        .map(|t| s.used.get(t).copied().unwrap_or_default())
                        .min();
                    let used = s.used.entry(tenant.clone()).or_default();
                    *used = (*used).max(floor.unwrap_or_default());
                }
                let (tx, rx) = tokio::sync::oneshot::channel();
                s.waiting.entry(tenant.clone()).or_default().push_back(tx);
                // A place kept free for another tenant: look again when that ends.
                Ok((rx, s.free > 0))
            }
        };
        let since = match turn {
            Err(now) => now,
            Ok((rx, kept_free)) => {
                if kept_free {
                    self.hand_on();
                }
                let mut waiter = Waiter {
                    rx: Some(rx),
                    gate: self.clone(),
                    tenant: tenant.clone(),
                };
                let since = match waiter.rx.as_mut() {
                    Some(rx) => rx.await.unwrap_or_else(|_| Instant::now()),
                    None => Instant::now(),
                };
                // Handed a place: it is this pass's now.
                waiter.rx = None;
                since
            }
        };
        GatePass {
            gate: self.clone(),
            tenant: tenant.clone(),
            since,
        }
    }

    /// Drop what the gate keeps of tenants not in `names` (a reload removed them) that hold
    /// no place and wait for none; one with calls still in flight is kept until a later
    /// reload.
    pub fn forget_all_but(&self, names: &[String]) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        let gone: Vec<Arc<str>> = s
            .holding
            .iter()
            .filter(|(t, h)| h.n == 0 && !names.iter().any(|n| n.as_str() == &***t))
            .map(|(t, _)| t.clone())
            .filter(|t| !s.waiting.contains_key(t))
            .collect();
        for t in gone {
            s.holding.remove(&t);
            s.used.remove(&t);
        }
    }

    /// Tenants the gate keeps anything of.
    #[cfg(test)]
    fn known(&self) -> usize {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.holding.len().max(s.used.len())
    }

    /// Places `tenant` holds now.
    pub fn holding(&self, tenant: &str) -> usize {
        let s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        s.holding.get(tenant).map_or(0, |h| h.n)
    }

    /// Give free places to the waiting tenants that may take one, the one that has used the
    /// least time first; keep the rest free (and look again when a reservation that keeps a
    /// waiting tenant out ends).
    fn hand_on(self: &Arc<Self>) {
        let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
        while s.free > 0 {
            let now = Instant::now();
            // Each waiting tenant that may take a place, with the time its calls have held
            // places.
            let candidates: Vec<(Arc<str>, Duration)> = s
                .waiting
                .keys()
                .filter(|t| s.may_take(t, now))
                .map(|t| (t.clone(), s.used_at(t, now)))
                .collect();
            let Some(least) = candidates.iter().map(|(_, u)| *u).min() else {
                let reserved = s
                    .waiting
                    .keys()
                    .filter(|t| s.under_cap(t))
                    .filter_map(|t| s.reserved_from(t, now))
                    .min();
                // (Outside a runtime, the next call that enters or ends hands it on.)
                if let Some(until) = reserved
                    && s.wake_at.is_none_or(|w| w <= now || w > until)
                    && let Ok(runtime) = tokio::runtime::Handle::try_current()
                {
                    s.wake_at = Some(until);
                    let gate = self.clone();
                    runtime.spawn(async move {
                        tokio::time::sleep_until(until.into()).await;
                        gate.state.lock().unwrap_or_else(|p| p.into_inner()).wake_at = None;
                        gate.hand_on();
                    });
                }
                return;
            };
            // Ties: the next by name after the last served, round the ring.
            let next = candidates
                .iter()
                .filter(|(_, u)| *u == least)
                .map(|(t, _)| t)
                .find(|t| **t > s.last)
                .or_else(|| candidates.iter().find(|(_, u)| *u == least).map(|(t, _)| t))
                .cloned()
                .expect("a tenant uses the least");
            let queue = s.waiting.get_mut(&next).expect("listed");
            let tx = queue.pop_front().expect("non-empty");
            if queue.is_empty() {
                s.waiting.remove(&next);
            }
            // A waiter whose request was dropped (client gone) is skipped.
            if tx.send(now).is_ok() {
                s.free -= 1;
                s.take(&next, now);
            }
        }
    }

    /// Return a place `tenant` took at `since` and hand it on.
    fn release(self: &Arc<Self>, tenant: &Arc<str>, since: Instant) {
        {
            let mut s = self.state.lock().unwrap_or_else(|p| p.into_inner());
            s.give_back(tenant, since);
            s.free += 1;
        }
        self.hand_on();
    }
}

/// A call waiting for its turn; if it is dropped (its request went away) after a place was
/// handed to it, the place goes on to the next.
struct Waiter {
    rx: Option<tokio::sync::oneshot::Receiver<Instant>>,
    gate: Arc<FairGate>,
    tenant: Arc<str>,
}

impl Drop for Waiter {
    fn drop(&mut self) {
        if let Some(mut rx) = self.rx.take() {
            rx.close();
            if let Ok(since) = rx.try_recv() {
                self.gate.release(&self.tenant, since);
            }
        }
    }
}

impl Drop for GatePass {
    fn drop(&mut self) {
        self.gate.release(&self.tenant, self.since);
    }
}

/// The key of `Bearer KEY`, or the password of `Basic base64(NAME:KEY)` (what an HTTP client
/// sends for a URL `http://NAME:KEY@host/...`, so a trainer that only takes a URL can carry a
/// key); the scheme in any case.
fn bearer(value: &[u8]) -> Option<Vec<u8>> {
    use base64::Engine as _;
    let space = value.iter().position(|&b| b == b' ')?;
    let (scheme, rest) = value.split_at(space);
    let rest = rest.trim_ascii();
    let key = if scheme.eq_ignore_ascii_case(b"bearer") {
        rest.to_vec()
    } else if scheme.eq_ignore_ascii_case(b"basic") {
        let pair = base64::engine::general_purpose::STANDARD
            .decode(rest)
            .ok()?;
        let colon = pair.iter().position(|&b| b == b':')?;
        pair[colon + 1..].to_vec()
    } else {
        return None;
    };
    (!key.is_empty()).then_some(key)
}

/// Whether `a` and `b` are equal, looking at every byte whatever the first difference.
fn constant_time_eq(a: &[u8; 32], b: &[u8; 32]) -> bool {
    let mut diff = 0u8;
    for (x, y) in a.iter().zip(b) {
        diff |= x ^ y;
    }
    std::hint::black_box(diff) == 0
}

/// Largest `sandbox_seconds_per_minute`: a day of sandbox time a minute (1,440 cores).
pub const MAX_SANDBOX_SECONDS_PER_MINUTE: usize = 86_400;

/// The components a server registers, which a tenant's `rewards` and `tools` may name.
#[derive(Debug, Clone, Default)]
pub struct Registered {
    pub rewards: Vec<String>,
    pub tools: Vec<String>,
    /// `default` (the server's `--workflow`) and its `--extra-workflow`s.
    pub workflows: Vec<String>,
}

fn read(
    path: &Path,
    server: Quota,
    registered: &Registered,
    usage: &HashMap<String, Arc<Usage>>,
) -> anyhow::Result<Vec<Arc<Tenant>>> {
    let text = read_trusted(path)?;
    let what = path.display();
    let file: TenantsFile =
        toml::from_str(&text).with_context(|| format!("{what}: not a valid tenants file"))?;
    if file.tenant.is_empty() {
        bail!("{what} has no [[tenant]]: add one with a name and key_sha256 (see docs/serve.md)");
    }
    let mut names = HashMap::new();
    let mut owners: HashMap<[u8; 32], String> = HashMap::new();
    let mut tenants = Vec::with_capacity(file.tenant.len());
    for t in file.tenant {
        let name = t.name;
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            bail!("{what}: tenant name {name:?} must be 1 to 64 letters, digits, '-', '_' or '.'");
        }
        if names.insert(name.clone(), ()).is_some() {
            bail!("{what}: tenant {name:?} is named twice");
        }
        if t.key_sha256.is_empty() {
            bail!("{what}: tenant {name:?} has no key_sha256 (printf %s \"$KEY\" | sha256sum)");
        }
        let mut keys = Vec::with_capacity(t.key_sha256.len());
        for (i, h) in t.key_sha256.iter().enumerate() {
            let mut digest = [0u8; 32];
            if hex::decode_to_slice(h.trim(), &mut digest).is_err() {
                bail!(
                    "{what}: tenant {name:?} key_sha256[{i}] is not 64 hex digits: store the SHA-256 of the key (printf %s \"$KEY\" | sha256sum), never the key"
                );
            }
            if let Some(other) = owners.insert(digest, name.clone()) {
                bail!("{what}: tenants {other:?} and {name:?} share a key; give each its own");
            }
            keys.push(digest);
        }
        let capped = |field: &str, v: Option<usize>, default: usize, cap: usize| {
            let v = v.unwrap_or(default);
            if v == 0 || v > cap {
                bail!("{what}: tenant {name:?} {field} is {v}; it must be from 1 to {cap}");
            }
            Ok(v)
        };
        let quota = Quota {
            requests_in_flight: capped(
                "max_requests_in_flight",
                t.max_requests_in_flight,
                4.min(server.requests_in_flight),
                server.requests_in_flight,
            )?,
            episodes_in_flight: capped(
                "max_episodes_in_flight",
                t.max_episodes_in_flight,
                server.episodes_in_flight,
                server.episodes_in_flight,
            )?,
            reward_calls_in_flight: capped(
                "max_reward_calls_in_flight",
                t.max_reward_calls_in_flight,
                server.reward_calls_in_flight,
                server.reward_calls_in_flight,
            )?,
            sandbox_seconds_per_minute: match t.sandbox_seconds_per_minute {
                None => None,
                Some(v) => Some(capped(
                    "sandbox_seconds_per_minute",
                    usize::try_from(v).ok(),
                    0,
                    MAX_SANDBOX_SECONDS_PER_MINUTE,
                )? as u64),
            },
            body_bytes: capped(
                "max_body_bytes",
                t.max_body_bytes,
                server.body_bytes,
                server.body_bytes,
            )?,
            rows_per_request: capped(
                "max_rows_per_request",
                t.max_rows_per_request,
                server.rows_per_request,
                server.rows_per_request,
            )?,
        };
        for (what_list, list, known) in [
            ("rewards", &t.rewards, &registered.rewards),
            ("tools", &t.tools, &registered.tools),
            ("workflows", &t.workflows, &registered.workflows),
        ] {
            for n in list.iter().flatten() {
                if !known.contains(n) {
                    let flag = match what_list {
                        "workflows" => "extra-workflow",
                        "rewards" => "reward",
                        _ => "tool",
                    };
                    let known = if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    };
                    bail!(
                        "{what}: tenant {name:?} lists {what_list} entry {n:?}, which this server does not register (it registers: {known}); register it with --{flag} {n}=... or take it out"
                    );
                }
            }
        }
        let timeout = t
            .timeout
            .as_deref()
            .map(rollbox_runtime::parse_duration)
            .transpose()
            .map_err(|e| anyhow::anyhow!("{what}: tenant {name:?} timeout: {e}"))?;
        let max_memory_bytes = t
            .max_memory
            .as_deref()
            .map(rollbox_runtime::parse_size)
            .transpose()
            .map_err(|e| anyhow::anyhow!("{what}: tenant {name:?} max_memory: {e}"))?
            .map(|b| b as u64);
        if timeout.is_some_and(|t| t.is_zero()) || max_memory_bytes == Some(0) {
            bail!(
                "{what}: tenant {name:?} has a zero timeout or max_memory: give a positive one (or leave it out)"
            );
        }
        for d in &t.component_dirs {
            let plain = d
                .components()
                .all(|c| !matches!(c, std::path::Component::ParentDir));
            if !d.is_absolute() || !plain {
                bail!(
                    "{what}: tenant {name:?} component_dirs entry {} must be an absolute path without `..`",
                    d.display()
                );
            }
        }
        let mut component_sha256 = Vec::with_capacity(t.component_sha256.len());
        for h in &t.component_sha256 {
            let h = h.trim().to_ascii_lowercase();
            if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!(
                    "{what}: tenant {name:?} component_sha256 entry {h:?} is not 64 hex digits: give a component's sha256 (`rollbox inspect FILE` prints it)"
                );
            }
            component_sha256.push(h);
        }
        let episode_cpus = t
            .episode_cpus
            .as_deref()
            .map(crate::threads::CpuSet::parse)
            .transpose()
            .map_err(|e| anyhow::anyhow!("{what}: tenant {name:?} episode_cpus {e}"))?;
        if let (Some(set), Some(shared)) = (&episode_cpus, crate::threads::shared_cpus())
            && set.overlaps(shared)
        {
            // Read again after start: the server's threads were set apart then.
            tracing::warn!(
                "tenant {name:?}: episode_cpus {set} shares cores with the server's threads (cores {shared}, set apart at start) until the server restarts"
            );
        }
        let usage = usage.get(&name).cloned().unwrap_or_default();
        if let Some(Some(running)) = usage.episode_threads.get()
            && running.cpus() != episode_cpus.as_ref()
        {
            // Its episode threads may hold episodes now: they stay as they are.
            let shown =
                |c: Option<&crate::threads::CpuSet>| c.map_or("any".into(), |c| c.to_string());
            tracing::warn!(
                "tenant {name:?}: episode_cpus is now {} but its episode threads keep cores {} until the server restarts",
                shown(episode_cpus.as_ref()),
                shown(running.cpus())
            );
        }
        tenants.push(Arc::new(Tenant {
            name,
            keys,
            rewards: t.rewards,
            tools: t.tools,
            workflows: t.workflows,
            component_dirs: t.component_dirs,
            component_sha256,
            timeout,
            max_memory_bytes,
            quota,
            episode_cpus,
            usage,
        }));
    }
    Ok(tenants)
}

/// The file's text, if another user could not have written it: a regular file owned by the
/// current user or root, writable by nobody else (checked on the opened file), at most
/// [`MAX_FILE_BYTES`].
fn read_trusted(path: &Path) -> anyhow::Result<String> {
    use std::io::Read as _;
    let what = path.display();
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // A FIFO under the name must not block the open.
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options
        .open(path)
        .with_context(|| format!("opening the tenants file {what}"))?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        bail!("the tenants file {what} is not a regular file");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me && meta.uid() != 0 {
            bail!(
                "the tenants file {what} is owned by uid {}, neither the current user (uid {me}) nor root: another user could give themselves a key",
                meta.uid()
            );
        }
        if meta.mode() & 0o022 != 0 {
            bail!(
                "the tenants file {what} has mode {:o}, which lets other users add keys to it; chmod go-w it",
                meta.mode() & 0o7777
            );
        }
    }
    if meta.len() > MAX_FILE_BYTES {
        bail!(
            "the tenants file {what} is {} bytes; at most {MAX_FILE_BYTES}",
            meta.len()
        );
    }
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading the tenants file {what} (UTF-8 TOML)"))?;
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SERVER: Quota = Quota {
        requests_in_flight: 64,
        episodes_in_flight: 256,
        reward_calls_in_flight: 64,
        sandbox_seconds_per_minute: None,
        body_bytes: 1 << 20,
        rows_per_request: 100,
    };

    fn sha(key: &str) -> String {
        hex::encode(Sha256::digest(key.as_bytes()))
    }

    fn write(dir: &Path, text: &str) -> PathBuf {
        let path = dir.join("tenants.toml");
        std::fs::write(&path, text).expect("write");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
        }
        path
    }

    #[test]
    fn keys_find_their_tenant_and_nothing_else() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = write(
            dir.path(),
            &format!(
                "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{}\", \"{}\"]\nmax_requests_in_flight = 1\n\n[[tenant]]\nname = \"b\"\nkey_sha256 = [\"{}\"]\n",
                sha("key-a"),
                sha("key-a2"),
                sha("key-b")
            ),
        );
        let t = Tenants::load(&path, SERVER, Registered::default()).expect("load");
        let name = |h: &str| t.authenticate(Some(h.as_bytes())).map(|t| t.name.clone());
        assert_eq!(name("Bearer key-a").as_deref(), Some("a"));
        assert_eq!(name("bearer   key-a2 ").as_deref(), Some("a"));
        assert_eq!(name("Bearer key-b").as_deref(), Some("b"));
        for refused in [
            "Bearer key-c",
            "Bearer",
            "Bearer ",
            "Basic key-a",
            "key-a",
            "Bearerkey-a",
        ] {
            assert_eq!(name(refused), None, "{refused}");
        }
        assert!(t.authenticate(None).is_none());
        // The stored hash is not a key.
        assert_eq!(name(&format!("Bearer {}", sha("key-a"))), None);

        let a = t.authenticate(Some(b"Bearer key-a")).expect("a");
        assert_eq!(a.quota.requests_in_flight, 1);
        assert_eq!(a.quota.body_bytes, SERVER.body_bytes);
        let first = a.admit().expect("first");
        assert!(a.admit().is_none(), "at the quota");
        drop(first);
        assert!(a.admit().is_some());
        assert_eq!(a.usage.throttled.load(Ordering::Relaxed), 1);
        let b = t.authenticate(Some(b"Bearer key-b")).expect("b");
        assert_eq!(b.quota.requests_in_flight, 4, "the default");
    }

    /// Finding a key takes as long whichever tenant's it is, and as long as not finding one:
    /// every key is compared, none is skipped once one matched. With 2,000 keys the compares
    /// are most of the time taken (a stop at the first match would answer `a`'s first key in
    /// a few hash-times and `b`'s, the last, after 2,000 compares); each case's best of 15
    /// rounds, taken in turn, so the VM's noise falls on all three alike.
    #[test]
    fn finding_a_key_takes_as_long_whichever_it_is() {
        let dir = tempfile::tempdir().expect("tmp");
        let a_keys: Vec<String> = (0..1999)
            .map(|i| format!("\"{}\"", sha(&format!("a{i}"))))
            .collect();
        let path = write(
            dir.path(),
            &format!(
                "[[tenant]]\nname = \"a\"\nkey_sha256 = [{}]\n\n[[tenant]]\nname = \"b\"\nkey_sha256 = [\"{}\"]\n",
                a_keys.join(", "),
                sha("b0")
            ),
        );
        let t = Tenants::load(&path, SERVER, Registered::default()).expect("load");
        let cases = [
            ("Bearer a0", Some("a")),
            ("Bearer b0", Some("b")),
            ("Bearer c0", None),
        ];
        let mut best = [Duration::MAX; 3];
        for _ in 0..15 {
            for (i, (header, tenant)) in cases.iter().enumerate() {
                let start = Instant::now();
                for _ in 0..50 {
                    let found = t.authenticate(Some(std::hint::black_box(header.as_bytes())));
                    assert_eq!(found.map(|t| t.name.clone()).as_deref(), *tenant);
                }
                best[i] = best[i].min(start.elapsed());
            }
        }
        let fastest = best.iter().min().expect("three cases");
        let slowest = best.iter().max().expect("three cases");
        assert!(
            slowest.as_secs_f64() < fastest.as_secs_f64() * 1.5,
            "a's first key, b's key, no key: {best:?}"
        );
    }

    #[tokio::test]
    async fn the_gate_takes_tenants_in_turn() {
        let name = |n: &str| -> Arc<str> { Arc::from(n) };
        let gate = FairGate::new(1);
        let held = gate.enter(&name("a"), usize::MAX).await;
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        // `a` queues five calls, then `b` and `c` one each: they pass a, b, c, a, a, a, a.
        for n in ["a", "a", "a", "a", "a", "b", "c"] {
            let (gate, order, n) = (gate.clone(), order.clone(), name(n));
            tasks.push(tokio::spawn(async move {
                let _pass = gate.enter(&n, usize::MAX).await;
                order.lock().expect("order").push(n.to_string());
                tokio::task::yield_now().await;
            }));
            tokio::task::yield_now().await;
        }
        // A waiter that gives up (its client went away) is skipped, its place not lost.
        let gone = tokio::spawn({
            let (gate, d) = (gate.clone(), name("d"));
            async move {
                let _pass = gate.enter(&d, usize::MAX).await;
            }
        });
        tokio::task::yield_now().await;
        gone.abort();
        let _ = gone.await;
        // `a`'s first call held its place for a while: it has used the most time.
        std::thread::sleep(std::time::Duration::from_millis(5));
        drop(held);
        for t in tasks {
            t.await.expect("task");
        }
        let order = order.lock().expect("order").clone();
        assert_eq!(
            order[..2],
            ["b", "c"],
            "the tenants that used no time first: {order:?}"
        );
        assert_eq!(order[2..], ["a", "a", "a", "a", "a"], "{order:?}");
        // Every place came back.
        let _one = gate.enter(&name("x"), usize::MAX).await;
    }

    #[tokio::test]
    async fn the_gate_shares_time_not_calls() {
        let (slow, quick) = (Arc::<str>::from("slow"), Arc::<str>::from("quick"));
        let gate = FairGate::new(1);
        // `slow` has used 50 ms of the place, `quick` nothing: when both wait, every one of
        // `quick`'s calls goes first.
        {
            let _p = gate.enter(&slow, usize::MAX).await;
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        let held = gate.enter(&slow, usize::MAX).await;
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for n in [&slow, &slow, &quick, &quick, &quick] {
            let (gate, order, n) = (gate.clone(), order.clone(), n.clone());
            tasks.push(tokio::spawn(async move {
                let _pass = gate.enter(&n, usize::MAX).await;
                order.lock().expect("order").push(n.to_string());
            }));
            tokio::task::yield_now().await;
        }
        drop(held);
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(
            *order.lock().expect("order"),
            ["quick", "quick", "quick", "slow", "slow"]
        );
    }

    #[tokio::test]
    async fn the_gate_counts_calls_in_flight() {
        let (slow, quick) = (Arc::<str>::from("slow"), Arc::<str>::from("quick"));
        let gate = FairGate::new(3);
        // `slow` holds two places with calls still running, `quick` one.
        let s1 = gate.enter(&slow, usize::MAX).await;
        let s2 = gate.enter(&slow, usize::MAX).await;
        let q1 = gate.enter(&quick, usize::MAX).await;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        let order = Arc::new(std::sync::Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for n in [&quick, &slow] {
            let (gate, order, n) = (gate.clone(), order.clone(), n.clone());
            tasks.push(tokio::spawn(async move {
                let _pass = gate.enter(&n, usize::MAX).await;
                order.lock().expect("order").push(n.to_string());
                tokio::time::sleep(std::time::Duration::from_millis(5)).await;
            }));
            tokio::task::yield_now().await;
        }
        // `quick`'s call ends after 20 ms; `slow`'s two have held theirs 40 ms together and
        // go on: the freed place is `quick`'s, though `slow` has finished no call yet.
        drop(q1);
        tokio::time::sleep(std::time::Duration::from_millis(2)).await;
        assert_eq!(*order.lock().expect("order"), ["quick"]);
        drop((s1, s2));
        for t in tasks {
            t.await.expect("task");
        }
        assert_eq!(*order.lock().expect("order"), ["quick", "slow"]);
    }

    #[tokio::test]
    async fn the_gate_holds_a_tenant_to_its_cap() {
        let (a, b) = (Arc::<str>::from("a"), Arc::<str>::from("b"));
        let gate = FairGate::new(4);
        let first = gate.enter(&a, 1).await;
        // Places are free, but `a` holds its one: its next call waits, `b`'s pass at once.
        let second = tokio::spawn({
            let (gate, a) = (gate.clone(), a.clone());
            async move { gate.enter(&a, 1).await }
        });
        tokio::task::yield_now().await;
        let b1 = gate.enter(&b, 8).await;
        let b2 = gate.enter(&b, 8).await;
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        assert!(!second.is_finished(), "a is at its cap of one");
        drop(first);
        let second = tokio::time::timeout(std::time::Duration::from_secs(5), second)
            .await
            .expect("a's next call passes once its first ends")
            .expect("task");
        drop((second, b1, b2));
        // Every place came back: four calls of a tenant with no cap pass (the fourth once
        // `a`, which asked a moment ago, has not asked again within the reserve window).
        let all: Vec<_> = futures_all(&gate, &b, 4).await;
        assert_eq!(all.len(), 4);
    }

    /// A reload that removes tenants removes what the gate kept of them, but for one with a
    /// call still in flight.
    #[tokio::test]
    async fn the_gate_forgets_removed_tenants() {
        let gate = FairGate::new(4);
        let names: Vec<Arc<str>> = ["a", "b", "c"].into_iter().map(Arc::from).collect();
        for n in &names {
            drop(gate.enter(n, usize::MAX).await);
        }
        let held = gate.enter(&names[2], usize::MAX).await;
        assert_eq!(gate.known(), 3);
        gate.forget_all_but(&["a".to_string()]);
        assert_eq!(gate.known(), 2, "b is gone, c has a call in flight");
        drop(held);
        gate.forget_all_but(&["a".to_string()]);
        assert_eq!(gate.known(), 1);
    }

    /// With two places, a tenant whose calls spin cannot hold both while another tenant is
    /// calling: the last place waits for the other's next call, and goes to the spinner once
    /// the other has not asked for [`RESERVE_WINDOW`].
    #[tokio::test]
    async fn the_gate_keeps_the_last_place_for_a_tenant_calling() {
        let (spin, calls) = (Arc::<str>::from("spin"), Arc::<str>::from("calls"));
        let gate = FairGate::new(2);
        drop(gate.enter(&calls, usize::MAX).await);
        let s1 = gate.enter(&spin, usize::MAX).await;
        let s2 = tokio::spawn({
            let (gate, spin) = (gate.clone(), spin.clone());
            async move { gate.enter(&spin, usize::MAX).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!s2.is_finished(), "the last place is kept for `calls`");
        let c = tokio::time::timeout(Duration::from_millis(100), gate.enter(&calls, usize::MAX))
            .await
            .expect("`calls` finds its place at once");
        drop(c);
        let asked = Instant::now();
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(
            !s2.is_finished(),
            "kept again for `calls`, which just called"
        );
        let s2 = tokio::time::timeout(Duration::from_secs(5), s2)
            .await
            .expect("the spinner gets it when `calls` stops asking")
            .expect("task");
        assert!(asked.elapsed() >= RESERVE_WINDOW - Duration::from_millis(50));
        drop((s1, s2));
    }

    async fn futures_all(gate: &Arc<FairGate>, t: &Arc<str>, n: usize) -> Vec<GatePass> {
        let mut out = Vec::new();
        for _ in 0..n {
            out.push(
                tokio::time::timeout(std::time::Duration::from_secs(5), gate.enter(t, usize::MAX))
                    .await
                    .expect("a free place"),
            );
        }
        out
    }

    #[test]
    fn sandbox_time_runs_out_and_refills() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = write(
            dir.path(),
            &format!(
                "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{}\"]\nsandbox_seconds_per_minute = 60\n",
                sha("k")
            ),
        );
        let t = Tenants::load(&path, SERVER, Registered::default()).expect("load");
        let a = t.authenticate(Some(b"Bearer k")).expect("a");
        assert_eq!(a.out_of_time(), None, "a full minute's worth to start");
        // 90 s of sandbox time (one request's calls can overdraw): 30 s owed at 1 s a second.
        a.charge(Duration::from_secs(90));
        let wait = a.out_of_time().expect("out of time");
        assert!(
            wait > Duration::from_secs(29) && wait <= Duration::from_secs(30),
            "{wait:?}"
        );
        assert_eq!(a.usage.out_of_time.load(Ordering::Relaxed), 1);
        // Time a tenant without the quota uses is counted, never refused.
        let path = write(
            dir.path(),
            &format!(
                "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{}\"]\n",
                sha("k")
            ),
        );
        t.reload().expect("reload");
        let a = t.authenticate(Some(b"Bearer k")).expect("a");
        a.charge(Duration::from_secs(1000));
        assert_eq!(a.out_of_time(), None);
        assert_eq!(a.usage.sandbox_us.load(Ordering::Relaxed), 1_090_000_000);
        let _ = path;
    }

    #[test]
    fn reload_revokes_keys_and_keeps_usage() {
        let dir = tempfile::tempdir().expect("tmp");
        let two = format!(
            "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{}\", \"{}\"]\n",
            sha("old"),
            sha("new")
        );
        let path = write(dir.path(), &two);
        let t = Tenants::load(&path, SERVER, Registered::default()).expect("load");
        let held = t.authenticate(Some(b"Bearer old")).expect("old").admit();
        write(
            dir.path(),
            &format!(
                "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{}\"]\n",
                sha("new")
            ),
        );
        assert_eq!(t.reload().expect("reload"), 1);
        assert!(t.authenticate(Some(b"Bearer old")).is_none(), "revoked");
        let a = t.authenticate(Some(b"Bearer new")).expect("new");
        assert_eq!(a.in_flight(), 1, "the request in flight carried over");
        drop(held);
        assert_eq!(a.in_flight(), 0);
        // A broken file leaves the tenants as they were.
        write(dir.path(), "[[tenant]]\nname = \"a\"\n");
        assert!(t.reload().is_err());
        assert!(t.authenticate(Some(b"Bearer new")).is_some());
    }

    #[test]
    fn bad_files_are_refused_naming_the_fix() {
        let dir = tempfile::tempdir().expect("tmp");
        let k = sha("k");
        for (text, says) in [
            ("", "no [[tenant]]"),
            (
                "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"k\"]\n",
                "not 64 hex digits",
            ),
            (
                &format!("[[tenant]]\nname = \"a b\"\nkey_sha256 = [\"{k}\"]\n"),
                "must be 1 to 64",
            ),
            (
                &format!(
                    "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\n[[tenant]]\nname = \"b\"\nkey_sha256 = [\"{k}\"]\n"
                ),
                "share a key",
            ),
            (
                &format!(
                    "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\nmax_body_bytes = 2000000\n"
                ),
                "from 1 to 1048576",
            ),
            (
                &format!("[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\nmax_rows = 5\n"),
                "unknown field",
            ),
            (
                &format!(
                    "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\nrewards = [\"math\"]\n"
                ),
                "which this server does not register",
            ),
            (
                &format!("[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\nworkflows = [\"x\"]\n"),
                "register it with --extra-workflow x=",
            ),
            (
                &format!(
                    "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\nsandbox_seconds_per_minute = 0\n"
                ),
                "from 1 to 86400",
            ),
            (
                &format!(
                    "[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\nepisode_cpus = \"0-100000\"\n"
                ),
                "episode_cpus \"0-100000\" names core",
            ),
        ] {
            let path = write(dir.path(), text);
            let err = format!(
                "{:#}",
                Tenants::load(&path, SERVER, Registered::default())
                    .err()
                    .expect(says)
            );
            assert!(err.contains(says), "{says}: {err}");
        }
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let path = write(
                dir.path(),
                &format!("[[tenant]]\nname = \"a\"\nkey_sha256 = [\"{k}\"]\n"),
            );
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o620)).expect("chmod");
            let err = format!(
                "{:#}",
                Tenants::load(&path, SERVER, Registered::default())
                    .err()
                    .expect("group-writable")
            );
            assert!(err.contains("chmod go-w"), "{err}");
        }
    }
}
