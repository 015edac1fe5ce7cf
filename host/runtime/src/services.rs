//! What the host offers guests beyond their sandbox: the inference backend, the tokenizer, the
//! policy version, the memory budget and the bounded pool reward and tool calls run in (the
//! registered components themselves are the runtime's [`Registries`](crate::Registries)).
//! Shared by all episodes.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use rollbox_engines::InferenceBackend;
use rollbox_tokenizer::HostTokenizer;

use crate::budget::{HostMemory, host_memory};
use crate::slots::{Slot, Slots};

/// Shared host services. Every episode's store points here.
pub struct Services {
    backend: Option<Arc<dyn InferenceBackend>>,
    tokenizer: Option<Arc<HostTokenizer>>,
    version: Arc<AtomicI32>,
    default_stop_ids: Vec<u32>,
    untrusted_pool: Slots,
    untrusted_pool_size: usize,
    /// Tool calls hold one of these as well as a pool slot, so they never hold the slots
    /// reserved for rewards.
    tool_share: Slots,
    /// Tool calls made by a reward (a code reward running test cases) take a slot of this
    /// pool, not of `untrusted_pool`: their reward holds a pool slot while it waits for them,
    /// so drawing on the same pool could leave every slot held by a waiting reward.
    nested_pool: Slots,
    device: rollbox_tensor::Device,
    /// The memory budget every episode, reward and tool call here reserves from.
    host_memory: Arc<HostMemory>,
    /// Tool sessions open at once, embedders' and guests' together
    /// ([`crate::session::session_cap`] of the runtime's pool).
    sessions: Arc<tokio::sync::Semaphore>,
    session_cap: usize,
}

/// Tool sessions open at once until a runtime sets its own cap from its pool
/// (`session::session_cap` of the default 1,000 instance slots).
const DEFAULT_SESSION_CAP: usize = 62;

/// Slots of the untrusted-call pool that only reward calls may take: a flood of slow tool
/// calls (one episode's `call-many`, or many agents at once) cannot starve every episode's
/// reward (issue 31: 15 of 15 normal episodes lost their reward behind one flood).
pub fn reward_reserve(pool: usize) -> usize {
    (pool / 4).max(1)
}

/// Tool calls one episode may have in flight at once (the rest of its `call-many` queues
/// behind them): half of what tools may hold of a pool of `pool` slots, at least one, so one
/// agent cannot take the tools' whole share from the others.
pub fn tool_calls_per_episode(pool: usize) -> usize {
    (pool.saturating_sub(reward_reserve(pool)) / 2).max(1)
}

/// A slot of the untrusted-call pool, and for a tool call its slot of the tools' share.
pub(crate) struct UntrustedSlot<'a> {
    _pool: Slot<'a>,
    _tool_share: Option<Slot<'a>>,
}

impl Default for Services {
    fn default() -> Self {
        Self::new()
    }
}

impl Services {
    /// Services with no inference backend (generate calls return `unavailable`) and an
    /// untrusted-call pool of one slot per CPU core.
    pub fn new() -> Self {
        // At least two slots, so that one can be reserved for rewards.
        let cores = std::thread::available_parallelism()
            .map(|n| n.get())
            .unwrap_or(1)
            .max(2);
        Services {
            backend: None,
            tokenizer: None,
            version: Arc::new(AtomicI32::new(0)),
            default_stop_ids: Vec::new(),
            untrusted_pool: Slots::new(cores),
            untrusted_pool_size: cores,
            tool_share: Slots::new(cores - reward_reserve(cores)),
            nested_pool: Slots::new(cores),
            device: rollbox_tensor::default_device(),
            host_memory: host_memory().clone(),
            sessions: Arc::new(tokio::sync::Semaphore::new(DEFAULT_SESSION_CAP)),
            session_cap: DEFAULT_SESSION_CAP,
        }
    }

    /// Hold at most `cap` tool sessions open at once (the runtime sets it from its pool).
    pub(crate) fn with_session_cap(mut self, cap: usize) -> Self {
        self.sessions = Arc::new(tokio::sync::Semaphore::new(cap));
        self.session_cap = cap;
        self
    }

    /// A place for one more open tool session, or `None` when the host holds its cap.
    pub(crate) fn session_permit(&self) -> Option<tokio::sync::OwnedSemaphorePermit> {
        self.sessions.clone().try_acquire_owned().ok()
    }

    /// Tool sessions this host holds open at once at most.
    pub(crate) fn session_cap(&self) -> usize {
        self.session_cap
    }

    /// Reserve every episode's, reward's and tool call's memory from `budget` (a host's own
    /// `max_host_memory`) instead of the process's default one ([`host_memory`]).
    pub fn with_host_memory(mut self, budget: Arc<HostMemory>) -> Self {
        self.host_memory = budget;
        self
    }

    /// The memory budget of everything run here.
    pub fn host_memory(&self) -> &Arc<HostMemory> {
        &self.host_memory
    }

    /// Keep host tensors on `device` (default: [`rollbox_tensor::default_device`], the CPU
    /// unless built with `cuda` and a GPU is present).
    pub fn with_device(mut self, device: rollbox_tensor::Device) -> Self {
        self.device = device;
        self
    }

    /// The device host tensors live on.
    pub fn device(&self) -> &rollbox_tensor::Device {
        &self.device
    }

    /// Use `backend` for `generate`. Without a tokenizer, its default stop ids (eos/pad)
    /// become the host's.
    pub fn with_backend(mut self, backend: Arc<dyn InferenceBackend>) -> Self {
        if self.tokenizer.is_none() {
            self.default_stop_ids = backend.default_stop_ids();
        }
        self.backend = Some(backend);
        self
    }

    /// Serve the `tokenizer` interface with `tokenizer`; its eos and pad ids become the default
    /// stop ids of every generate request (AReaL's `new_with_stop_and_pad_token_ids`).
    pub fn with_tokenizer(mut self, tokenizer: Arc<HostTokenizer>) -> Self {
        let s = tokenizer.special();
        self.default_stop_ids.clear();
        rollbox_engines::add_stop_ids(
            &mut self.default_stop_ids,
            [s.pad, s.eos].into_iter().flatten(),
        );
        self.tokenizer = Some(tokenizer);
        self
    }

    /// The host tokenizer, if one is loaded.
    pub fn tokenizer(&self) -> Option<&Arc<HostTokenizer>> {
        self.tokenizer.as_ref()
    }

    /// Size the pool that reward and tool calls run in (default: one slot per core, at least
    /// two). Calls beyond it queue, so CPU-bound reward code cannot take every core from the
    /// host's I/O. [`reward_reserve`] of its slots are for rewards only (none of a one-slot
    /// pool).
    pub fn with_untrusted_pool(mut self, slots: usize) -> Self {
        let slots = slots.max(1);
        self.untrusted_pool = Slots::new(slots);
        self.untrusted_pool_size = slots;
        self.tool_share = Slots::new(slots.saturating_sub(reward_reserve(slots)).max(1));
        self.nested_pool = Slots::new(slots);
        self
    }

    /// Slots in the untrusted-call pool.
    pub fn untrusted_pool_size(&self) -> usize {
        self.untrusted_pool_size
    }

    /// A slot for one reward attempt.
    pub(crate) async fn reward_slot(&self) -> UntrustedSlot<'_> {
        UntrustedSlot {
            _pool: self.untrusted_pool.take().await,
            _tool_share: None,
        }
    }

    /// A slot for one attempt of a tool called by a reward (see `nested_pool`).
    pub(crate) async fn nested_slot(&self) -> UntrustedSlot<'_> {
        UntrustedSlot {
            _pool: self.nested_pool.take().await,
            _tool_share: None,
        }
    }

    /// A slot for one tool attempt: first one of the tools' share, then one of the pool.
    pub(crate) async fn tool_slot(&self) -> UntrustedSlot<'_> {
        let share = self.tool_share.take().await;
        UntrustedSlot {
            _pool: self.untrusted_pool.take().await,
            _tool_share: Some(share),
        }
    }

    /// The inference backend, if one is configured.
    pub fn backend(&self) -> Option<&Arc<dyn InferenceBackend>> {
        self.backend.as_ref()
    }

    /// The eos and pad ids added to every request's stop ids unless it opts out.
    pub fn default_stop_ids(&self) -> &[u32] {
        &self.default_stop_ids
    }

    /// The current policy version (stamped on generated tokens).
    pub fn version(&self) -> i32 {
        self.version.load(Ordering::Acquire)
    }

    /// Share `version` as the policy version (a backend that stamps versions itself, such as
    /// SGLang resuming after an abort, reads the same counter).
    pub fn with_version(mut self, version: Arc<AtomicI32>) -> Self {
        self.version = version;
        self
    }

    /// The shared policy-version counter.
    pub fn version_handle(&self) -> Arc<AtomicI32> {
        self.version.clone()
    }

    /// Set the policy version (after a weight update).
    pub fn set_version(&self, version: i32) {
        self.version.store(version, Ordering::Release);
    }
}
