//! The wasmtime engines behind a [`Runtime`](crate::Runtime): engine-wide settings
//! ([`RuntimeConfig`]), the two instance pools (default, and interpreter snapshots) with their
//! configuration and isolation canary, the epoch ticker, and one linker per world.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use wasmtime::component::{HasSelf, Linker};
use wasmtime::{Config, Engine, InstanceAllocationStrategy, PoolingAllocationConfig};

use crate::bindings;
use crate::episode::EpisodeState;
use crate::limits::MAX_MEMORY_BYTES_CAP;
use crate::state::{CallCtx, StoreState};
use crate::views;

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

/// One wasmtime engine (with its instance pool) and its linkers, one per world (named by
/// [`Load`](crate::Load), not reachable from outside the crate).
pub struct Pool {
    pub(crate) engine: Engine,
    pub(crate) workflow_linker: Linker<EpisodeState>,
    pub(crate) reward_linker: Linker<StoreState<CallCtx>>,
    pub(crate) tool_linker: Linker<StoreState<CallCtx>>,
}

impl Pool {
    pub(crate) fn new(engine: Engine) -> anyhow::Result<Pool> {
        start_epoch_ticker(&engine);
        crate::untrusted::start_reaper();
        Ok(Pool {
            workflow_linker: workflow_linker(&engine)?,
            // Each interface through the part of the store it needs (`crate::views`).
            reward_linker: untrusted_linker(&engine, |l| {
                bindings::types::add_to_linker::<_, HasSelf<_>>(l, |s| s)?;
                bindings::log::add_to_linker::<_, HasSelf<CallCtx>>(l, |s| &mut s.ctx)?;
                bindings::tools::add_to_linker::<_, HasSelf<CallCtx>>(l, |s| &mut s.ctx)
            })?,
            tool_linker: untrusted_linker(&engine, |l| {
                bindings::log::add_to_linker::<_, HasSelf<CallCtx>>(l, |s| &mut s.ctx)
            })?,
            engine,
        })
    }
}

/// Component files from this size up to [`SNAPSHOT_MAX_BYTES`] run in the snapshot pool: they
/// carry an interpreter's pre-initialised heap (componentize-py: 12-20 MiB), whose pages a call
/// touches all over.
pub(crate) const SNAPSHOT_MIN_BYTES: u64 = 4 << 20;

/// Components past this size stay in the default pool: copying their whole image back after
/// every call costs more than the copy-on-write faults of the part a call touches (math-verify,
/// a 45 MiB heap: p50 10 ms there, 15.6 ms with the copy).
pub(crate) const SNAPSHOT_MAX_BYTES: u64 = 40 << 20;

/// Bytes of each snapshot-pool memory kept resident and restored by copying the image back.
pub(crate) const SNAPSHOT_KEEP_RESIDENT_BYTES: usize = 40 << 20;

/// The native stack an interpreter's call may use (the snapshot pool; 1 MiB elsewhere). A Python
/// recursion through C (an `lru_cache`d function) takes ~1.5 KiB of it a level: 1 MiB ended
/// such a recursion ~600 levels deep in a stack-overflow trap. With 8 MiB, componentize-py's
/// CPython reaches the end of its own C stack first (1 MiB in linear memory, ~2,000 such
/// levels) and raises `RecursionError`, which the program sees.
pub(crate) const SNAPSHOT_WASM_STACK_BYTES: usize = 8 << 20;

/// Bytes at the top of a snapshot-pool fiber stack kept resident between calls (zeroed); the
/// rest is given back to the kernel after each call, so a deep recursion holds its pages only
/// while it runs.
const SNAPSHOT_STACK_KEEP_RESIDENT_BYTES: usize = 256 << 10;

fn base_config(config: &RuntimeConfig, kind: PoolKind) -> Config {
    let mut c = Config::new();
    c.epoch_interruption(true);
    c.consume_fuel(config.fuel);
    c.wasm_component_model(true);
    // No `.eh_frame` registered for guest code: wasmtime walks guest frames itself and carries
    // a host function's panic across them, so only outside profilers and debuggers would read
    // it. The release build links LLVM's libunwind (zig), which registers each function's
    // entry in a list and scans that list to remove each again: dropping an 81 MiB Python
    // component took ~85 ms of a 140 ms cached load.
    c.native_unwind_info(false);
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
pub(crate) enum PoolKind {
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

pub(crate) fn build_engine(
    config: &RuntimeConfig,
    kind: PoolKind,
) -> anyhow::Result<(Engine, bool)> {
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
pub(crate) fn checked_engine(
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
    pub(crate) fn canary_pages(self) -> u32 {
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
    // Each interface through its view of the episode's store (`crate::views`).
    let linked = (|| -> wasmtime::Result<()> {
        let l = &mut linker;
        bindings::types::add_to_linker::<_, HasSelf<_>>(l, |s| s)?;
        bindings::engine::add_to_linker::<_, views::Engine>(l, EpisodeState::engine_view)?;
        bindings::tokenizer::add_to_linker::<_, views::Host>(l, EpisodeState::host_view)?;
        bindings::rewards::add_to_linker::<_, views::Calls>(l, EpisodeState::calls_view)?;
        bindings::tools::add_to_linker::<_, views::Calls>(l, EpisodeState::calls_view)?;
        bindings::tensor::add_to_linker::<_, views::Tensors>(l, EpisodeState::tensor_view)?;
        bindings::vision::add_to_linker::<_, views::Tensors>(l, EpisodeState::tensor_view)?;
        bindings::log::add_to_linker::<_, HasSelf<CallCtx>>(l, |s| &mut s.ctx.call)
    })();
    linked
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
