//! Request and response types shared by every backend.

use serde::{Deserialize, Serialize};

/// Why a generation ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// A stop token or stop string was produced.
    #[default]
    Stop,
    /// The token budget was reached.
    Length,
    /// A tool call was parsed.
    #[serde(alias = "tool-calls")]
    ToolCalls,
    /// The server aborted the request.
    Abort,
}

impl StopReason {
    /// The name AReaL uses.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Stop => "stop",
            StopReason::Length => "length",
            StopReason::ToolCalls => "tool_calls",
            StopReason::Abort => "abort",
        }
    }
}

/// Sampling settings after the host's policy has been applied (clamped, stop ids resolved).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SamplingParams {
    /// Tokens to generate at most (already clamped by the host).
    pub max_new_tokens: u32,
    /// Tokens to generate before a stop is honoured.
    pub min_new_tokens: u32,
    /// Argmax decoding.
    pub greedy: bool,
    /// Softmax temperature.
    pub temperature: f32,
    /// Nucleus threshold.
    pub top_p: f32,
    /// Top-k cut-off.
    pub top_k: u32,
    /// Token ids that end generation (eos/pad included unless the guest opted out).
    pub stop_token_ids: Vec<u32>,
    /// Strings that end generation.
    pub stop: Vec<String>,
    /// Keep generating past eos.
    pub ignore_eos: bool,
    /// Frequency penalty.
    pub frequency_penalty: f32,
    /// Sampling seed.
    pub seed: Option<u64>,
}

/// AReaL's generation defaults, from the SDK's file (the one Rust source of them; sampling
/// takes some of them).
#[path = "../../../guest-sdk/src/gen_defaults.rs"]
#[allow(dead_code)]
mod gen_defaults;

impl Default for SamplingParams {
    /// AReaL's `GenerationHyperparameters` defaults (the guest SDK's `gen_defaults`).
    fn default() -> Self {
        use gen_defaults as d;
        SamplingParams {
            max_new_tokens: d::MAX_NEW_TOKENS,
            min_new_tokens: d::MIN_NEW_TOKENS,
            greedy: d::GREEDY,
            temperature: d::TEMPERATURE,
            top_p: d::TOP_P,
            top_k: d::TOP_K,
            stop_token_ids: Vec::new(),
            stop: Vec::new(),
            ignore_eos: d::IGNORE_EOS,
            frequency_penalty: d::FREQUENCY_PENALTY,
            seed: None,
        }
    }
}

/// One request: one sample for one prompt.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateRequest {
    /// Request id (routing key for KV-cache reuse).
    pub rid: String,
    /// Prompt token ids.
    pub input_ids: Vec<u32>,
    /// Sampling settings.
    pub sampling: SamplingParams,
    /// Base64 images for vision models.
    pub image_data: Vec<String>,
    /// The prompt as chat messages whose `image_url` parts take `image_data` in order (AReaL's
    /// `vision_msg_vllm`), for servers that take images only through
    /// `/v1/chat/completions` (the `openai` backend). `None` for token-id prompts.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_messages: Option<serde_json::Value>,
    /// Who made the request, as the host knows it; `None` outside an episode. Never taken
    /// from the guest (whose `rid` is only a routing hint for the engine's cache).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<RequestOrigin>,
}

/// The episode a request came from, set by the host: backends answer by it (the Python
/// bridge uses that episode's engine object and no other; `replay` gives each sample the
/// answer it had when recorded, whatever the concurrency).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RequestOrigin {
    /// The episode id (`r<row>-s<sample>` in a rollout).
    pub episode: String,
    /// The episode's sample index in its group.
    pub sample: u32,
    /// How many earlier requests of the same episode had the same prompt (0 for the first).
    pub repeat: u32,
}

impl GenerateRequest {
    /// A request with default sampling settings.
    pub fn new(input_ids: Vec<u32>) -> Self {
        GenerateRequest {
            rid: String::new(),
            input_ids,
            sampling: SamplingParams::default(),
            image_data: Vec::new(),
            chat_messages: None,
            origin: None,
        }
    }
}

/// One response.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GenerateResponse {
    /// Generated token ids, stop token included.
    pub output_tokens: Vec<u32>,
    /// One log-probability per output token.
    pub output_logprobs: Vec<f32>,
    /// One policy version per output token, when the backend tracks them (SGLang resume after
    /// abort); `None` lets the host stamp its current version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub output_versions: Option<Vec<i32>>,
    /// Why generation ended.
    #[serde(default)]
    pub stop_reason: StopReason,
    /// Seconds to the first token, when the backend measured it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttft: Option<f64>,
}

/// Append each id of `more` to `stop_ids` unless it is already there (in order): how default
/// stop ids (eos, pad) join a request's own, as AReaL's `new_with_stop_and_pad_token_ids` does.
pub fn add_stop_ids(stop_ids: &mut Vec<u32>, more: impl IntoIterator<Item = u32>) {
    for id in more {
        if !stop_ids.contains(&id) {
            stop_ids.push(id);
        }
    }
}
