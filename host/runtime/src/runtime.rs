//! The process-wide wasmtime engine: configuration (epochs, pooling, optional fuel), the epoch
//! ticker, and one linker per world. Built once; loading and running happen through it.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use std::time::Instant;

use sha2::{Digest as _, Sha256};
use wasmtime::component::Component;

use crate::bindings;
use crate::bindings::episode::EpisodeInput;
use crate::budget::{ADMISSION_WAIT, host_memory};
use crate::cache::ComponentCache;
use crate::canary::CanaryReport;
use crate::catalog::Catalog;
use crate::component::{
    ComponentInfo, ComponentSource, RewardComponent, ToolComponent, check_header, check_name,
    check_world, link_error, read_component_file,
};
use crate::episode::{
    EpisodeOutcome, EpisodeReport, EpisodeRequest, EpisodeState, WorkflowComponent, take_output,
};
use crate::fault::{GuestFault, MAX_FAULT_MESSAGE_BYTES, truncate};
use crate::limits::Limits;
use crate::limits::MAX_MEMORY_BYTES_CAP;
use crate::sandbox::{fuel_consumed, guarded, new_store};
use crate::services::Services;
use crate::state::{CallCtx, StoreState};
use crate::untrusted::{
    CallReport, Called, RewardCall, call_registered, describe_once, score_once, score_registered,
    tool_once,
};
use crate::world::WorldKind;

/// Epoch tick: how often running guests are checked against their deadline (a guest is stopped
/// at most one tick after it); a guest yields to the async executor every five ticks of
/// running.
pub const EPOCH_TICK: Duration = Duration::from_millis(2);

/// Engine-wide settings, fixed for the life of a [`Runtime`].
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    /// Directory for compiled components (`<sha256>-<engine>.cwasm`). Default
    /// `$ROLLBOX_CACHE_DIR`, else `$XDG_CACHE_HOME/rollbox`, else `~/.cache/rollbox`, plus
    /// `/components`. `None` disables the disk cache.
    pub cache_dir: Option<PathBuf>,
    /// Instrument compiled code for fuel metering, so `Limits::fuel` can be enforced. Default
    /// false (fuel costs 10–20% of guest speed).
    pub fuel: bool,
    /// Instances alive at once (pool slots). Default 1000.
    pub max_instances: u32,
    /// Use the pooling allocator when the platform can reserve the address space. Default true.
    pub pooling: bool,
    /// Bytes of each pooled linear memory reset in place (only dirty pages, with Linux
    /// PAGEMAP_SCAN) instead of being released to the kernel and faulted in again. Bounds what
    /// a warm pool slot keeps resident. Default 16 MiB, or `$ROLLBOX_POOL_KEEP_RESIDENT` bytes.
    pub keep_resident_bytes: usize,
    /// Run interpreter snapshots (component files of [`SNAPSHOT_MIN_BYTES`] to
    /// [`SNAPSHOT_MAX_BYTES`]) in a second pool that keeps their whole heap resident between
    /// instances instead of releasing what is past [`RuntimeConfig::keep_resident_bytes`]:
    /// each pool slot once used keeps the pages its instances wrote (private memory) and read
    /// (the image's page cache, shared). Default true; `ROLLBOX_SNAPSHOT_POOL=0` turns it off.
    pub snapshot_pool: bool,
    /// Reset the pools' slots by rewriting only the pages Linux `PAGEMAP_SCAN` reports dirty
    /// (kernel >= 6.7; elsewhere the keep-resident prefix is rewritten whole). Default true;
    /// `ROLLBOX_PAGEMAP_SCAN=0` turns it off. Turned off at start-up, with a warning, when the
    /// isolation canary (`canary`) finds a slot that kept a previous instance's bytes.
    pub pagemap_scan: bool,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            cache_dir: default_cache_dir(),
            fuel: false,
            max_instances: 1000,
            pooling: true,
            keep_resident_bytes: std::env::var("ROLLBOX_POOL_KEEP_RESIDENT")
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(DEFAULT_KEEP_RESIDENT_BYTES),
            snapshot_pool: std::env::var_os("ROLLBOX_SNAPSHOT_POOL").is_none_or(|v| v != "0"),
            pagemap_scan: std::env::var_os("ROLLBOX_PAGEMAP_SCAN").is_none_or(|v| v != "0"),
        }
    }
}

/// The default component cache directory (see [`RuntimeConfig::cache_dir`]).
pub fn default_cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("ROLLBOX_CACHE_DIR")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("XDG_CACHE_HOME").map(|p| PathBuf::from(p).join("rollbox")))
        .or_else(|| {
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache").join("rollbox"))
        })?;
    Some(base.join("components"))
}

/// One wasmtime engine (with its instance pool) and its linkers, one per world.
pub(crate) struct Pool {
    pub(crate) engine: Engine,
    pub(crate) workflow_linker: Linker<EpisodeState>,
    pub(crate) reward_linker: Linker<StoreState<CallCtx>>,
    pub(crate) tool_linker: Linker<StoreState<CallCtx>>,
}

impl Pool {
    fn new(engine: Engine) -> anyhow::Result<Pool> {
        start_epoch_ticker(&engine);
        crate::untrusted::start_reaper();
        Ok(Pool {
            workflow_linker: workflow_linker(&engine)?,
            reward_linker: untrusted_linker(&engine, |l| {
                bindings::reward::Reward::add_to_linker::<_, HasSelf<_>>(l, |s| s)
            })?,
            tool_linker: untrusted_linker(&engine, |l| {
                bindings::tool::Tool::add_to_linker::<_, HasSelf<_>>(l, |s| s)
            })?,
            engine,
        })
    }
}

/// Component files from this size up to [`SNAPSHOT_MAX_BYTES`] run in the snapshot pool: they
/// carry an interpreter's pre-initialised heap (componentize-py: 12-20 MiB), whose pages a call
/// touches all over.
pub const SNAPSHOT_MIN_BYTES: u64 = 4 << 20;

/// Components past this size stay in the default pool: copying their whole image back after
/// every call costs more than the copy-on-write faults of the part a call touches (math-verify,
/// a 45 MiB heap: p50 10 ms there, 15.6 ms with the copy).
pub const SNAPSHOT_MAX_BYTES: u64 = 40 << 20;

/// Bytes of each snapshot-pool memory kept resident and restored by copying the image back.
pub const SNAPSHOT_KEEP_RESIDENT_BYTES: usize = 40 << 20;

/// The native stack an interpreter's call may use (the snapshot pool; 1 MiB elsewhere). A Python
/// recursion through C (an `lru_cache`d function) takes ~1.5 KiB of it a level: 1 MiB ended
/// such a recursion ~600 levels deep in a stack-overflow trap. With 8 MiB, componentize-py's
/// CPython reaches the end of its own C stack first (1 MiB in linear memory, ~2,000 such
/// levels) and raises `RecursionError`, which the program sees.
pub const SNAPSHOT_WASM_STACK_BYTES: usize = 8 << 20;

/// Bytes at the top of a snapshot-pool fiber stack kept resident between calls (zeroed); the
/// rest is given back to the kernel after each call, so a deep recursion holds its pages only
/// while it runs.
const SNAPSHOT_STACK_KEEP_RESIDENT_BYTES: usize = 256 << 10;

/// The wasmtime engines, linkers and component cache shared by every load and every episode.
pub struct Runtime {
    /// The default pool (pages reset by PAGEMAP_SCAN) and its engine.
    pub(crate) engine: Engine,
    pub(crate) default_pool: Pool,
    /// The pool for large interpreter snapshots (see [`SNAPSHOT_MIN_BYTES`]), when pooling.
    pub(crate) snapshot_pool: Option<Pool>,
    pub(crate) cache: ComponentCache,
    pub(crate) services: Arc<Services>,
    pub(crate) config: RuntimeConfig,
    pooled: bool,
    /// Workflow instances alive at once: the pool's slots less the untrusted-call pool's (each
    /// reward or tool call holds one more instance) and the reaper's backlog. Episodes past it wait for a slot before
    /// their store is made (and their deadline starts) instead of failing to instantiate when
    /// more are in flight than the pool holds.
    pub(crate) episode_slots: crate::slots::Slots,
}

impl Runtime {
    /// Build the engine (pooling when available), start the epoch ticker, link the worlds.
    pub fn new(mut config: RuntimeConfig, services: Services) -> anyhow::Result<Self> {
        // The isolation canary on every pool before any guest runs: a pool whose reset left a
        // previous instance's bytes in a slot is rebuilt without the mechanism at fault (the
        // dirty-page scan, then, for the default pool, pooling itself).
        let (engine, pooled) = match checked_engine(&mut config, PoolKind::Default)? {
            Some(built) => built,
            None => {
                tracing::warn!("turning the pooling allocator off");
                config.pooling = false;
                build_engine(&config, PoolKind::Default)?
            }
        };
        let default_pool = Pool::new(engine.clone())?;
        // Its own copy of the settings: turning the scan off there leaves the default pool's.
        let snapshot_pool = if pooled && config.snapshot_pool {
            match checked_engine(&mut config.clone(), PoolKind::Snapshot)? {
                Some((engine, true)) => Some(Pool::new(engine)?),
                _ => None,
            }
        } else {
            None
        };
        let cache = ComponentCache::new(config.cache_dir.clone(), &engine);
        let episode_slots = if pooled {
            // Up to 64 more: the reaper's backlog of large instances still being torn down.
            let n = config.max_instances as usize;
            n.saturating_sub(services.untrusted_pool_size() + (n / 8).min(64))
                .max(1)
        } else {
            usize::MAX >> 1
        };
        Ok(Runtime {
            episode_slots: crate::slots::Slots::new(episode_slots),
            engine,
            default_pool,
            snapshot_pool,
            cache,
            services: Arc::new(services),
            config,
            pooled,
        })
    }

    /// The shared host services (backend, version).
    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }

    /// Run the isolation canary again on each pool: `(pool, report)` for `default` and, when
    /// there is one, `snapshot`.
    pub fn isolation_canary(&self) -> Vec<(&'static str, anyhow::Result<CanaryReport>)> {
        let mut out = vec![(
            "default",
            crate::canary::run(&self.default_pool.engine, PoolKind::Default.canary_pages()),
        )];
        if let Some(p) = &self.snapshot_pool {
            out.push((
                "snapshot",
                crate::canary::run(&p.engine, PoolKind::Snapshot.canary_pages()),
            ));
        }
        out
    }

    /// Whether the default pool resets slots with the dirty-page scan (asked for, and not
    /// turned off by the isolation canary).
    pub fn pagemap_scan(&self) -> bool {
        self.pooled && self.config.pagemap_scan
    }

    /// Whether instances come from the pooling allocator.
    pub fn is_pooled(&self) -> bool {
        self.pooled
    }

    /// The pool a component file of `size_bytes` runs in.
    pub(crate) fn pool_for(&self, size_bytes: u64) -> &Pool {
        match &self.snapshot_pool {
            Some(p) if (SNAPSHOT_MIN_BYTES..SNAPSHOT_MAX_BYTES).contains(&size_bytes) => p,
            _ => &self.default_pool,
        }
    }

    /// Whether compiled code is instrumented for fuel.
    pub fn fuel_enabled(&self) -> bool {
        self.config.fuel
    }

    /// Whether this runtime can enforce every one of `limits`; the message names the limit
    /// that it cannot and how to build a runtime that does. Episodes, reward and tool calls and
    /// registrations with such limits are refused before anything runs, so an accepted limit
    /// is never silently ignored.
    pub fn check_enforceable(&self, limits: &crate::Limits) -> Result<(), String> {
        match limits.fuel {
            Some(fuel) if !self.config.fuel => Err(format!(
                "a fuel budget of {fuel} was given, but this runtime was built without fuel \
                 metering; build it with `RuntimeConfig {{ fuel: true, .. }}` whenever any \
                 limit or registration sets fuel"
            )),
            _ => Ok(()),
        }
    }

    /// The wasmtime engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    // Components: compile, check, load and register.

    /// Read and compile a component and describe it, whatever world it targets.
    pub fn inspect(&self, source: impl Into<ComponentSource>) -> anyhow::Result<ComponentInfo> {
        Ok(self.compile(&source.into())?.0)
    }

    /// Load a workflow component by path.
    pub fn load_workflow(
        &self,
        source: impl Into<ComponentSource>,
    ) -> anyhow::Result<WorkflowComponent> {
        let (info, component) = self.compile(&source.into())?;
        check_world(&info, WorldKind::Workflow)?;
        let pre = self
            .pool_for(info.size_bytes)
            .workflow_linker
            .instantiate_pre(&component)
            .map_err(|e| link_error(&info, e))?;
        let pre = bindings::workflow::WorkflowPre::new(pre).map_err(|e| link_error(&info, e))?;
        Ok(WorkflowComponent { info, pre })
    }

    /// Load a reward component by path.
    pub fn load_reward(
        &self,
        source: impl Into<ComponentSource>,
    ) -> anyhow::Result<RewardComponent> {
        let (info, component) = self.compile(&source.into())?;
        check_world(&info, WorldKind::Reward)?;
        let pre = self
            .pool_for(info.size_bytes)
            .reward_linker
            .instantiate_pre(&component)
            .map_err(|e| link_error(&info, e))?;
        let pre = bindings::reward::RewardPre::new(pre).map_err(|e| link_error(&info, e))?;
        Ok(RewardComponent { info, pre })
    }

    /// Load a tool component by path.
    pub fn load_tool(&self, source: impl Into<ComponentSource>) -> anyhow::Result<ToolComponent> {
        let (info, component) = self.compile(&source.into())?;
        check_world(&info, WorldKind::Tool)?;
        let pre = self
            .pool_for(info.size_bytes)
            .tool_linker
            .instantiate_pre(&component)
            .map_err(|e| link_error(&info, e))?;
        Ok(ToolComponent {
            info,
            pre,
            description: Default::default(),
        })
    }

    /// Load a reward component and register it under `name` for workflows' `rewards.score`.
    pub fn register_reward(
        &self,
        name: &str,
        source: impl Into<ComponentSource>,
        policy: crate::CallPolicy,
    ) -> anyhow::Result<ComponentInfo> {
        let source = source.into();
        let reg = self.registration("reward", name, policy, || self.load_reward(source))?;
        let info = reg.component.info.clone();
        self.services.add_reward(name.to_string(), reg);
        Ok(info)
    }

    /// Load a tool component and register it under `name` for workflows' `tools.call`.
    pub fn register_tool(
        &self,
        name: &str,
        source: impl Into<ComponentSource>,
        policy: crate::CallPolicy,
    ) -> anyhow::Result<ComponentInfo> {
        let source = source.into();
        let reg = self.registration("tool", name, policy, || self.load_tool(source))?;
        let info = reg.component.info.clone();
        self.services.add_tool(name.to_string(), reg);
        Ok(info)
    }

    /// Check a registration's name and limits, then load its component.
    fn registration<C>(
        &self,
        what: &str,
        name: &str,
        policy: crate::CallPolicy,
        load: impl FnOnce() -> anyhow::Result<C>,
    ) -> anyhow::Result<crate::Registered<C>> {
        check_name(what, name)?;
        policy
            .limits
            .validate()
            .map_err(|e| anyhow::anyhow!("{what} `{name}`: {e}"))?;
        self.check_enforceable(&policy.limits)
            .map_err(|e| anyhow::anyhow!("{what} `{name}`: {e}"))?;
        Ok(crate::Registered {
            component: load()?,
            policy,
            fuel_metering: self.config.fuel,
        })
    }

    fn compile(&self, source: &ComponentSource) -> anyhow::Result<(ComponentInfo, Component)> {
        let path = source.name();
        let bytes = match source {
            ComponentSource::File(p) => std::borrow::Cow::Owned(read_component_file(p)?),
            ComponentSource::Bytes { bytes, .. } => std::borrow::Cow::Borrowed(*bytes),
            ComponentSource::Read { bytes, .. } => std::borrow::Cow::Borrowed(&bytes[..]),
        };
        check_header(path, &bytes)?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        let engine = &self.pool_for(bytes.len() as u64).engine;
        let component = self
            .cache
            .load(engine, &sha256, &bytes)
            .with_context(|| format!("{} is not a valid WebAssembly component", path.display()))?;
        let ty = component.component_type();
        let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
        let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
        let world = [WorldKind::Workflow, WorldKind::Reward, WorldKind::Tool]
            .into_iter()
            .find(|w| exports.iter().any(|e| e == w.export_name()));
        let info = ComponentInfo {
            path: path.to_path_buf(),
            sha256,
            size_bytes: bytes.len() as u64,
            world,
            imports,
            exports,
        };
        Ok((info, component))
    }

    // Episodes.

    /// Run one episode of `workflow` in a fresh sandbox. Never fails: every guest failure is
    /// an [`EpisodeOutcome::Failed`] in the report.
    pub async fn run_episode(
        &self,
        workflow: &WorkflowComponent,
        request: EpisodeRequest,
        limits: Arc<Limits>,
    ) -> EpisodeReport {
        self.run_episode_in(workflow, request, limits, Arc::default())
            .await
    }

    /// [`Runtime::run_episode`] reaching the rewards and tools of `catalog` (a tenant's
    /// allowed ones and any its request brought) in place of every registered one.
    pub async fn run_episode_in(
        &self,
        workflow: &WorkflowComponent,
        request: EpisodeRequest,
        limits: Arc<Limits>,
        catalog: Arc<Catalog>,
    ) -> EpisodeReport {
        if let Err(message) = self.check_enforceable(&limits) {
            return EpisodeReport::refused(request.id, GuestFault::Unenforceable { message });
        }
        // While the host is above its memory high-water mark, new episodes wait (bounded) for
        // the ones in flight to give memory back; then for a pool slot. The episode's deadline
        // starts with its store.
        host_memory().below_high_water(ADMISSION_WAIT).await;
        let _slot = self.episode_slots.take().await;
        let start = Instant::now();
        let mut store = new_store(
            workflow.pre.engine(),
            self.config.fuel,
            StoreState::episode(
                request.id.clone(),
                limits,
                self.services.clone(),
                catalog,
                request.seed,
            ),
        );
        store.data_mut().ctx.sample_index = request.sample_index;
        let input = EpisodeInput {
            episode_id: request.id.clone(),
            data: request.data.as_str().to_string(),
            config: request.config.as_str().to_string(),
            sample_index: request.sample_index,
            seed: request.seed,
        };
        let pre = workflow.pre.clone();
        let result = guarded(&mut store, |store| {
            Box::pin(async move {
                let bindings = pre.instantiate_async(&mut *store).await?;
                bindings.call_run_episode(&mut *store, &input).await
            })
        })
        .await;
        // Host work charged after the guest's last epoch tick is settled now.
        let result = result.and_then(|r| {
            match crate::host_work::settle_host_fuel(&mut store, self.config.fuel) {
                Ok(()) => Ok(r),
                Err(_) => Err(GuestFault::OutOfFuel {
                    fuel: store.data().ctx.limits.fuel.unwrap_or(u64::MAX),
                }),
            }
        });
        let outcome = match result {
            Err(fault) => EpisodeOutcome::Failed(fault),
            Ok(Err(message)) => EpisodeOutcome::Failed(GuestFault::GuestError {
                message: truncate(&message, MAX_FAULT_MESSAGE_BYTES),
            }),
            Ok(Ok(None)) => EpisodeOutcome::Rejected,
            Ok(Ok(Some(output))) => match take_output(&mut store, output) {
                Ok(t) => EpisodeOutcome::Accepted(t),
                Err(fault) => EpisodeOutcome::Failed(fault),
            },
        };
        let fuel = fuel_consumed(self.config.fuel, &store);
        let peak = store.data().limiter.peak_bytes();
        let state = store.into_data();
        let ctx = state.ctx;
        let call = ctx.call;
        let (stdout, out_dropped) = call.stdout.take();
        let (stderr, err_dropped) = call.stderr.take();
        let report = EpisodeReport {
            id: request.id,
            outcome,
            stdout,
            stderr,
            output_dropped_bytes: out_dropped + err_dropped,
            logs: call.logs,
            stats: call.stats,
            dropped_logs: call.dropped_logs,
            generate_calls: ctx.generate_calls,
            generated_tokens: ctx.generated_tokens,
            peak_memory_bytes: peak,
            fuel_consumed: fuel,
            wall: start.elapsed(),
            host_cpu: call.host_cpu,
            reward_calls: ctx.reward_calls,
        };
        // Not logged here: the entry point that asked reports a failure once, in its own words
        // (the rollout controller logs it, `rollbox run` prints it, Python raises it).
        report
    }

    // Registered rewards and tools, called by the embedder outside any episode.

    /// Score with the reward registered as `name` outside any episode, as a trainer's reward
    /// function does: its call policy (timeout, retries, limits), the pool's reward slots and
    /// the host memory budget apply as for a workflow's `rewards.score`. An unknown name is an
    /// error naming the registered ones.
    pub async fn score(&self, name: &str, call: RewardCall) -> anyhow::Result<Called<f64>> {
        self.score_in(&Arc::default(), name, call, None, None).await
    }

    /// The tool registered as `name`, or an error naming the registered ones.
    fn registered_tool(
        &self,
        name: &str,
    ) -> anyhow::Result<Arc<crate::registry::Registered<ToolComponent>>> {
        let services = self.services();
        services.tool(name).ok_or_else(|| {
            anyhow::anyhow!(
                "no tool named `{name}` is registered (registered: {})",
                names_or_none(&services.tool_names())
            )
        })
    }

    /// Call the tool registered as `name` outside any episode with `args` (its JSON arguments),
    /// under its call policy, as [`Runtime::score`] does for a reward.
    pub async fn call_registered_tool(
        &self,
        name: &str,
        args: String,
    ) -> anyhow::Result<Called<String>> {
        let services = self.services();
        let reg = self.registered_tool(name)?;
        Ok(call_registered(name, &reg, args, services).await)
    }

    /// Call the tool registered as `name` once (no retries), its limits tightened to `timeout`
    /// and `max_memory_bytes` where given, never loosened: a SandboxFusion request's
    /// `run_timeout` and `memory_limit_MB` within what the operator registered.
    pub async fn call_registered_tool_within(
        &self,
        name: &str,
        args: String,
        timeout: Option<Duration>,
        max_memory_bytes: Option<u64>,
    ) -> anyhow::Result<Called<String>> {
        let services = self.services();
        let reg = self.registered_tool(name)?;
        let mut tightened = tighten(reg.as_ref(), timeout, max_memory_bytes);
        tightened.policy.retries = 0;
        Ok(call_registered(name, &tightened, args, services).await)
    }

    /// [`Runtime::score`] with the reward's limits tightened to `timeout` and
    /// `max_memory_bytes` where given, never loosened (a shared server's tenant limits); its
    /// retries as registered.
    pub async fn score_within(
        &self,
        name: &str,
        call: RewardCall,
        timeout: Option<Duration>,
        max_memory_bytes: Option<u64>,
    ) -> anyhow::Result<Called<f64>> {
        self.score_in(&Arc::default(), name, call, timeout, max_memory_bytes)
            .await
    }

    /// [`Runtime::score_within`] with the reward `catalog` reaches as `name` (a tenant's
    /// allowed ones and any its request brought); its tool calls reach the catalog's tools.
    pub async fn score_in(
        &self,
        catalog: &Arc<Catalog>,
        name: &str,
        call: RewardCall,
        timeout: Option<Duration>,
        max_memory_bytes: Option<u64>,
    ) -> anyhow::Result<Called<f64>> {
        let services = self.services();
        let Some(mut reg) = catalog.reward(services, name) else {
            anyhow::bail!(
                "no reward named `{name}` is registered (registered: {})",
                names_or_none(&catalog.reward_names(services))
            );
        };
        if timeout.is_some() || max_memory_bytes.is_some() {
            reg = Arc::new(tighten(reg.as_ref(), timeout, max_memory_bytes));
        }
        Ok(score_registered(name, &reg, call.into(), services, catalog).await)
    }

    /// `reward` ready to bring into a [`Catalog`] as `name` (checked as
    /// [`Runtime::register_reward`] checks a registration), without registering it.
    pub fn reward_for_catalog(
        &self,
        name: &str,
        reward: RewardComponent,
        policy: crate::CallPolicy,
    ) -> anyhow::Result<Arc<crate::Registered<RewardComponent>>> {
        Ok(Arc::new(self.registration(
            "reward",
            name,
            policy,
            || Ok(reward),
        )?))
    }

    /// `tool` ready to bring into a [`Catalog`] as `name`, as [`Runtime::reward_for_catalog`].
    pub fn tool_for_catalog(
        &self,
        name: &str,
        tool: ToolComponent,
        policy: crate::CallPolicy,
    ) -> anyhow::Result<Arc<crate::Registered<ToolComponent>>> {
        Ok(Arc::new(
            self.registration("tool", name, policy, || Ok(tool))?,
        ))
    }

    // Reward and tool calls, one at a time in a fresh sandbox.

    /// Score once with `reward` in a fresh sandbox. A NaN or infinite score is an
    /// `InvalidOutput` fault.
    pub async fn call_reward(
        &self,
        reward: &RewardComponent,
        call: RewardCall,
        limits: Arc<Limits>,
    ) -> CallReport<f64> {
        if let Err(message) = self.check_enforceable(&limits) {
            return CallReport::refused(GuestFault::Unenforceable { message });
        }
        score_once(self.config.fuel, reward, call.into(), limits, None).await
    }

    /// Call `tool` once in a fresh sandbox.
    pub async fn call_tool(
        &self,
        tool: &ToolComponent,
        name: String,
        args: String,
        limits: Arc<Limits>,
    ) -> CallReport<String> {
        if let Err(message) = self.check_enforceable(&limits) {
            return CallReport::refused(GuestFault::Unenforceable { message });
        }
        tool_once(self.config.fuel, tool, name, args, limits).await
    }

    /// Call `tool`'s `describe` once in a fresh sandbox (a component built before WIT 0.1.1
    /// has none: an `Instantiate` fault naming the missing export).
    pub async fn describe_tool(
        &self,
        tool: &ToolComponent,
        limits: Arc<Limits>,
    ) -> CallReport<String> {
        if let Err(message) = self.check_enforceable(&limits) {
            return CallReport::refused(GuestFault::Unenforceable { message });
        }
        describe_once(self.config.fuel, tool, limits).await
    }
}

/// `reg` with its limits tightened to `timeout` and `max_memory_bytes` where given, never
/// loosened.
fn tighten<C: Clone>(
    reg: &crate::registry::Registered<C>,
    timeout: Option<Duration>,
    max_memory_bytes: Option<u64>,
) -> crate::registry::Registered<C> {
    crate::registry::Registered {
        component: reg.component.clone(),
        policy: crate::CallPolicy {
            limits: Arc::new(reg.policy.limits.tightened(timeout, max_memory_bytes)),
            retries: reg.policy.retries,
        },
        fuel_metering: reg.fuel_metering,
    }
}

fn names_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

fn base_config(config: &RuntimeConfig, kind: PoolKind) -> Config {
    let mut c = Config::new();
    c.epoch_interruption(true);
    c.consume_fuel(config.fuel);
    c.wasm_component_model(true);
    match kind {
        PoolKind::Default => {
            c.max_wasm_stack(1 << 20);
            c.async_stack_size(2 << 20);
            // Fiber stacks are not zeroed between uses (wasmtime's default): guests cannot
            // address the native stack, and zeroing cost ~6 µs per instance here
            // (`rollbox-bench sandbox`).
            c.async_stack_zeroing(false);
        }
        PoolKind::Snapshot => {
            c.max_wasm_stack(SNAPSHOT_WASM_STACK_BYTES);
            c.async_stack_size(SNAPSHOT_WASM_STACK_BYTES + (1 << 20));
            // Zeroed so that the pool can give back what a deep call touched past the
            // resident top (`async_stack_keep_resident`): an interpreter's call costs ms.
            c.async_stack_zeroing(true);
        }
    }
    // `ROLLBOX_WASM_PERFMAP=1` writes /tmp/perf-<pid>.map so that `perf report` names guest
    // functions (for profiling components; off by default).
    if std::env::var_os("ROLLBOX_WASM_PERFMAP").is_some_and(|v| v == "1") {
        c.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    c
}

/// Default of [`RuntimeConfig::keep_resident_bytes`].
pub const DEFAULT_KEEP_RESIDENT_BYTES: usize = 16 << 20;

/// How a pool resets a slot's memory for its next instance. Both rewrite only the pages the
/// last instance dirtied (Linux PAGEMAP_SCAN, with rollbox's wasmtime patch 0002: every dirty
/// region, not the first 32, found without the kernel's unreliable `WRITTEN` category) within
/// the keep-resident prefix and release the rest; without the scan (kernel < 6.7, or
/// `ROLLBOX_PAGEMAP_SCAN=0`) the prefix is rewritten whole.
#[derive(Debug, Clone, Copy, PartialEq)]
enum PoolKind {
    /// Keep-resident prefix [`RuntimeConfig::keep_resident_bytes`]: past it, pages are
    /// released and faulted in again (copy-on-write from the image) by the next instance.
    Default,
    /// Interpreter snapshots (see [`SNAPSHOT_MIN_BYTES`]): the whole heap, up to
    /// [`SNAPSHOT_KEEP_RESIDENT_BYTES`], stays resident. An interpreter dirties pages all over
    /// its heap (reference counts), so releasing them costs the next call a copy-on-write fault
    /// each (~1,800 per call, each with a TLB shootdown across the CPUs): Python rlvr at 64 in
    /// flight went 105 -> 628 episodes/s when this pool copied the whole image back instead,
    /// and the scan copies back only what the call wrote (a trivial episode: ~20 pages).
    Snapshot,
}

fn build_engine(config: &RuntimeConfig, kind: PoolKind) -> anyhow::Result<(Engine, bool)> {
    if config.pooling {
        let mut pool = PoolingAllocationConfig::default();
        let n = config.max_instances.max(1);
        pool.total_component_instances(n)
            .total_core_instances(n.saturating_mul(8))
            .total_memories(n.saturating_mul(2))
            .total_tables(n.saturating_mul(4))
            .total_stacks(n)
            .max_memory_size(MAX_MEMORY_BYTES_CAP as usize)
            .max_component_instance_size(10 << 20)
            .max_core_instance_size(10 << 20)
            .max_memories_per_component(16)
            .max_tables_per_component(64)
            .max_core_instances_per_component(200)
            .max_memories_per_module(2)
            .max_tables_per_module(2)
            .table_elements(crate::state::MAX_TABLE_ELEMENTS)
            // Reset a slot by rewriting only the pages the last instance dirtied (Linux
            // PAGEMAP_SCAN, kernel >= 6.7) and keep them resident, instead of madvise + page
            // faults: p50 instantiate+call 28 µs -> 13 µs here. Without the ioctl ("auto"), the
            // keep-resident prefix is memset, so keep it at the size guests really touch. 1 MiB
            // of table holds 131,072 entries; componentize-py's CPython fills 5,784.
            .table_keep_resident(1 << 20);
        // "auto": on where the kernel has the ioctl (>= 6.7), else the prefix is rewritten whole.
        pool.pagemap_scan(if config.pagemap_scan {
            wasmtime::Enabled::Auto
        } else {
            wasmtime::Enabled::No
        });
        pool.linear_memory_keep_resident(match kind {
            PoolKind::Default => config.keep_resident_bytes,
            PoolKind::Snapshot => SNAPSHOT_KEEP_RESIDENT_BYTES,
        });
        if kind == PoolKind::Snapshot {
            pool.async_stack_keep_resident(SNAPSHOT_STACK_KEEP_RESIDENT_BYTES);
        }
        let mut c = base_config(config, kind);
        c.allocation_strategy(InstanceAllocationStrategy::Pooling(pool));
        match Engine::new(&c) {
            Ok(engine) => return Ok((engine, true)),
            Err(e) if kind == PoolKind::Snapshot => {
                tracing::warn!("no snapshot pool ({e}); large components use the default pool");
                return Ok((Engine::new(&base_config(config, kind))?, false));
            }
            Err(e) => tracing::warn!(
                "pooling allocator unavailable ({e}); falling back to on-demand instance allocation"
            ),
        }
    }
    let engine = Engine::new(&base_config(config, kind))
        .map_err(anyhow::Error::from)
        .context("creating the wasmtime engine")?;
    Ok((engine, false))
}

/// Build a pool of `kind` and run the isolation canary on it; when it fails with the
/// dirty-page scan on, turn the scan off in `config` and build again. `None`: the pool leaks
/// without the scan too. Without pooling (unavailable here) the engine comes back unchecked:
/// it reuses no memory.
fn checked_engine(
    config: &mut RuntimeConfig,
    kind: PoolKind,
) -> anyhow::Result<Option<(Engine, bool)>> {
    loop {
        let (engine, pooled) = build_engine(config, kind)?;
        if !pooled || canary_passes(&engine, kind, config) {
            return Ok(Some((engine, pooled)));
        }
        if !config.pagemap_scan {
            return Ok(None);
        }
        tracing::warn!(pool = ?kind, "turning the dirty-page scan (PAGEMAP_SCAN) off");
        config.pagemap_scan = false;
    }
}

impl PoolKind {
    /// The isolation canary's memory for this pool.
    fn canary_pages(self) -> u32 {
        match self {
            PoolKind::Default => crate::canary::DEFAULT_POOL_PAGES,
            PoolKind::Snapshot => crate::canary::SNAPSHOT_POOL_PAGES,
        }
    }
}

/// Whether the isolation canary finds the slots of `engine` (a pool of `kind`, built from
/// `config`) clean; logs why not. Run once per process for each pool configuration: another
/// runtime with the same settings runs on the same kernel and allocator code, and the
/// canary's compile and 20 MiB of writes would otherwise be paid by every `Runtime::new`
/// (hundreds in a test run, one per Python `Host`). `Runtime::isolation_canary` always runs it.
fn canary_passes(engine: &Engine, kind: PoolKind, config: &RuntimeConfig) -> bool {
    type Key = (PoolKind, bool, usize);
    static SEEN: std::sync::Mutex<Vec<(Key, bool)>> = std::sync::Mutex::new(Vec::new());
    let key = (kind, config.pagemap_scan, config.keep_resident_bytes);
    let mut seen = SEEN.lock().unwrap_or_else(|p| p.into_inner());
    if let Some((_, passed)) = seen.iter().find(|(k, _)| *k == key) {
        return *passed;
    }
    let passed = run_canary(engine, kind);
    seen.push((key, passed));
    passed
}

/// Run the isolation canary on `engine` (a pool of `kind`); logs why it failed.
fn run_canary(engine: &Engine, kind: PoolKind) -> bool {
    let pool = format!("{kind:?}").to_lowercase();
    match crate::canary::run(engine, kind.canary_pages()) {
        Ok(r) if r.passed() => true,
        Ok(r) => {
            tracing::warn!(
                pool = %pool,
                "isolation canary: a reused slot kept {} of {} places of the previous instance's memory (the writer saw {})",
                r.leaked,
                r.places,
                r.seen_by_writer
            );
            false
        }
        Err(e) => {
            tracing::warn!(pool = %pool, "isolation canary could not run: {e:#}");
            false
        }
    }
}

/// Advance the engine's epoch every [`EPOCH_TICK`] until the engine is dropped.
fn start_epoch_ticker(engine: &Engine) {
    let weak = engine.weak();
    let spawned = std::thread::Builder::new()
        .name("rollbox-epoch".into())
        .spawn(move || {
            while let Some(engine) = weak.upgrade() {
                engine.increment_epoch();
                drop(engine);
                std::thread::sleep(EPOCH_TICK);
            }
        });
    if let Err(e) = spawned {
        tracing::error!(
            "could not start the epoch ticker thread: {e}; timeouts will not interrupt guests"
        );
    }
}

fn workflow_linker(engine: &Engine) -> anyhow::Result<Linker<EpisodeState>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)
        .map_err(anyhow::Error::from)
        .context("linking WASI 0.2")?;
    bindings::workflow::Workflow::add_to_linker::<_, HasSelf<_>>(&mut linker, |s| s)
        .map_err(anyhow::Error::from)
        .context("linking the rollbox:workflow interfaces")?;
    Ok(linker)
}

/// A linker for reward and tool components: their world's imports plus deny-all WASI (so
/// components from ordinary toolchains load; the WASI context grants nothing).
fn untrusted_linker(
    engine: &Engine,
    add: impl FnOnce(&mut Linker<StoreState<CallCtx>>) -> wasmtime::Result<()>,
) -> anyhow::Result<Linker<StoreState<CallCtx>>> {
    let mut linker = Linker::new(engine);
    wasmtime_wasi::p2::add_to_linker_async(&mut linker)
        .map_err(anyhow::Error::from)
        .context("linking WASI 0.2")?;
    add(&mut linker)
        .map_err(anyhow::Error::from)
        .context("linking the world's interfaces")?;
    Ok(linker)
}
