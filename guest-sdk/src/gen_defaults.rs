//! AReaL's `GenerationHyperparameters` defaults (`areal.api.cli_args`, 1.0.4): the one Rust
//! source of them. The SDK's `GenConfig::default` is made of these, and the host's
//! `SamplingParams::default` (`host/engines/src/request.rs`) includes this file. Python's are
//! in `guest-sdk/python/rollbox_sdk/areal_types.py`, JavaScript's and C's in their rlvr workflows.

/// Samples per request.
pub const N_SAMPLES: u32 = 1;
/// Tokens to generate at most.
pub const MAX_NEW_TOKENS: u32 = 16384;
/// Tokens to generate before a stop is honoured.
pub const MIN_NEW_TOKENS: u32 = 0;
/// Prompt plus generated tokens at most.
pub const MAX_TOKENS: u32 = 32768;
/// Argmax decoding.
pub const GREEDY: bool = false;
/// Softmax temperature.
pub const TEMPERATURE: f32 = 1.0;
/// Nucleus threshold.
pub const TOP_P: f32 = 1.0;
/// Top-k cut-off (`int(1e8)`: no cut).
pub const TOP_K: u32 = 100_000_000;
/// Keep generating past eos.
pub const IGNORE_EOS: bool = false;
/// Leave special tokens out of decoded text.
pub const SKIP_SPECIAL_TOKENS: bool = true;
/// Frequency penalty.
pub const FREQUENCY_PENALTY: f32 = 0.0;
