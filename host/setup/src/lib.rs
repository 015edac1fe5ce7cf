//! Embed rollbox: the one place a rollbox host is put together.
//!
//! A [`HostSpec`] says what to run: the workflow (a `.wasm` path or a built-in's name), the
//! rewards and tools with their call policies, the tokenizer, the engine, every limit and the
//! workflow's config. It is plain data (serde), so the CLI fills it from flags, the Python
//! package from keyword arguments and a service from JSON. [`HostSpec::build`] turns it into a
//! [`Host`]: the runtime started (fuel metering on exactly when a limit sets fuel), the engine
//! and tokenizer loaded, rewards and tools registered, the workflow compiled and the provenance
//! every output carries. A `Host` runs single episodes ([`Host::run_episode`]) and whole
//! datasets ([`Host::rollout`]).
//!
//! ```no_run
//! use rollbox_host::HostSpec;
//! use rollbox_rollout::{MemorySink, RolloutOptions, dataset::Dataset};
//!
//! # async fn demo() -> anyhow::Result<()> {
//! let spec: HostSpec = serde_json::from_str(r#"{
//!     "workflow": "rlvr",
//!     "rewards": {"math": "math"},
//!     "engine": "embedded",
//!     "limits": {"timeout": "60s", "fuel": 2000000000},
//!     "config": {"reward": "math", "gconfig": {"max_new_tokens": 64}}
//! }"#)?;
//! spec.ensure_model().await?; // fetch the default model on first use
//! let host = spec.build()?;
//! let rows = Dataset::from_bytes(br#"{"question": "1+1?", "answer": "2"}"#, "inline");
//! let options = RolloutOptions { n_samples: 4, ..RolloutOptions::default() };
//! let mut batches = MemorySink::new();
//! let stats = host.rollout(options).run(rows, &mut batches, &mut |_| {}).await?;
//! println!("{} trajectories, reward {:.2}", stats.trajectories, stats.reward_mean);
//! # Ok(())
//! # }
//! ```
//!
//! [`builtin`] holds the reference components compiled into rollbox, [`model`] fetches the
//! default model, and [`process`] makes the process-wide settings a rollbox binary wants.

pub mod builtin;
mod host;
pub mod model;
pub mod process;
pub mod pybuild;
mod spec;
pub mod version;

/// The SDK and WIT files rollbox carries, as (path, contents): `rollbox-sdk/src/*.rs` (the Rust
/// SDK), `wit/*.wit`, `rollbox_sdk/*.py` (the Python SDK) and `rollbox_wrap/*.py` (the wrappers
/// [`pybuild`] puts around plain Python functions).
pub mod sdk {
    /// The files.
    pub const FILES: &[(&str, &str)] = include!(concat!(env!("OUT_DIR"), "/sdk_files.rs"));
}

pub use host::{Components, Host, inspect};
pub use rollbox_runtime::{LimitError, LimitSpec};
pub use spec::{ComponentSpec, HOST_KEYS, HostKey, HostSpec};

/// The README's embedding example, compiled by `cargo test --doc` so that it stays true.
#[doc = include_str!("../README.md")]
#[cfg(doctest)]
pub struct ReadmeDoctests;
