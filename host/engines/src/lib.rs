//! Inference backends for rollbox behind one trait, [`InferenceBackend`].
//!
//! A backend turns one [`GenerateRequest`] (token ids in, sampling settings already resolved by
//! the host's policy layer) into one [`GenerateResponse`] (token ids, one log-probability per
//! token, stop reason). Policy — clamping `max_new_tokens`, adding eos/pad stop ids, per-episode
//! quotas, version stamping — lives in the runtime's `engine` host-call module, not here.
//!
//! This crate deliberately has no wasmtime dependency. The trait, the request and response
//! types, the errors, [`EngineSpec`] and the replay backend are always built; the backends
//! with heavy dependencies are behind features, so a crate that only names the trait (the
//! runtime) compiles neither candle-nn nor reqwest:
//!
//! | feature | backends | brings |
//! |---|---|---|
//! | `embedded` (default) | [`embedded::EmbeddedBackend`] | candle-core, candle-nn, gemm |
//! | `http` (default) | [`sglang::SglangBackend`], [`openai::OpenAiBackend`] | reqwest |
//! | `testing` | [`testing::FakeBackend`] for tests and benchmarks | nothing |
//!
//! A new backend is a module here, a variant of [`EngineSpec`] and its arm in
//! [`EngineSpec::build`]; nothing outside this crate changes. Backends:
//!
//! * [`embedded::EmbeddedBackend`]: a GGUF model run in-process on candle (CPU).
//! * [`replay::ReplayBackend`]: answers from a recorded JSONL file, for deterministic tests and
//!   exact re-runs of an episode.
//! * [`sglang::SglangBackend`]: SGLang's native `/generate` over plain HTTP, several servers
//!   (round-robin or least-loaded, rid-sticky), resuming generations a weight update aborted
//!   and stamping each token with the policy version it was sampled under.
//! * [`openai::OpenAiBackend`]: an OpenAI-compatible `/v1/completions` server with exact token
//!   ids (vLLM's `return_tokens_as_token_ids`, or llama-cpp-python with checked id recovery).
//!
//! ```
//! use rollbox_engines::{replay::ReplayBackend, GenerateRequest, InferenceBackend};
//! # tokio_test();
//! # fn tokio_test() {
//! let backend = ReplayBackend::from_jsonl_str(
//!     r#"{"input_ids":[1,2],"output_tokens":[7,2],"output_logprobs":[-0.5,-0.1],"stop_reason":"stop"}"#,
//! ).expect("valid replay file");
//! let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
//! let resp = rt.block_on(backend.generate(GenerateRequest::new(vec![1, 2]))).expect("recorded");
//! assert_eq!(resp.output_tokens, vec![7, 2]);
//! # }
//! ```

#[cfg(feature = "embedded")]
pub mod embedded;
#[cfg(feature = "http")]
mod http;
#[cfg(feature = "http")]
pub mod openai;
pub mod replay;
mod request;
#[cfg(feature = "http")]
pub mod sglang;
mod spec;
#[cfg(any(test, feature = "testing"))]
pub mod testing;

#[cfg(feature = "http")]
pub use http::HttpOptions;
pub use request::{
    GenerateRequest, GenerateResponse, RequestOrigin, SamplingParams, StopReason, add_stop_ids,
};
pub use spec::{ENGINE_SPECS, Engine, EngineSpec};

use async_trait::async_trait;

/// Errors a backend reports. The runtime turns them into guest-visible `unavailable` or
/// `invalid-argument` values.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// The request cannot be served as given (e.g. nothing recorded for this prompt).
    #[error("{backend}: {message}")]
    InvalidRequest {
        /// Backend name.
        backend: &'static str,
        /// What is wrong and how to fix it.
        message: String,
    },
    /// The backend could not produce an answer (server down, model failed).
    #[error("{backend}: {message}")]
    Unavailable {
        /// Backend name.
        backend: &'static str,
        /// What failed.
        message: String,
    },
    /// A configuration file could not be read or parsed.
    #[error("{path}: {message}")]
    Config {
        /// The file.
        path: String,
        /// What is wrong, with the line number where it applies.
        message: String,
    },
}

/// One inference backend. Implementations must be cheap to call concurrently: the runtime
/// calls `generate` from many episodes at once.
#[async_trait]
pub trait InferenceBackend: Send + Sync {
    /// A short name for logs and errors (`replay`, `embedded`, `sglang`, `openai`).
    fn name(&self) -> &'static str;

    /// Generate one sample.
    async fn generate(&self, request: GenerateRequest) -> Result<GenerateResponse, EngineError>;

    /// The tokenizer's eos and pad ids as the backend knows them, used as default stop ids
    /// when no host tokenizer is loaded. Default: none.
    fn default_stop_ids(&self) -> Vec<u32> {
        Vec::new()
    }
}
