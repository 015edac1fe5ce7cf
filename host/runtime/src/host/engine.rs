//! Host side of the `engine` interface: policy in front of the [`InferenceBackend`].
//!
//! Policy (AReaL's `agenerate` semantics): one sample per request; `max-new-tokens` clamped to
//! `max-tokens - len(input-ids)` (0 or less is an `invalid-argument` value) and to what is left
//! of the episode's token budget, which each request reserves before it is dispatched (the
//! requests of one `generate-many` share the budget in request order; what a request did not
//! generate is given back when it returns); the backend's eos/pad ids added to the stop ids unless the
//! request opts out; every output token stamped with the policy version.
//!
//! Limits: `max_generate_calls` and `max_episode_tokens` per episode (soft: reported once as
//! `limit-exceeded`, then a trap). A missing backend is an `unavailable` value; a backend
//! failure is an `unavailable` or `invalid-argument` value. Nothing here traps on a guest's
//! ordinary mistake.

use std::sync::Arc;
use std::time::Instant;

use rollbox_engines::{
    EngineError, GenerateRequest, InferenceBackend, RequestOrigin, SamplingParams, StopReason,
    add_stop_ids,
};
use tokio::task::JoinSet;

use crate::bindings::engine;
use crate::bindings::types::{
    Error, GenConfig, ModelRequest, ModelResponse, StopReason as WitStop,
};
use crate::limits::Setting;
use crate::views::EngineView;

/// Requests in one `generate-many` call. Guards the host against a huge fan-out in one call;
/// the per-episode `max_generate_calls` still applies.
pub const MAX_GENERATE_MANY_REQUESTS: usize = 4096;

/// A request that passed policy, ready for the backend.
struct Prepared {
    backend: Arc<dyn InferenceBackend>,
    request: GenerateRequest,
    version: i32,
}

impl EngineView<'_> {
    /// Apply policy to one request: limits, clamping, stop ids, rid.
    fn prepare(&mut self, req: ModelRequest) -> wasmtime::Result<Result<Prepared, Error>> {
        if self.state.generate_calls >= self.call.limits.max_generate_calls {
            let max = self.call.limits.max_generate_calls;
            return Ok(Err(self.call.refuse(
                Setting::Limit("max_generate_calls"),
                format!(
                    "this episode reached its limit of {max} generate calls (`max_generate_calls`)"
                ),
            )?));
        }
        self.state.generate_calls += 1;
        let g = &req.gconfig;
        if g.n_samples != 1 {
            return Ok(Err(Error::InvalidArgument(format!(
                "n-samples is {}: one request generates one sample; send several requests with generate-many",
                g.n_samples
            ))));
        }
        if req.input_ids.is_empty() {
            return Ok(Err(Error::InvalidArgument(
                "input-ids is empty; a prompt needs at least one token".into(),
            )));
        }
        let chat_messages = match chat_messages(&req.metadata) {
            Ok(m) => m,
            Err(e) => return Ok(Err(Error::InvalidArgument(e))),
        };
        let prompt_len = req.input_ids.len() as u64;
        let room = u64::from(g.max_tokens).saturating_sub(prompt_len);
        if room == 0 {
            return Ok(Err(Error::InvalidArgument(format!(
                "the prompt has {prompt_len} tokens, which leaves no room under max-tokens {}; raise max-tokens or shorten the prompt",
                g.max_tokens
            ))));
        }
        let budget = self
            .call
            .limits
            .max_episode_tokens
            .saturating_sub(self.state.generated_tokens);
        if budget == 0 {
            let max = self.call.limits.max_episode_tokens;
            return Ok(Err(self.call.refuse(
                Setting::Limit("max_episode_tokens"),
                format!("this episode generated its limit of {max} tokens (`max_episode_tokens`)"),
            )?));
        }
        let Some(backend) = self.services.backend().cloned() else {
            return Ok(Err(Error::Unavailable(
                "this host has no inference engine: give it one (an engine spec such as `replay:FILE` or `sglang:URL`, or the trainer's engine)".into(),
            )));
        };
        let max_new = u64::from(g.max_new_tokens).min(room).min(budget) as u32;
        // Reserved now, settled in `account`: concurrent requests cannot overrun the budget.
        self.state.generated_tokens += u64::from(max_new);
        let mut stop_token_ids = g.stop_token_ids.clone();
        if !g.exclude_default_stop_ids {
            add_stop_ids(
                &mut stop_token_ids,
                self.services.default_stop_ids().iter().copied(),
            );
        }
        let rid = if req.rid.is_empty() {
            self.state.rid_counter += 1;
            format!("{}-{}", self.call.id, self.state.rid_counter)
        } else {
            req.rid
        };
        let sampling = sampling(g, max_new, stop_token_ids);
        let origin = self.origin(&req.input_ids);
        Ok(Ok(Prepared {
            backend,
            request: GenerateRequest {
                rid,
                input_ids: req.input_ids,
                sampling,
                image_data: req.image_data,
                chat_messages,
                origin: Some(origin),
            },
            version: self.services.version(),
        }))
    }

    /// Who makes a request for `prompt`: this episode, its sample, and how many of its earlier
    /// requests had the same prompt (counted per prompt hash; at most one entry per generate
    /// call, so bounded by `max_generate_calls`).
    fn origin(&mut self, prompt: &[u32]) -> RequestOrigin {
        use std::hash::{Hash as _, Hasher as _};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        prompt.hash(&mut h);
        let seen = self.state.prompt_repeats.entry(h.finish()).or_insert(0);
        let repeat = *seen;
        *seen += 1;
        RequestOrigin {
            episode: self.call.id.clone(),
            sample: self.state.sample_index,
            repeat,
        }
    }

    /// Settle a request's reservation of `reserved` tokens against what the backend produced
    /// (never more than reserved: `execute` refuses a longer answer).
    fn account(&mut self, reserved: u32, result: &Result<ModelResponse, Error>) {
        let used = match result {
            Ok(r) => (r.output_tokens.len() as u64).min(u64::from(reserved)),
            Err(_) => 0,
        };
        self.state.generated_tokens = self
            .state
            .generated_tokens
            .saturating_sub(u64::from(reserved) - used);
    }
}

fn sampling(g: &GenConfig, max_new_tokens: u32, stop_token_ids: Vec<u32>) -> SamplingParams {
    SamplingParams {
        max_new_tokens,
        min_new_tokens: g.min_new_tokens.min(max_new_tokens),
        greedy: g.greedy,
        temperature: g.temperature,
        top_p: g.top_p,
        top_k: g.top_k,
        stop_token_ids,
        stop: g.stop.clone(),
        ignore_eos: g.ignore_eos,
        frequency_penalty: g.frequency_penalty,
        seed: g.seed,
    }
}

/// Call the backend and shape its answer into the WIT response.
async fn execute(p: Prepared) -> Result<ModelResponse, Error> {
    let start = Instant::now();
    let input = p.request.input_ids.clone();
    let max_new = p.request.sampling.max_new_tokens as usize;
    let resp = p.backend.generate(p.request).await.map_err(|e| match e {
        EngineError::InvalidRequest { .. } => Error::InvalidArgument(e.to_string()),
        other => Error::Unavailable(other.to_string()),
    })?;
    let latency = start.elapsed().as_secs_f64();
    let n = resp.output_tokens.len();
    if resp.output_logprobs.len() != n || n > max_new {
        return Err(Error::Unavailable(format!(
            "{}: backend returned {n} tokens and {} logprobs for a request of at most {max_new} tokens",
            p.backend.name(),
            resp.output_logprobs.len()
        )));
    }
    let versions = match resp.output_versions {
        Some(v) if v.len() == n => v,
        _ => vec![p.version; n],
    };
    Ok(ModelResponse {
        input_tokens: input,
        output_tokens: resp.output_tokens,
        output_logprobs: resp.output_logprobs,
        output_versions: versions,
        stop_reason: match resp.stop_reason {
            StopReason::Stop => WitStop::Stop,
            StopReason::Length => WitStop::Length,
            StopReason::ToolCalls => WitStop::ToolCalls,
            StopReason::Abort => WitStop::Abort,
        },
        latency,
        ttft: resp.ttft.unwrap_or(latency),
    })
}

impl engine::Host for EngineView<'_> {
    async fn generate(
        &mut self,
        request: ModelRequest,
    ) -> wasmtime::Result<Result<ModelResponse, Error>> {
        let prepared = match self.prepare(request)? {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        let reserved = prepared.request.sampling.max_new_tokens;
        let result = execute(prepared).await;
        self.account(reserved, &result);
        Ok(result)
    }

    async fn generate_many(
        &mut self,
        requests: Vec<ModelRequest>,
    ) -> wasmtime::Result<Vec<Result<ModelResponse, Error>>> {
        if requests.len() > MAX_GENERATE_MANY_REQUESTS {
            return Ok(vec![Err(Error::LimitExceeded(format!(
                "generate-many got {} requests; at most {MAX_GENERATE_MANY_REQUESTS} per call",
                requests.len()
            )))]);
        }
        let mut results: Vec<Option<Result<ModelResponse, Error>>> =
            Vec::with_capacity(requests.len());
        let mut set = JoinSet::new();
        // A limit reached by one request of the call is reported for the rest of it (one
        // refusal; a second would trap the guest for a single call).
        let mut limit: Option<Error> = None;
        for (index, req) in requests.into_iter().enumerate() {
            if let Some(e) = &limit {
                results.push(Some(Err(e.clone())));
                continue;
            }
            match self.prepare(req)? {
                Ok(p) => {
                    results.push(None);
                    let reserved = p.request.sampling.max_new_tokens;
                    set.spawn(async move { (index, reserved, execute(p).await) });
                }
                Err(e) => {
                    if matches!(e, Error::LimitExceeded(_)) {
                        limit = Some(e.clone());
                    }
                    results.push(Some(Err(e)));
                }
            }
        }
        while let Some(joined) = set.join_next().await {
            let (index, reserved, result) =
                joined.map_err(|e| wasmtime::format_err!("generate task failed: {e}"))?;
            self.account(reserved, &result);
            results[index] = Some(result);
        }
        Ok(results
            .into_iter()
            .map(|r| r.unwrap_or_else(|| Err(Error::Unavailable("request was not run".into()))))
            .collect())
    }

    async fn version(&mut self) -> wasmtime::Result<i32> {
        Ok(self.services.version())
    }
}

/// The chat messages of a request's metadata (`{"messages_chat": [...]}`, AReaL's
/// `vision_msg_vllm`), for backends that take images only through chat messages. Metadata that
/// is not a JSON object, or has no `messages_chat`, carries none.
fn chat_messages(metadata: &str) -> Result<Option<serde_json::Value>, String> {
    if !metadata.contains("messages_chat") {
        return Ok(None);
    }
    let Ok(serde_json::Value::Object(mut m)) = serde_json::from_str(metadata) else {
        return Ok(None);
    };
    match m.remove("messages_chat") {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(v @ serde_json::Value::Array(_)) => Ok(Some(v)),
        Some(other) => Err(format!(
            "metadata.messages_chat must be a list of chat messages, got {}",
            other.to_string().chars().take(80).collect::<String>()
        )),
    }
}
