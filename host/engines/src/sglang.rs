//! The `sglang` backend: SGLang's native `POST /generate` on token ids, across several servers.
//!
//! * Request and response follow AReaL's `SGLangBackend` (`areal/engine/sglang_remote.py`):
//!   `input_ids` + `sampling_params` + `return_logprob`, answers parsed from
//!   `meta_info.output_token_logprobs` (`[logprob, token_id, text]` triples) and
//!   `meta_info.finish_reason.type`. Greedy is sent as temperature 0, top-k 1. Special tokens are
//!   kept and stop strings are not trimmed (`skip_special_tokens: false`, `no_stop_trim: true`),
//!   so the returned ids are exactly the sampled ones.
//! * Routing: round-robin or least-loaded (fewest requests in flight from this backend), and a
//!   non-empty `rid` sticks to the server it first went to (KV-cache reuse across turns), for the
//!   last [`MAX_STICKY_RIDS`] rids.
//! * Interrupted generation: a server paused for a weight update answers `finish_reason.type ==
//!   "abort"`. The backend waits (exponential backoff) and resends the prompt plus the tokens so
//!   far with the remaining budget, on the same server, accumulating tokens and log-probabilities.
//!   Each token is stamped with the policy version read *before* its segment was sent (AReaL PR
//!   #1569: reading it after the answer mislabels tokens when an update lands mid-request).
//!   Once the budget is spent the reason is `length`; when [`SglangOptions::max_resumes`] is
//!   spent it is `abort`. An abort carrying a 4xx `status_code` is a rejected request, not a
//!   pause, and becomes [`EngineError::InvalidRequest`].
//! * `ttft` is the time until the first segment with tokens came back (requests are not
//!   streamed, so it is an upper bound, as in AReaL).

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::http::{HttpClient, HttpOptions, backoff, base_url};
use crate::{EngineError, GenerateRequest, GenerateResponse, InferenceBackend, StopReason};

mod routing;

use routing::Router;
pub use routing::{MAX_STICKY_RIDS, Routing};

const BACKEND: &str = "sglang";

/// Settings of an [`SglangBackend`].
#[derive(Debug, Clone)]
pub struct SglangOptions {
    /// Server addresses, `host:port` or `http://host:port`.
    pub addresses: Vec<String>,
    /// Routing policy for requests without a sticky rid.
    pub routing: Routing,
    /// Timeout and retries of each HTTP request.
    pub http: HttpOptions,
    /// Resends after `abort` answers before giving up with [`StopReason::Abort`].
    pub max_resumes: u32,
    /// Wait before the first resend after an abort; doubled for each further one.
    pub resume_backoff: Duration,
    /// Cap on the wait between resends.
    pub max_resume_backoff: Duration,
}

impl SglangOptions {
    /// Default settings for these servers.
    pub fn new(addresses: impl IntoIterator<Item = impl Into<String>>) -> Self {
        SglangOptions {
            addresses: addresses.into_iter().map(Into::into).collect(),
            routing: Routing::default(),
            http: HttpOptions::default(),
            max_resumes: 64,
            resume_backoff: Duration::from_millis(500),
            max_resume_backoff: Duration::from_secs(8),
        }
    }
}

/// Generates on SGLang servers over HTTP.
///
/// ```
/// use std::sync::{Arc, atomic::AtomicI32};
/// use rollbox_engines::sglang::{Routing, SglangBackend, SglangOptions};
///
/// let policy_version = Arc::new(AtomicI32::new(0));
/// let mut options = SglangOptions::new(["127.0.0.1:30000", "http://127.0.0.1:30001"]);
/// options.routing = Routing::LeastLoaded;
/// let backend = SglangBackend::new(options, policy_version).expect("valid addresses");
/// assert_eq!(backend.servers(), ["http://127.0.0.1:30000", "http://127.0.0.1:30001"]);
/// ```
pub struct SglangBackend {
    router: Router,
    http: HttpClient,
    version: Arc<AtomicI32>,
    max_resumes: u32,
    resume_backoff: (Duration, Duration),
    sent: AtomicU64,
}

impl SglangBackend {
    /// A backend for these servers. `version` is the host's current policy version; each output
    /// token is stamped with its value when the token's segment was requested.
    pub fn new(options: SglangOptions, version: Arc<AtomicI32>) -> Result<Self, EngineError> {
        if options.addresses.is_empty() {
            return Err(EngineError::Config {
                path: "sglang addresses".into(),
                message: "no server address given; give at least one host:port".into(),
            });
        }
        let bases = options
            .addresses
            .iter()
            .map(|a| base_url(BACKEND, a))
            .collect::<Result<Vec<_>, EngineError>>()?;
        Ok(SglangBackend {
            router: Router::new(bases, options.routing),
            http: HttpClient::new(BACKEND, options.http, None)?,
            version,
            max_resumes: options.max_resumes,
            resume_backoff: (options.resume_backoff, options.max_resume_backoff),
            sent: AtomicU64::new(0),
        })
    }

    /// The servers' base URLs, in routing order.
    pub fn servers(&self) -> Vec<&str> {
        self.router.bases()
    }

    /// A server-side request id unique per HTTP request (SGLang rejects a rid already in flight,
    /// and one GRPO group shares a rid), or none for an anonymous request.
    fn wire_rid(&self, rid: &str) -> Option<String> {
        (!rid.is_empty()).then(|| format!("{rid}-{}", self.sent.fetch_add(1, Ordering::Relaxed)))
    }
}

#[derive(Serialize)]
struct WireSampling<'a> {
    max_new_tokens: u32,
    min_new_tokens: u32,
    temperature: f32,
    top_p: f32,
    top_k: u32,
    stop_token_ids: &'a [u32],
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    ignore_eos: bool,
    frequency_penalty: f32,
    skip_special_tokens: bool,
    no_stop_trim: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    sampling_seed: Option<u64>,
}

#[derive(Serialize)]
struct WireRequest<'a> {
    input_ids: &'a [u32],
    sampling_params: WireSampling<'a>,
    return_logprob: bool,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    rid: Option<String>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    image_data: &'a [String],
}

/// The `/generate` body for the segment after `produced` tokens, `input_ids` holding the prompt
/// and those tokens.
fn wire_request<'a>(
    request: &'a GenerateRequest,
    input_ids: &'a [u32],
    produced: u32,
    rid: Option<String>,
) -> WireRequest<'a> {
    let s = &request.sampling;
    WireRequest {
        input_ids,
        sampling_params: WireSampling {
            max_new_tokens: s.max_new_tokens.saturating_sub(produced),
            min_new_tokens: s.min_new_tokens.saturating_sub(produced),
            temperature: if s.greedy { 0.0 } else { s.temperature },
            top_p: if s.greedy { 1.0 } else { s.top_p },
            top_k: if s.greedy { 1 } else { s.top_k },
            stop_token_ids: &s.stop_token_ids,
            stop: &s.stop,
            ignore_eos: s.ignore_eos,
            frequency_penalty: s.frequency_penalty,
            skip_special_tokens: false,
            no_stop_trim: true,
            sampling_seed: s.seed,
        },
        return_logprob: true,
        stream: false,
        rid,
        image_data: &request.image_data,
    }
}

#[derive(Deserialize)]
struct WireResponse {
    meta_info: WireMeta,
}

#[derive(Deserialize)]
struct WireMeta {
    #[serde(default)]
    finish_reason: Option<WireFinish>,
    #[serde(default)]
    output_token_logprobs: Option<Vec<Vec<serde_json::Value>>>,
}

#[derive(Deserialize)]
struct WireFinish {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    message: Option<String>,
    #[serde(default)]
    status_code: Option<u16>,
}

#[derive(Debug, PartialEq)]
enum Finish {
    Stop,
    Length,
    Abort {
        message: String,
        status: Option<u16>,
    },
}

#[derive(Debug, PartialEq)]
struct Segment {
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
    finish: Finish,
}

/// Reads one `/generate` answer; the error says which field is wrong.
fn parse_segment(response: WireResponse) -> Result<Segment, String> {
    let meta = response.meta_info;
    let finish = meta
        .finish_reason
        .ok_or("meta_info.finish_reason is missing or null")?;
    let finish = match finish.kind.as_str() {
        "stop" => Finish::Stop,
        "length" => Finish::Length,
        "abort" => Finish::Abort {
            message: finish.message.unwrap_or_default(),
            status: finish.status_code,
        },
        other => return Err(format!("unknown meta_info.finish_reason.type `{other}`")),
    };
    let entries = meta.output_token_logprobs.unwrap_or_default();
    let mut tokens = Vec::with_capacity(entries.len());
    let mut logprobs = Vec::with_capacity(entries.len());
    for (i, entry) in entries.iter().enumerate() {
        let logprob = entry.first().and_then(serde_json::Value::as_f64);
        let token = entry
            .get(1)
            .and_then(serde_json::Value::as_u64)
            .and_then(|t| u32::try_from(t).ok());
        let (Some(logprob), Some(token)) = (logprob, token) else {
            return Err(format!(
                "meta_info.output_token_logprobs[{i}] is {entry:?}, expected [logprob, token_id, text]"
            ));
        };
        tokens.push(token);
        logprobs.push(logprob as f32);
    }
    Ok(Segment {
        tokens,
        logprobs,
        finish,
    })
}

/// Sends SGLang's `POST /abort_request {"rid"}` when dropped armed, i.e. when the request's
/// future is dropped while the server still works on it.
struct AbortOnDrop<'a> {
    http: &'a HttpClient,
    url: String,
    rid: Option<String>,
}

impl AbortOnDrop<'_> {
    fn disarm(mut self) {
        self.rid = None;
    }
}

impl Drop for AbortOnDrop<'_> {
    fn drop(&mut self) {
        if let Some(rid) = self.rid.take() {
            tracing::debug!("aborting abandoned request {rid}");
            self.http.post_detached(
                std::mem::take(&mut self.url),
                serde_json::json!({"rid": rid}),
            );
        }
    }
}

#[async_trait]
impl InferenceBackend for SglangBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateResponse, EngineError> {
        let start = Instant::now();
        let budget = request.sampling.max_new_tokens as usize;
        let in_flight = self.router.enter(&request.rid);
        let url = format!("{}/generate", in_flight.base());
        let mut input_ids = request.input_ids.clone();
        let mut tokens = Vec::new();
        let mut logprobs = Vec::new();
        let mut versions = Vec::new();
        let mut ttft = None;
        let mut resumes = 0;
        let stop_reason = loop {
            if tokens.len() >= budget {
                break StopReason::Length;
            }
            // Pinned before sending: the tokens of this segment come from this version.
            let version = self.version.load(Ordering::Acquire);
            let produced = tokens.len() as u32;
            let rid = self.wire_rid(&request.rid);
            let body = wire_request(&request, &input_ids, produced, rid.clone());
            // Dropped before the answer (the episode timed out or was cancelled): the server is
            // told to stop decoding for nobody.
            let abort = AbortOnDrop {
                http: &self.http,
                url: format!("{}/abort_request", in_flight.base()),
                rid,
            };
            let reply = self.http.post_json::<_, WireResponse>(&url, &body).await;
            abort.disarm();
            let reply = reply?;
            let mut segment = parse_segment(reply).map_err(|m| EngineError::Unavailable {
                backend: BACKEND,
                message: format!("{url} answered an unexpected shape: {m}"),
            })?;
            let room = budget - tokens.len();
            if segment.tokens.len() > room {
                segment.tokens.truncate(room);
                segment.logprobs.truncate(room);
                segment.finish = Finish::Length;
            }
            if ttft.is_none() && !segment.tokens.is_empty() {
                ttft = Some(start.elapsed().as_secs_f64());
            }
            versions.extend(std::iter::repeat_n(version, segment.tokens.len()));
            input_ids.extend_from_slice(&segment.tokens);
            tokens.extend(segment.tokens);
            logprobs.extend(segment.logprobs);
            match segment.finish {
                Finish::Stop => break StopReason::Stop,
                Finish::Length => break StopReason::Length,
                Finish::Abort {
                    message,
                    status: Some(status),
                } if (400..500).contains(&status) => {
                    return Err(EngineError::InvalidRequest {
                        backend: BACKEND,
                        message: format!("{url} refused the request (status {status}): {message}"),
                    });
                }
                Finish::Abort { .. } if tokens.len() >= budget => break StopReason::Length,
                Finish::Abort { .. } if resumes >= self.max_resumes => break StopReason::Abort,
                Finish::Abort { .. } => {
                    resumes += 1;
                    let (initial, max) = self.resume_backoff;
                    tokio::time::sleep(backoff(initial, max, resumes)).await;
                }
            }
        };
        drop(in_flight);
        Ok(GenerateResponse {
            output_tokens: tokens,
            output_logprobs: logprobs,
            output_versions: Some(versions),
            stop_reason,
            ttft,
        })
    }
}

#[cfg(test)]
mod tests;
