//! The `openai` backend: `POST /v1/completions` on an OpenAI-compatible server, with exact
//! output token ids; a request with images goes to `POST /v1/chat/completions` as its chat
//! messages (`GenerateRequest::chat_messages`), each `image_url` part filled with the next
//! image as a data URL, as AReaL's vLLM backend sends it.
//!
//! Two kinds of server, chosen by [`OpenAiServer`]:
//!
//! * [`OpenAiServer::TokenIds`] (vLLM, SGLang's OpenAI API, llama.cpp's `llama-server`): the
//!   prompt goes as token ids (`"prompt": [ids]`) and the ids come back, either as
//!   `choices[0].token_ids` (vLLM's `return_token_ids`) or as `"token_id:123"` strings in
//!   `logprobs.tokens` (vLLM's `return_tokens_as_token_ids`, which AReaL's `VLLMBackend` uses).
//!   A server that ignores both flags is an error, never a guess.
//! * [`OpenAiServer::LlamaCppPython`]: llama-cpp-python's server takes only text prompts and
//!   reports output tokens as decoded text; the prompt is rendered by the host's [`Detokenizer`]
//!   and ids are recovered through the server's tokenizer, checked, or the answer is an error
//!   (`llama_cpp_python.rs` says when). It never reports the end-of-generation token that
//!   stopped it, so a `stop` answer lacks its stop token; it ignores `stop_token_ids`, so the
//!   backend cuts the output after the first one itself; it defaults `min_p` to 0.05 and
//!   `repeat_penalty` to 1.1, which the backend resets to 0 and 1. Its log-probabilities are
//!   those of the raw model distribution.
//!
//! Sampling: greedy is temperature 0, top-k 1; `logprobs: 0` asks for the sampled token's
//! log-probability only. An `abort` answer is reported as [`StopReason::Abort`] (no resume).

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use serde::{Deserialize, Serialize};

use crate::http::{HttpClient, HttpOptions, base_url};
use crate::{EngineError, GenerateRequest, GenerateResponse, InferenceBackend, StopReason};

mod llama_cpp_python;

use llama_cpp_python::TextBridge;

const BACKEND: &str = "openai";

fn unavailable(base: &str, message: String) -> EngineError {
    EngineError::Unavailable {
        backend: BACKEND,
        message: format!("{base}: {message}"),
    }
}

/// Renders prompt token ids as the text a text-only server tokenizes back to the same ids
/// (special tokens written out, e.g. `<|im_start|>`). The error says why it cannot.
pub type Detokenizer = Arc<dyn Fn(&[u32]) -> Result<String, String> + Send + Sync>;

/// What the server accepts and reports.
#[derive(Clone)]
pub enum OpenAiServer {
    /// Token-id prompts in, token ids out (vLLM, SGLang, llama.cpp's `llama-server`).
    TokenIds,
    /// llama-cpp-python's `python -m llama_cpp.server`: text prompts, decoded pieces out.
    LlamaCppPython {
        /// Renders the prompt ids as text.
        detokenize: Detokenizer,
    },
}

impl std::fmt::Debug for OpenAiServer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenAiServer::TokenIds => f.write_str("TokenIds"),
            OpenAiServer::LlamaCppPython { .. } => f.write_str("LlamaCppPython"),
        }
    }
}

/// Settings of an [`OpenAiBackend`].
#[derive(Debug, Clone)]
pub struct OpenAiOptions {
    /// Server address, `host:port` or `http://host:port`.
    pub address: String,
    /// The `model` field; left out when `None` (single-model servers).
    pub model: Option<String>,
    /// Sent as `Authorization: Bearer …` when set.
    pub api_key: Option<String>,
    /// Timeout and retries of each HTTP request.
    pub http: HttpOptions,
    /// What the server accepts and reports.
    pub server: OpenAiServer,
}

impl OpenAiOptions {
    /// Default settings for a token-id server at `address`.
    pub fn new(address: impl Into<String>) -> Self {
        OpenAiOptions {
            address: address.into(),
            model: None,
            api_key: None,
            http: HttpOptions::default(),
            server: OpenAiServer::TokenIds,
        }
    }
}

/// Generates on an OpenAI-compatible completions server.
///
/// ```
/// use std::sync::Arc;
/// use rollbox_engines::openai::{OpenAiBackend, OpenAiOptions, OpenAiServer};
///
/// // vLLM: token-id prompts, ids back.
/// let vllm = OpenAiBackend::new(OpenAiOptions::new("127.0.0.1:8000")).expect("valid address");
/// // llama-cpp-python: the host renders prompts as text (special tokens written out).
/// let mut options = OpenAiOptions::new("127.0.0.1:8080");
/// options.server = OpenAiServer::LlamaCppPython {
///     detokenize: Arc::new(|ids: &[u32]| Err(format!("no tokenizer for {} ids", ids.len()))),
/// };
/// let llama = OpenAiBackend::new(options).expect("valid address");
/// # let _ = (vllm, llama);
/// ```
pub struct OpenAiBackend {
    base: String,
    model: Option<String>,
    server: OpenAiServer,
    http: HttpClient,
    bridge: TextBridge,
}

impl OpenAiBackend {
    /// A backend for the server in `options`.
    pub fn new(options: OpenAiOptions) -> Result<Self, EngineError> {
        Ok(OpenAiBackend {
            base: base_url(BACKEND, &options.address)?,
            model: options.model,
            server: options.server,
            http: HttpClient::new(BACKEND, options.http, options.api_key)?,
            bridge: TextBridge::default(),
        })
    }
}

#[derive(Serialize)]
#[serde(untagged)]
enum WirePrompt<'a> {
    Ids(&'a [u32]),
    Text(String),
}

#[derive(Serialize)]
struct WireRequest<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    model: Option<&'a str>,
    prompt: WirePrompt<'a>,
    max_tokens: u32,
    min_tokens: u32,
    temperature: f32,
    top_p: f32,
    top_k: u32,
    logprobs: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    seed: Option<u64>,
    #[serde(skip_serializing_if = "<[String]>::is_empty")]
    stop: &'a [String],
    stop_token_ids: &'a [u32],
    ignore_eos: bool,
    frequency_penalty: f32,
    skip_special_tokens: bool,
    return_tokens_as_token_ids: bool,
    return_token_ids: bool,
    stream: bool,
    /// llama-cpp-python defaults `min_p` to 0.05; 0 keeps the policy's distribution.
    #[serde(skip_serializing_if = "Option::is_none")]
    min_p: Option<f32>,
    /// llama-cpp-python defaults `repeat_penalty` to 1.1; 1 keeps the policy's distribution.
    #[serde(skip_serializing_if = "Option::is_none")]
    repeat_penalty: Option<f32>,
    /// llama-cpp-python has no `ignore_eos` and stops at its EOS token whatever it is sent:
    /// with `ignore_eos`, the stop ids are kept from being sampled instead (-100, OpenAI's ban).
    #[serde(skip_serializing_if = "Option::is_none")]
    logit_bias: Option<std::collections::BTreeMap<String, f32>>,
}

fn wire_request<'a>(
    request: &'a GenerateRequest,
    model: Option<&'a str>,
    prompt: WirePrompt<'a>,
    llama_cpp_python: bool,
) -> WireRequest<'a> {
    let s = &request.sampling;
    WireRequest {
        model,
        prompt,
        max_tokens: s.max_new_tokens,
        min_tokens: s.min_new_tokens,
        temperature: if s.greedy { 0.0 } else { s.temperature },
        top_p: if s.greedy { 1.0 } else { s.top_p },
        top_k: if s.greedy { 1 } else { s.top_k },
        logprobs: 0,
        seed: s.seed,
        stop: &s.stop,
        stop_token_ids: &s.stop_token_ids,
        ignore_eos: s.ignore_eos,
        frequency_penalty: s.frequency_penalty,
        skip_special_tokens: false,
        return_tokens_as_token_ids: true,
        return_token_ids: true,
        stream: false,
        min_p: llama_cpp_python.then_some(0.0),
        repeat_penalty: llama_cpp_python.then_some(1.0),
        logit_bias: (llama_cpp_python && s.ignore_eos && !s.stop_token_ids.is_empty()).then(|| {
            s.stop_token_ids
                .iter()
                .map(|t| (t.to_string(), -100.0))
                .collect()
        }),
    }
}

#[derive(Deserialize)]
struct WireResponse {
    choices: Vec<WireChoice>,
}

#[derive(Deserialize)]
struct WireChoice {
    #[serde(default)]
    finish_reason: Option<String>,
    #[serde(default)]
    logprobs: Option<WireLogprobs>,
    #[serde(default)]
    token_ids: Option<Vec<u32>>,
}

#[derive(Deserialize)]
struct WireLogprobs {
    #[serde(default)]
    tokens: Vec<String>,
    #[serde(default)]
    token_logprobs: Vec<Option<f64>>,
    #[serde(default)]
    text_offset: Vec<u64>,
    /// `/v1/chat/completions`: one entry per output token (`null` when there are none).
    #[serde(default)]
    content: Option<Vec<WireChatToken>>,
}

#[derive(Deserialize)]
struct WireChatToken {
    token: String,
    logprob: Option<f64>,
}

/// What one answer holds before token ids are resolved.
struct Answer {
    stop_reason: StopReason,
    logprobs: Vec<f32>,
    ids: Option<Vec<u32>>,
    pieces: Vec<String>,
    offsets: Vec<u64>,
}

fn parse_answer(response: WireResponse) -> Result<Answer, String> {
    let choice = response
        .choices
        .into_iter()
        .next()
        .ok_or("the answer has no choices")?;
    let stop_reason = match choice.finish_reason.as_deref() {
        Some("stop") => StopReason::Stop,
        Some("length") => StopReason::Length,
        Some("abort") => StopReason::Abort,
        Some("tool_calls") => StopReason::ToolCalls,
        other => return Err(format!("unknown finish_reason {other:?}")),
    };
    let mut lp = choice
        .logprobs
        .ok_or("the answer has no logprobs; the server must support `logprobs`")?;
    if let Some(content) = lp.content.take().filter(|_| lp.tokens.is_empty()) {
        (lp.tokens, lp.token_logprobs) = content.into_iter().map(|t| (t.token, t.logprob)).unzip();
    }
    let logprobs = lp
        .token_logprobs
        .iter()
        .enumerate()
        .map(|(i, l)| {
            l.map(|l| l as f32)
                .ok_or_else(|| format!("token_logprobs[{i}] is null"))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let ids = match choice.token_ids {
        Some(ids) => Some(ids),
        None => lp
            .tokens
            .iter()
            .map(|t| t.strip_prefix("token_id:").and_then(|n| n.parse().ok()))
            .collect::<Option<Vec<u32>>>(),
    };
    if let Some(ids) = &ids
        && ids.len() != logprobs.len()
    {
        return Err(format!(
            "{} token ids but {} token_logprobs",
            ids.len(),
            logprobs.len()
        ));
    }
    if lp.tokens.len() != logprobs.len() {
        return Err(format!(
            "{} logprobs.tokens but {} token_logprobs",
            lp.tokens.len(),
            logprobs.len()
        ));
    }
    Ok(Answer {
        stop_reason,
        logprobs,
        ids,
        pieces: lp.tokens,
        offsets: lp.text_offset,
    })
}

/// The MIME type of base64 image data from its first bytes (PNG, JPEG, GIF, WebP; JPEG
/// otherwise, as AReaL's `detect_image_mime`).
fn image_mime(base64: &str) -> &'static str {
    [
        ("iVBOR", "image/png"),
        ("/9j/", "image/jpeg"),
        ("R0lGOD", "image/gif"),
        ("UklGR", "image/webp"),
    ]
    .iter()
    .find(|(prefix, _)| base64.starts_with(prefix))
    .map_or("image/jpeg", |(_, mime)| mime)
}

/// A `/v1/chat/completions` body: the completions `body` with `messages` for the prompt, each
/// `image_url` part filled with the next image as a data URL (AReaL's vLLM backend), and
/// per-token logprobs.
fn chat_body(
    body: &WireRequest<'_>,
    messages: &serde_json::Value,
    images: &[String],
) -> Result<serde_json::Value, String> {
    let mut messages = messages.clone();
    let mut next = images.iter();
    let mut parts = 0usize;
    let list = messages
        .as_array_mut()
        .ok_or("the chat messages are not a list")?;
    for message in list.iter_mut() {
        let Some(content) = message.get_mut("content").and_then(|c| c.as_array_mut()) else {
            continue;
        };
        for part in content
            .iter_mut()
            .filter(|p| p.get("type").and_then(|t| t.as_str()) == Some("image_url"))
        {
            parts += 1;
            let image = next.next().ok_or_else(|| {
                format!(
                    "the chat messages have more `image_url` parts than the request's {} image(s)",
                    images.len()
                )
            })?;
            part["image_url"] = serde_json::json!({
                "url": format!("data:{};base64,{image}", image_mime(image))
            });
        }
    }
    if parts != images.len() {
        return Err(format!(
            "the request carries {} image(s) and its chat messages {parts} `image_url` part(s): give one part per image",
            images.len()
        ));
    }
    let mut body = serde_json::to_value(body).map_err(|e| e.to_string())?;
    let fields = body.as_object_mut().ok_or("the request is not an object")?;
    fields.remove("prompt");
    fields.insert("messages".into(), messages);
    fields.insert("logprobs".into(), serde_json::Value::Bool(true));
    Ok(body)
}

#[async_trait]
impl InferenceBackend for OpenAiBackend {
    fn name(&self) -> &'static str {
        BACKEND
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateResponse, EngineError> {
        let start = Instant::now();
        let refuse = |message: &str| {
            Err(EngineError::InvalidRequest {
                backend: BACKEND,
                message: message.into(),
            })
        };
        if request.chat_messages.is_some()
            && matches!(self.server, OpenAiServer::LlamaCppPython { .. })
        {
            return refuse(
                "llama-cpp-python's server takes text prompts only: a request with chat messages and images needs a vision-language server (vLLM, or SGLang with the engine sglang:URL)",
            );
        }
        if !request.image_data.is_empty() && request.chat_messages.is_none() {
            return refuse(
                "the request carries images, and /v1/completions takes token ids only: give the chat messages with `image_url` parts (vision-rlvr sends the row's `messages_chat`, as AReaL's vLLM backend does), or serve with SGLang (the engine sglang:URL), whose /generate takes image_data with token ids",
            );
        }
        let (prompt, llama) = match &self.server {
            OpenAiServer::TokenIds => (WirePrompt::Ids(&request.input_ids), false),
            OpenAiServer::LlamaCppPython { detokenize } => (
                WirePrompt::Text(
                    self.bridge
                        .prompt(&self.http, &self.base, detokenize, &request.input_ids)
                        .await?,
                ),
                true,
            ),
        };
        let body = wire_request(&request, self.model.as_deref(), prompt, llama);
        let (path, reply): (&str, WireResponse) = match &request.chat_messages {
            None => {
                let url = format!("{}/v1/completions", self.base);
                ("/v1/completions", self.http.post_json(&url, &body).await?)
            }
            Some(messages) => {
                let body = chat_body(&body, messages, &request.image_data).map_err(|message| {
                    EngineError::InvalidRequest {
                        backend: BACKEND,
                        message,
                    }
                })?;
                let url = format!("{}/v1/chat/completions", self.base);
                (
                    "/v1/chat/completions",
                    self.http.post_json(&url, &body).await?,
                )
            }
        };
        let answer = parse_answer(reply)
            .map_err(|m| unavailable(&self.base, format!("unexpected {path} answer: {m}")))?;
        let mut tokens = match (answer.ids, llama) {
            (Some(ids), _) => ids,
            (None, true) => {
                self.bridge
                    .output_ids(&self.http, &self.base, &answer.pieces, &answer.offsets)
                    .await?
            }
            (None, false) => {
                return Err(unavailable(
                    &self.base,
                    format!(
                        "the server did not honour return_tokens_as_token_ids (first token \
                         came back as {:?}); for llama-cpp-python use \
                         OpenAiServer::LlamaCppPython",
                        answer.pieces.first()
                    ),
                ));
            }
        };
        let mut logprobs = answer.logprobs;
        let mut stop_reason = answer.stop_reason;
        let s = &request.sampling;
        if llama && !s.ignore_eos {
            let from = s.min_new_tokens as usize;
            if let Some(k) = tokens
                .iter()
                .skip(from)
                .position(|t| s.stop_token_ids.contains(t))
            {
                tokens.truncate(from + k + 1);
                stop_reason = StopReason::Stop;
            }
        }
        let max = s.max_new_tokens as usize;
        if tokens.len() > max {
            tokens.truncate(max);
            stop_reason = StopReason::Length;
        }
        logprobs.truncate(tokens.len());
        Ok(GenerateResponse {
            ttft: (!tokens.is_empty()).then(|| start.elapsed().as_secs_f64()),
            output_tokens: tokens,
            output_logprobs: logprobs,
            output_versions: None,
            stop_reason,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SamplingParams;

    /// vLLM's recorded `/v1/completions` answers (see the fixture's `source`).
    const VLLM: &str = include_str!("../../../tests/fixtures/engines/openai/vllm.json");

    fn vllm(case: &str) -> serde_json::Value {
        let all: serde_json::Value = serde_json::from_str(VLLM).expect("fixture is JSON");
        all["cases"][case]["response"].clone()
    }

    fn parse(value: serde_json::Value) -> Result<Answer, String> {
        parse_answer(serde_json::from_value(value).map_err(|e| e.to_string())?)
    }

    #[test]
    fn ignore_eos_bans_the_stop_ids_on_llama_cpp_python_only() {
        let mut request = GenerateRequest::new(vec![1, 2]);
        request.sampling.ignore_eos = true;
        request.sampling.stop_token_ids = vec![2, 0];
        let wire = |request: &GenerateRequest, llama| {
            serde_json::to_value(wire_request(request, None, WirePrompt::Ids(&[1, 2]), llama))
                .expect("json")
        };
        assert_eq!(
            wire(&request, true)["logit_bias"],
            serde_json::json!({"0": -100.0, "2": -100.0})
        );
        assert!(wire(&request, false).get("logit_bias").is_none());
        request.sampling.ignore_eos = false;
        assert!(wire(&request, true).get("logit_bias").is_none());
    }

    #[test]
    fn parses_vllm_token_id_strings_and_token_ids() {
        let stopped = vllm("greedy_stop");
        let a = parse(stopped.clone()).expect("token_ids");
        assert_eq!(a.ids, Some(vec![504, 2988, 314, 216, 36, 30, 2]));
        assert_eq!(a.stop_reason, StopReason::Stop);
        assert_eq!(a.logprobs.len(), 7);
        let mut pieces = stopped;
        pieces["choices"][0]
            .as_object_mut()
            .expect("choice")
            .remove("token_ids");
        let b = parse(pieces).expect("token_id strings");
        assert_eq!(b.ids, a.ids);
        let c = parse(vllm("length")).expect("token_ids");
        assert_eq!(c.ids.map(|i| i.len()), Some(8));
        assert_eq!(c.stop_reason, StopReason::Length);
    }

    #[test]
    fn chat_logprobs_content_is_read_and_null_is_empty() {
        let a = parse(serde_json::json!({"choices": [{"finish_reason": "length",
            "logprobs": {"content": [{"token": "token_id:5", "logprob": -1.5}]}}]}))
        .expect("chat answer");
        assert_eq!((a.ids, a.logprobs), (Some(vec![5]), vec![-1.5]));
        let a = parse(serde_json::json!({"choices": [{"finish_reason": "stop",
            "logprobs": {"content": null}}]}))
        .expect("no tokens");
        assert_eq!((a.ids, a.logprobs.len()), (Some(vec![]), 0));
    }

    #[test]
    fn bad_answers_are_named() {
        let err = parse(serde_json::json!({"choices": []}))
            .err()
            .expect("no choice");
        assert!(err.contains("no choices"), "{err}");
        let err = parse(serde_json::json!({"choices": [{"finish_reason": "stop"}]}))
            .err()
            .expect("no logprobs");
        assert!(err.contains("no logprobs"), "{err}");
        let err = parse(serde_json::json!({"choices": [{"finish_reason": "stop",
            "logprobs": {"tokens": ["token_id:1"], "token_logprobs": [null]}}]}))
        .err()
        .expect("null logprob");
        assert!(err.contains("token_logprobs[0]"), "{err}");
    }

    #[test]
    fn builds_request_for_both_kinds_of_server() {
        let mut request = GenerateRequest::new(vec![1, 2]);
        request.sampling = SamplingParams {
            max_new_tokens: 5,
            greedy: true,
            stop: vec!["\n".into()],
            seed: Some(3),
            ..SamplingParams::default()
        };
        let ids = serde_json::to_value(wire_request(
            &request,
            Some("m"),
            WirePrompt::Ids(&request.input_ids),
            false,
        ))
        .expect("serialize");
        assert_eq!(ids["prompt"], serde_json::json!([1, 2]));
        assert_eq!(ids["model"], "m");
        assert_eq!(ids["max_tokens"], 5);
        assert_eq!(ids["temperature"], 0.0);
        assert_eq!(ids["top_k"], 1);
        assert_eq!(ids["logprobs"], 0);
        assert_eq!(ids["seed"], 3);
        assert_eq!(ids["stop"], serde_json::json!(["\n"]));
        assert_eq!(ids["return_tokens_as_token_ids"], true);
        assert!(ids.get("min_p").is_none() && ids.get("repeat_penalty").is_none());
        let text = serde_json::to_value(wire_request(
            &request,
            None,
            WirePrompt::Text("hi".into()),
            true,
        ))
        .expect("serialize");
        assert_eq!(text["prompt"], "hi");
        assert!(text.get("model").is_none());
        assert_eq!(text["min_p"], 0.0);
        assert_eq!(text["repeat_penalty"], 1.0);
    }
}
