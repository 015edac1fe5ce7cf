//! What each host interface sees of an episode's store (as wasmtime-wasi links each WASI
//! interface to a view of its own): the state an interface keeps for the episode, and a view
//! that borrows that state with the call's [`CallCtx`] and the host's [`Services`].
//!
//! [`crate::episode::EpisodeCtx`] holds one state per interface family; the workflow linker
//! (`pool.rs`) links each interface through a projection from the store to its view, so that
//! `engine` never reaches the tensor ledger and `tensor` never reaches the reward records.
//!
//! | interfaces          | view             | its own state      |
//! |---------------------|------------------|--------------------|
//! | `engine`            | [`EngineView`]   | [`EngineState`]    |
//! | `tensor`, `vision`  | [`TensorView`]   | [`TensorLedger`]   |
//! | `rewards`, `tools`  | [`CallsView`]    | [`EpisodeCalls`]   |
//! | `tokenizer`         | [`HostView`]     | none               |
//! | `log`               | [`CallCtx`]      | the call's logs    |

use std::collections::HashMap;
use std::sync::Arc;

use wasmtime::component::{HasData, ResourceTable};

use crate::budget::Reservation;
use crate::registry::Registries;
use crate::scope::Scope;
use crate::services::Services;
use crate::slots::Slots;
use crate::state::CallCtx;

/// One reward call made by the episode, with its accounting.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RewardRecord {
    /// The reward's registered name.
    pub name: String,
    /// The score, when there is one.
    pub value: Option<f64>,
    /// True when the value is the 0.0 timeout fallback.
    pub timed_out: bool,
    /// Wall time over all attempts, µs.
    pub wall_us: u64,
    /// Fuel over all attempts, when metered.
    pub fuel: Option<u64>,
    /// Largest linear memory of any attempt, bytes.
    pub peak_memory_bytes: u64,
    /// Attempts made.
    pub attempts: u32,
    /// The error returned to the workflow, if any.
    pub error: Option<String>,
}

/// The `engine` interface's counters for one episode.
#[derive(Default)]
pub(crate) struct EngineState {
    pub(crate) generate_calls: u32,
    pub(crate) generated_tokens: u64,
    pub(crate) rid_counter: u64,
    /// The episode's sample index (stamped on its generate requests' origin).
    pub(crate) sample_index: u32,
    /// Generate requests made so far per prompt (by hash), for each request's origin.
    pub(crate) prompt_repeats: HashMap<u64, u32>,
}

/// The host tensors an episode made (`tensor` and `vision`).
#[derive(Default)]
pub(crate) struct TensorLedger {
    /// Tensor bytes created so far (cumulative: a dropped tensor's bytes stay counted).
    pub(crate) tensor_bytes: usize,
    pub(crate) live_tensors: usize,
    /// The host tensors' share of the host-wide memory budget (as cumulative as
    /// `tensor_bytes`, taken in `TENSOR_RESERVATION_CHUNK`s); an accepted episode's trajectory
    /// takes it over.
    pub(crate) memory: Reservation,
}

/// Who the episode's `rewards` and `tools` calls act for, and what they did.
pub(crate) struct EpisodeCalls {
    /// The rewards and tools its host calls reach.
    pub(crate) scope: Scope,
    /// The rewards and tools registered in the runtime, which `scope` reaches by name.
    pub(crate) registries: Arc<Registries>,
    /// One record per reward call, for the report.
    pub(crate) reward_calls: Vec<RewardRecord>,
    /// The episode's tool calls in flight ([`crate::services::tool_calls_per_episode`]),
    /// made on its first tool call.
    pub(crate) tool_calls: Option<Arc<Slots>>,
}

impl EpisodeCalls {
    pub(crate) fn new(registries: Arc<Registries>, scope: Scope) -> Self {
        EpisodeCalls {
            scope,
            registries,
            reward_calls: Vec::new(),
            tool_calls: None,
        }
    }
}

/// `engine`'s view: the call, the services (the backend, the policy version) and its counters.
pub(crate) struct EngineView<'a> {
    pub(crate) call: &'a mut CallCtx,
    pub(crate) services: &'a Arc<Services>,
    pub(crate) state: &'a mut EngineState,
}

/// `tensor`'s and `vision`'s view: the store's resource table (the tensors), the call, the
/// services (device, host memory) and the episode's tensor ledger.
pub(crate) struct TensorView<'a> {
    pub(crate) table: &'a mut ResourceTable,
    pub(crate) call: &'a mut CallCtx,
    pub(crate) services: &'a Arc<Services>,
    pub(crate) ledger: &'a mut TensorLedger,
}

/// `rewards`' and `tools`' view: the call, the services (the pools) and the episode's calls.
pub(crate) struct CallsView<'a> {
    pub(crate) call: &'a mut CallCtx,
    pub(crate) services: &'a Arc<Services>,
    pub(crate) calls: &'a mut EpisodeCalls,
}

/// The view of an interface that keeps no state of its own (`tokenizer`): the call and the
/// services.
pub(crate) struct HostView<'a> {
    pub(crate) call: &'a mut CallCtx,
    pub(crate) services: &'a Arc<Services>,
}

/// [`HasData`] for [`EngineView`].
pub(crate) struct Engine;
impl HasData for Engine {
    type Data<'a> = EngineView<'a>;
}

/// [`HasData`] for [`TensorView`].
pub(crate) struct Tensors;
impl HasData for Tensors {
    type Data<'a> = TensorView<'a>;
}

/// [`HasData`] for [`CallsView`].
pub(crate) struct Calls;
impl HasData for Calls {
    type Data<'a> = CallsView<'a>;
}

/// [`HasData`] for [`HostView`].
pub(crate) struct Host;
impl HasData for Host {
    type Data<'a> = HostView<'a>;
}
