//! [`Runtime`]: components loaded and registered, episodes run, rewards scored and tools
//! called, each in a fresh sandbox, for a caller's [`Scope`].

use std::sync::Arc;
use std::time::Instant;

use anyhow::Context as _;
use sha2::{Digest as _, Sha256};
use wasmtime::component::Component;

use crate::bindings::episode::EpisodeInput;
use crate::budget::ADMISSION_WAIT;
use crate::cache::ComponentCache;
use crate::canary::CanaryReport;
use crate::component::{
    ComponentInfo, ComponentSource, check_header, check_name, check_world, open_component_file,
    read_open_component,
};
use crate::episode::{
    EpisodeOutcome, EpisodeReport, EpisodeRequest, WorkflowComponent, take_output,
};
use crate::fault::{GuestFault, MAX_FAULT_MESSAGE_BYTES, truncate};
use crate::host::tools::NestedTools;
use crate::kinds::{Callable, Load, OpenCx, Opens};
use crate::limits::Limits;
use crate::pool::{
    Pool, PoolKind, RuntimeConfig, SNAPSHOT_MAX_BYTES, SNAPSHOT_MIN_BYTES, build_engine,
    checked_engine,
};
use crate::registry::Registries;
use crate::sandbox::{fuel_consumed, guarded, new_store};
use crate::scope::Scope;
use crate::services::Services;
use crate::state::StoreState;
use crate::untrusted::{
    CallReport, Called, RewardCall, call_registered, describe, score_registered,
};
use crate::world::WorldKind;

/// The wasmtime engines, linkers and component cache shared by every load and every episode.
pub struct Runtime {
    /// The default pool (pages reset by PAGEMAP_SCAN) and its engine.
    pub(crate) default_pool: Pool,
    /// The pool for large interpreter snapshots (see [`SNAPSHOT_MIN_BYTES`]), when pooling.
    pub(crate) snapshot_pool: Option<Pool>,
    pub(crate) cache: ComponentCache,
    pub(crate) services: Arc<Services>,
    /// The rewards and tools registered by name.
    registries: Arc<Registries>,
    pub(crate) config: RuntimeConfig,
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
        // The settings in effect: what the canary turned off stays off in `config()`.
        config.pooling = pooled;
        config.pagemap_scan &= pooled;
        let cache = ComponentCache::new(config.cache_dir.clone(), &engine);
        let episode_slots = if pooled {
            // Up to 64 more: the reaper's backlog of large instances still being torn down.
            let n = config.max_instances as usize;
            n.saturating_sub(services.untrusted_pool_size() + (n / 8).min(64))
                .max(1)
        } else {
            usize::MAX >> 1
        };
        let services = services.with_session_cap(crate::session::session_cap(config.max_instances));
        Ok(Runtime {
            episode_slots: crate::slots::Slots::new(episode_slots),
            default_pool,
            snapshot_pool,
            cache,
            services: Arc::new(services),
            registries: Arc::default(),
            config,
        })
    }

    /// The settings in effect: as given, less what the platform or the isolation canary
    /// turned off (`pooling`, `pagemap_scan`).
    pub fn config(&self) -> &RuntimeConfig {
        &self.config
    }

    /// The shared host services (backend, tokenizer, version, memory budget, call pool).
    pub fn services(&self) -> &Arc<Services> {
        &self.services
    }

    /// The rewards and tools registered by name ([`Runtime::register`]).
    pub fn registries(&self) -> &Arc<Registries> {
        &self.registries
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

    /// The pool a component file of `size_bytes` runs in.
    pub(crate) fn pool_for(&self, size_bytes: u64) -> &Pool {
        match &self.snapshot_pool {
            Some(p) if (SNAPSHOT_MIN_BYTES..SNAPSHOT_MAX_BYTES).contains(&size_bytes) => p,
            _ => &self.default_pool,
        }
    }

    /// Whether this runtime can enforce every one of `limits`; the message names the limit
    /// that it cannot and how to build a runtime that does. Episodes, reward and tool calls and
    /// registrations with such limits are refused before anything runs, so an accepted limit
    /// is never silently ignored.
    pub(crate) fn check_enforceable(&self, limits: &Limits) -> Result<(), String> {
        crate::limits::enforceable(self.config.fuel, limits)
    }

    // Components: compile, check, load and register.

    /// Read and compile a component and describe it, whatever world it targets.
    pub fn inspect(&self, source: impl Into<ComponentSource>) -> anyhow::Result<ComponentInfo> {
        Ok(self.compile(&source.into())?.0)
    }

    /// Load a component of kind `C` ([`WorkflowComponent`],
    /// [`RewardComponent`](crate::RewardComponent), [`ToolComponent`]) by path or from bytes:
    /// compiled (or read from the cache), checked against `C`'s world and linked.
    pub fn load<C: Load>(&self, source: impl Into<ComponentSource>) -> anyhow::Result<C> {
        let (info, component) = self.compile(&source.into())?;
        check_world(&info, C::WORLD)?;
        C::link(self.pool_for(info.size_bytes), info, &component)
    }

    /// Load a reward or tool and register it under `name`, for workflows' `rewards.score` and
    /// `tools.call` and for [`Runtime::score`] and [`Runtime::call_tool`].
    pub fn register<C: Callable>(
        &self,
        name: &str,
        source: impl Into<ComponentSource>,
        policy: crate::CallPolicy,
    ) -> anyhow::Result<ComponentInfo> {
        let source = source.into();
        let reg = self.registration(C::KIND, name, policy, || self.load::<C>(source))?;
        let info = reg.component.info().clone();
        C::add(&self.registries, name.to_string(), reg);
        Ok(info)
    }

    /// `component` checked as [`Runtime::register`] checks a registration (its name, limits
    /// and whether they are enforceable here), not registered: what a [`Scope`] brings.
    pub fn checked<C: Callable>(
        &self,
        name: &str,
        component: C,
        policy: crate::CallPolicy,
    ) -> anyhow::Result<Arc<crate::Registered<C>>> {
        Ok(Arc::new(self.registration(
            C::KIND,
            name,
            policy,
            || Ok(component),
        )?))
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
        let (file, before) = match source {
            ComponentSource::File(p) => {
                let (file, meta) = open_component_file(p)?;
                (Some(file), Some(meta))
            }
            _ => (None, None),
        };
        // A file loaded before and unchanged since: its recorded sha256 and cached
        // compilation, without reading it again.
        #[cfg(unix)]
        if let (Some(file), Some(meta)) = (&file, &before)
            && let Some(sha256) = self.cache.known_sha256(meta)
        {
            check_header(path, &crate::component::read_header(file, path)?)?;
            let engine = &self.pool_for(meta.len()).engine;
            if let Some(component) = self.cache.cached(engine, &sha256) {
                return Ok(described(engine, path, sha256, meta.len(), component));
            }
        }
        let bytes = match (source, &file) {
            (_, Some(file)) => std::borrow::Cow::Owned(read_open_component(file, path)?),
            (ComponentSource::Bytes { bytes, .. }, _) => std::borrow::Cow::Borrowed(*bytes),
            (ComponentSource::Read { bytes, .. }, _) => std::borrow::Cow::Borrowed(&bytes[..]),
            (ComponentSource::File(_), None) => unreachable!("a file source is opened above"),
        };
        check_header(path, &bytes)?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        if let ComponentSource::Bytes {
            sha256: Some(want), ..
        } = source
            && sha256 != *want
        {
            anyhow::bail!(
                "{} is corrupted: its bytes hash to sha256 {sha256}, not the {want} recorded when it was built; reinstall rollbox",
                path.display()
            );
        }
        let engine = &self.pool_for(bytes.len() as u64).engine;
        let component = self
            .cache
            .load(engine, &sha256, &bytes)
            .with_context(|| format!("{} is not a valid WebAssembly component", path.display()))?;
        if let (Some(file), Some(before)) = (&file, &before)
            && let Ok(after) = file.metadata()
        {
            self.cache.remember_sha256(before, &after, &sha256);
        }
        Ok(described(
            engine,
            path,
            sha256,
            bytes.len() as u64,
            component,
        ))
    }

    /// Open an instance kept across calls for `scope`, taking one of the host's session
    /// places ([`crate::session::session_cap`]): a [`crate::ToolSession`] of the tool `scope`
    /// reaches by the name given (under the tool's limits), or a [`crate::EnvSession`], an
    /// episode of the environment in the [`crate::EnvTarget`] given (its `tools` those `scope`
    /// reaches). An unknown name, a full host or an instance that fails to start is an error
    /// naming it.
    pub async fn open_session<'a, S: Opens>(
        &'a self,
        scope: &'a Scope,
        target: S::Target<'a>,
    ) -> anyhow::Result<S> {
        let cx = OpenCx {
            services: &self.services,
            registries: &self.registries,
            scope,
            fuel: self.config.fuel,
        };
        S::open(cx, target).await
    }

    // Episodes, scores and tool calls of a caller.

    /// Run one episode of `workflow` in a fresh sandbox for `scope`: its limits are `limits`
    /// under the scope's caps, and it reaches the scope's rewards and tools. Never fails:
    /// every guest failure is an [`EpisodeOutcome::Failed`] in the report.
    pub async fn run_episode(
        &self,
        scope: &Scope,
        workflow: &WorkflowComponent,
        request: EpisodeRequest,
        limits: Arc<Limits>,
    ) -> EpisodeReport {
        let limits = match scope.caps().limits.is_empty() {
            true => limits,
            false => Arc::new(limits.capped(&scope.caps().limits)),
        };
        if let Err(message) = self.check_enforceable(&limits) {
            return EpisodeReport::refused(request.id, GuestFault::Unenforceable { message });
        }
        // While the host is above its memory high-water mark, new episodes wait (bounded) for
        // the ones in flight to give memory back; then for a pool slot. The episode's deadline
        // starts with its store.
        self.services
            .host_memory()
            .below_high_water(ADMISSION_WAIT)
            .await;
        let _slot = self.episode_slots.take().await;
        let start = Instant::now();
        let mut store = new_store(
            workflow.pre.engine(),
            self.config.fuel,
            StoreState::episode(
                request.id.clone(),
                limits,
                self.services.clone(),
                (self.registries.clone(), scope.clone()),
                request.seed,
            ),
        );
        store.data_mut().ctx.engine.sample_index = request.sample_index;
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
                    fuel: store.data().ctx.call.limits.fuel.unwrap_or(u64::MAX),
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
            generate_calls: ctx.engine.generate_calls,
            generated_tokens: ctx.engine.generated_tokens,
            peak_memory_bytes: peak,
            fuel_consumed: fuel,
            wall: start.elapsed(),
            host_cpu: call.host_cpu,
            reward_calls: ctx.calls.reward_calls,
        };
        // Not logged here: the entry point that asked reports a failure once, in its own words
        // (the rollout controller logs it, `rollbox run` prints it, Python raises it).
        report
    }

    /// Score with the reward `scope` reaches as `name`, outside any episode, as a trainer's
    /// reward function does: its call policy (timeout, retries, limits) under the scope's caps,
    /// the pool's reward slots and the host memory budget apply as for a workflow's
    /// `rewards.score`, and its tool calls reach the scope's tools. An unknown name is an error
    /// naming the ones the scope reaches.
    pub async fn score(
        &self,
        scope: &Scope,
        name: &str,
        call: RewardCall,
    ) -> anyhow::Result<Called<f64>> {
        let services = self.services();
        let Some(reg) = scope.reward(&self.registries, name) else {
            anyhow::bail!(
                "no reward named `{name}` is registered (registered: {})",
                names_or_none(&scope.reward_names(&self.registries))
            );
        };
        if let Err(message) = self.check_enforceable(&reg.policy.limits) {
            return Ok(Called::refused(GuestFault::Unenforceable { message }));
        }
        let tools = Arc::new(NestedTools::new(
            services.clone(),
            self.registries.clone(),
            scope.clone(),
        ));
        Ok(score_registered(name, &reg, call.into(), services, tools).await)
    }

    /// Call the tool `scope` reaches as `name` outside any episode with `args` (its JSON
    /// arguments), under its call policy and the scope's caps, as [`Runtime::score`] does for
    /// a reward.
    pub async fn call_tool(
        &self,
        scope: &Scope,
        name: &str,
        args: String,
    ) -> anyhow::Result<Called<String>> {
        let services = self.services();
        let Some(reg) = scope.tool(&self.registries, name) else {
            anyhow::bail!(
                "no tool named `{name}` is registered (registered: {})",
                names_or_none(&scope.tool_names(&self.registries))
            );
        };
        if let Err(message) = self.check_enforceable(&reg.policy.limits) {
            return Ok(Called::refused(GuestFault::Unenforceable { message }));
        }
        Ok(call_registered(name, &reg, args, services).await)
    }

    /// The OpenAI schema of every tool `scope` reaches, in name order (what workflows get from
    /// `tools.schemas`), or why one could not be described.
    pub async fn tool_schemas(&self, scope: &Scope) -> Result<serde_json::Value, String> {
        crate::host::tools::schemas(&self.services, &self.registries, scope)
            .await
            .map_err(|e| describe(&e))
    }

    /// One attempt of `component` (a reward or tool, registered or not) in a fresh sandbox
    /// under `limits`: no retries, no call policy. A reward's NaN or infinite score is an
    /// `InvalidOutput` fault.
    pub async fn call_once<C: Callable>(
        &self,
        component: &C,
        input: C::Input,
        limits: Arc<Limits>,
    ) -> CallReport<C::Output> {
        if let Err(message) = self.check_enforceable(&limits) {
            return CallReport::refused(GuestFault::Unenforceable { message });
        }
        let host = self.services.host_memory().clone();
        component.once(self.config.fuel, input, limits, host).await
    }
}

fn names_or_none(names: &[String]) -> String {
    if names.is_empty() {
        "none".into()
    } else {
        names.join(", ")
    }
}

/// A compiled component's description: its imports, exports and the world they make.
fn described(
    engine: &wasmtime::Engine,
    path: &std::path::Path,
    sha256: String,
    size_bytes: u64,
    component: Component,
) -> (ComponentInfo, Component) {
    let ty = component.component_type();
    let imports: Vec<String> = ty.imports(engine).map(|(n, _)| n.to_string()).collect();
    let exports: Vec<String> = ty.exports(engine).map(|(n, _)| n.to_string()).collect();
    let world = WorldKind::ALL
        .into_iter()
        .find(|w| exports.iter().any(|e| e == w.export_name()));
    let info = ComponentInfo {
        path: path.to_path_buf(),
        sha256,
        size_bytes,
        world,
        imports,
        exports,
    };
    (info, component)
}
