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
//! limits = { max_generate_calls = 64, fuel = 1000000000 } # any limit key, at most
//! max_requests_in_flight = 8       # more get 429 with Retry-After
//! max_episodes_in_flight = 64      # over all its /v1/episodes requests; more wait
//! max_reward_calls_in_flight = 16  # reward and /run_code calls; more wait
//! sandbox_seconds_per_minute = 120 # time its sandboxes run; past it, 429 with Retry-After
//! max_body_bytes = 16777216        # at most the server's cap
//! max_rows_per_request = 1024      # rows of /v1/episodes, samples of /get_reward
//! episode_cpus = "1-3"             # its episodes run on these cores only, set apart from
//!                                   # the server's other threads (default: any)
//! operator = false                 # may set the policy version (POST /v1/version) and read
//!                                   # every tenant's series in /metrics (default: false)
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
use std::time::Duration;

use rollbox_runtime::Caps;
use sha2::{Digest, Sha256};

mod file;

use file::read;
pub use file::{MAX_FILE_BYTES, MAX_SANDBOX_SECONDS_PER_MINUTE, Registered};

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
    /// The time the tenant's sandboxes run (reward, tool and episode calls), counted as they
    /// run, against its `sandbox_seconds_per_minute`.
    pub meter: Arc<rollbox_rollout::SandboxMeter>,
    /// Microseconds its reward and tool calls waited for a place in the sandbox pool.
    pub queue_wait_us: AtomicU64,
    /// Its turn to read and compile files its requests name by path.
    pub load_turn: crate::request_components::OwnTurn,
    /// Its episodes' slots, with the quota they were made for.
    episodes: Mutex<Option<(usize, Arc<tokio::sync::Semaphore>)>>,
    /// The threads its calls and its episodes run on, made on first use (`None`: they could
    /// not be started, and they run on the server's workers).
    threads: std::sync::OnceLock<Option<crate::threads::Threads>>,
    episode_threads: std::sync::OnceLock<Option<crate::threads::Threads>>,
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
    /// What each of its episodes and reward and tool calls may use, at most: `timeout`,
    /// `max_memory` and any limit key of its `limits` table (never past the server's own).
    pub caps: Caps,
    pub quota: Quota,
    /// The cores its episodes run on (`None`: any).
    pub episode_cpus: Option<crate::threads::CpuSet>,
    /// Whether it runs the server for everyone: sets the policy version every tenant's tokens
    /// are stamped with, and reads every tenant's metrics. Any other tenant gets 403 for the
    /// first and only its own series from the second.
    pub operator: bool,
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

    /// `None` while the tenant has sandbox time left (or is not metered), its work running
    /// now counted as used; else how long until it has some again. Counts a refusal.
    pub fn out_of_time(&self) -> Option<Duration> {
        let wait = self.usage.meter.wait()?;
        self.usage.out_of_time.fetch_add(1, Ordering::Relaxed);
        Some(wait)
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
            meter: self.usage.meter.clone(),
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
        self.usage.meter.add(d);
    }
}

/// Every core of the tenants' `episode_cpus`; `None` when none names any.
fn episode_cores(tenants: &[Arc<Tenant>]) -> Option<crate::threads::CpuSet> {
    crate::threads::CpuSet::union(tenants.iter().filter_map(|t| t.episode_cpus.as_ref()))
}

/// What to warn of when a reload's `episode_cpus` name other cores (`now`) than the file did at
/// start (`start`): the cores set apart then stay so, and the server's threads stay on
/// `shared` (`None`: any core), until the server restarts.
fn cores_moved(
    start: Option<&crate::threads::CpuSet>,
    now: Option<&crate::threads::CpuSet>,
    shared: Option<&crate::threads::CpuSet>,
) -> Option<String> {
    let shown = |c: Option<&crate::threads::CpuSet>| c.map_or("none".into(), |c| c.to_string());
    (start != now).then(|| {
        format!(
            "the tenants' episode_cpus now name cores {} (at start: {}): the server's threads stay on {} until it restarts",
            shown(now),
            shown(start),
            shared.map_or("any core".into(), |c| format!("cores {c}"))
        )
    })
}

/// The tenants of a server, from `--tenants FILE`; [`Tenants::reload`] reads the file again.
pub struct Tenants {
    path: PathBuf,
    server: Quota,
    registered: Registered,
    current: RwLock<Arc<Vec<Arc<Tenant>>>>,
    /// The cores the tenants' `episode_cpus` named at start (what the server sets apart).
    episode_cores: Option<crate::threads::CpuSet>,
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
            episode_cores: episode_cores(&tenants),
            current: RwLock::new(Arc::new(tenants)),
        })
    }

    /// Every core the tenants' `episode_cpus` named when the file was first read (`None`:
    /// none): the cores the server sets apart for them, fixed until it restarts.
    pub fn episode_cores(&self) -> Option<&crate::threads::CpuSet> {
        self.episode_cores.as_ref()
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
        if let Some(warning) = cores_moved(
            self.episode_cores.as_ref(),
            episode_cores(&tenants).as_ref(),
            crate::threads::shared_cpus(),
        ) {
            tracing::warn!("{warning}");
        }
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

#[cfg(test)]
mod tests;
