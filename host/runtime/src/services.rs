//! What the host offers guests beyond their sandbox: the inference backend, the policy
//! version, and the registries of reward and tool components. Shared by all episodes.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

use rollbox_engines::InferenceBackend;

/// Shared host services. Cheap to share behind an `Arc`; every episode's store points here.
#[derive(Default)]
pub struct Services {
    backend: Option<Arc<dyn InferenceBackend>>,
    version: AtomicI32,
    default_stop_ids: Vec<u32>,
}

impl Services {
    /// Services with no inference backend (generate calls return `unavailable`).
    pub fn new() -> Self {
        Self::default()
    }

    /// Use `backend` for `generate`; its default stop ids (eos/pad) become the host's.
    pub fn with_backend(mut self, backend: Arc<dyn InferenceBackend>) -> Self {
        self.default_stop_ids = backend.default_stop_ids();
        self.backend = Some(backend);
        self
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

    /// Set the policy version (after a weight update).
    pub fn set_version(&self, version: i32) {
        self.version.store(version, Ordering::Release);
    }
}
