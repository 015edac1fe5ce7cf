//! `rollbox-runtime`: loads rollout workflow, reward and tool components by path and runs
//! them in a wasmtime sandbox.
//!
//! What it does:
//!
//! * one shared wasmtime engine (component model, async, epoch interruption, pooling
//!   allocator when available, optional fuel) with an epoch ticker;
//! * components loaded **by path**, checked against the world they must target (`workflow`,
//!   `reward`, `tool`; wrong world, core modules and foreign imports are refused with a message
//!   naming what is missing or extra), compiled once and cached on disk by sha256;
//! * a fresh store and instance per episode from a pre-instantiated component, with
//!   [`Limits`] on memory, wall time (really enforced), fuel, bytes crossing the boundary,
//!   handles, generate calls and tokens, captured output and logs;
//! * deny-by-default WASI: linked so ordinary toolchains' components load, granting nothing
//!   (no preopens, no sockets or name lookup, no env, no args, closed stdin, captured stdout and
//!   stderr);
//! * each episode classified as accepted tensors, rejected, or a typed [`GuestFault`], with its
//!   captured output, logs and stats. The host never panics on guest behaviour.
//!
//! Layout (no module imports another that imports it back; `tests/module_graph.rs` reads the
//! sources and fails on a circle): `runtime.rs` is `Runtime` (every method of it, at most 15);
//! `pool.rs` the engines, pools and linkers it is built on; `kinds.rs` the component kinds it
//! loads (`Load`) and calls (`Callable`); `scope.rs` who is calling (`Scope`); `host/` holds
//! the host side of each WIT interface, one module per interface (`engine`, `tokenizer`,
//! `rewards`, `tools`, `tensor`, `log`, `vision`), as wasmtime-wasi's `p2/host/` does;
//! `sandbox`, `state`, `fault`, `limits`, `budget` and `host_work` are the sandbox core. A
//! store's state is `StoreState<C>`: a tool call's holds only its `CallCtx` (limits, captured
//! output, logs, deadline), a reward's also the tools it may call (behind the `RewardTools`
//! trait, which `host::tools` implements, so the core names no interface), an episode's an
//! `EpisodeCtx` (`episode.rs`, with `WorkflowComponent` and the request and report) that embeds
//! one. `component` reads and checks component files; `registry` is what a registered reward or
//! tool is and the `Registries` that hold them by name (the runtime's, not the services'); `services`
//! is what host calls reach (engine, tokenizer, version, memory budget, call pool); `untrusted`
//! runs reward and tool calls in their own instances.
//!
//! What it does not do: inference (that is `rollbox-engines`, behind
//! [`rollbox_engines::InferenceBackend`]), tensor math (`rollbox-tensor`), datasets and batching.
//!
//! ```no_run
//! # async fn demo() -> anyhow::Result<()> {
//! use std::sync::Arc;
//! use rollbox_runtime::{EpisodeRequest, Limits, Runtime, RuntimeConfig, Scope, Services, WorkflowComponent};
//!
//! let runtime = Runtime::new(RuntimeConfig::default(), Services::new())?;
//! let workflow: WorkflowComponent = runtime.load(std::path::Path::new("workflow.wasm"))?;
//! let report = runtime
//!     .run_episode(&Scope::default(), &workflow, EpisodeRequest::new("r0-s0", serde_json::json!({"x": 1})), Arc::new(Limits::default()))
//!     .await;
//! println!("{}", report.outcome.kind());
//! # Ok(()) }
//! ```

mod bindings;
mod budget;
mod cache;
mod canary;
mod component;
mod episode;
mod fault;
mod host;
mod host_work;
mod kinds;
mod limit_spec;
mod limits;
mod pool;
mod registry;
mod runtime;
mod sandbox;
mod scope;
mod services;
mod slots;
mod state;
mod text;
mod untrusted;
mod world;

pub use budget::{
    ADMISSION_WAIT, DEFAULT_BUDGET_PERCENT, HIGH_WATER_PERCENT, HostMemory,
    LINEAR_MEMORY_ALLOWANCE, Reservation, TENSOR_RESERVATION_CHUNK, TOKENIZER_BYTES_PER_INPUT_BYTE,
    default_budget, host_memory,
};
pub use canary::CanaryReport;
pub use component::{
    ComponentInfo, ComponentSource, MAX_COMPONENT_FILE_BYTES, RewardComponent, ToolComponent,
    read_component,
};
pub use episode::{
    EpisodeOutcome, EpisodeReport, EpisodeRequest, EpisodeSummary, JsonText, MAX_METADATA_BYTES,
    RewardRecord, Trajectory, WorkflowComponent,
};
pub use fault::GuestFault;
pub use host::engine::MAX_GENERATE_MANY_REQUESTS;
pub use host::tools::MAX_CALL_MANY_CALLS;
pub use host::vision::MAX_IMAGES_PER_CALL;
pub use host_work::HOST_FUEL_PER_MS;
pub use kinds::{Callable, Load, ToolInput};
pub use limit_spec::{Caps, LimitError, LimitSpec};
pub use limits::{
    LIMIT_KEYS, LimitKey, LimitUnit, LimitValue, Limits, MAX_MEMORY_BYTES_CAP, Setting,
    parse_duration, parse_size, show_size,
};
pub use pool::{DEFAULT_KEEP_RESIDENT_BYTES, EPOCH_TICK, RuntimeConfig, default_cache_dir};
pub use registry::{CallPolicy, Registered, Registries};
pub use rollbox_tokenizer::file::{open_regular, read_capped};
pub use runtime::Runtime;
pub use scope::Scope;
pub use services::{Services, reward_reserve, tool_calls_per_episode};
pub use state::{LogLine, MAX_TABLE_ELEMENTS};
pub use text::escape_control;
pub use untrusted::{
    CallReport, Called, DEFERRED_TEARDOWN_BYTES, MAX_REAP_BACKLOG, MAX_TOOL_DESCRIPTION_BYTES,
    RewardCall,
};
pub use world::{WIT_PACKAGE, WIT_VERSION, WorldKind};

impl<C: Send> bindings::types::Host for state::StoreState<C> {}
impl bindings::episode::Host for episode::EpisodeState {}
