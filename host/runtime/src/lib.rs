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
//! one beside one state per interface family (`views.rs`: the engine's counters, the tensor
//! ledger, the calls' scope and records). Each interface is linked through a projection of the
//! store to a view of its own (`EngineView`, `TensorView`, `CallsView`, `HostView`; `log` and a
//! reward's `tools` see only the `CallCtx`), as wasmtime-wasi links its interfaces. `component` reads and checks component files; `registry` is what a registered reward or
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

#![warn(unreachable_pub)]

#[allow(unreachable_pub)] // generated
mod bindings;
pub mod budget;
mod cache;
pub mod canary;
pub mod component;
pub mod episode;
mod fault;
mod host;
mod host_work;
mod kinds;
mod limit_spec;
pub mod limits;
mod pool;
mod registry;
mod runtime;
mod sandbox;
mod scope;
pub mod services;
pub mod session;
mod slots;
mod state;
pub mod text;
mod untrusted;
mod views;
pub mod world;

// The front door: what an embedder names to build a runtime, load components and run them.
pub use budget::{HostMemory, Reservation};
pub use component::{EnvironmentComponent, RewardComponent, ToolComponent};
pub use episode::{
    EpisodeOutcome, EpisodeReport, EpisodeRequest, JsonText, Trajectory, WorkflowComponent,
};
pub use fault::GuestFault;
pub use kinds::{Callable, EnvTarget, Load, Opens, ToolInput};
pub use limit_spec::{Caps, LimitError, LimitSpec};
pub use limits::{Limits, Setting};
pub use pool::RuntimeConfig;
pub use registry::{CallPolicy, Registered, Registries};
pub use runtime::Runtime;
pub use scope::Scope;
pub use services::Services;
pub use session::{EnvSession, Step, ToolSession};
pub use untrusted::{Called, RewardCall};
pub use world::WorldKind;

/// Reward and tool calls in their own instances: what one call reports, and the bounds on
/// the instances torn down after it.
pub mod calls {
    pub use crate::untrusted::{
        CallReport, DEFERRED_TEARDOWN_BYTES, MAX_REAP_BACKLOG, MAX_TOOL_DESCRIPTION_BYTES,
    };
}

/// How the runtime's engine and pools are set up: the epoch tick, the pools' resident memory,
/// the compile cache's folder, tables, and the fuel charged for host work.
pub mod config {
    pub use crate::host_work::HOST_FUEL_PER_MS;
    pub use crate::pool::{DEFAULT_KEEP_RESIDENT_BYTES, EPOCH_TICK, default_cache_dir};
    pub use crate::state::MAX_TABLE_ELEMENTS;
}

/// Opening operator files (component, tenants, TLS, dataset): regular files only, no symlink
/// followed, read up to a cap.
pub mod file {
    pub use rollbox_tokenizer::file::{open_regular, read_capped};
}

/// Bounds of the host interfaces' batch calls.
pub mod interfaces {
    pub use crate::host::engine::MAX_GENERATE_MANY_REQUESTS;
    pub use crate::host::tools::MAX_CALL_MANY_CALLS;
    pub use crate::host::vision::MAX_IMAGES_PER_CALL;
}

impl<C: Send> bindings::types::Host for state::StoreState<C> {}
