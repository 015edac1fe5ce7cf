//! Per-instance limits: every guest-controlled size, count and duration has a named setting
//! with a documented default here.

use std::time::Duration;

/// Upper bound on `max_memory_bytes`: a wasm32 linear memory cannot exceed 4 GiB, and the
/// pooling allocator reserves address space for this size.
pub const MAX_MEMORY_BYTES_CAP: u64 = 4 << 30;

/// Limits applied to one workflow episode (one store, one instance).
///
/// Soft limits (generate calls, tokens, tensors, log lines) are reported to the guest as a
/// `limit-exceeded` error value the first time; a guest that keeps going after a refusal is
/// trapped. Hard limits (memory, time, fuel, boundary bytes) end the instance with a typed
/// error naming the setting to raise.
#[derive(Debug, Clone, PartialEq)]
pub struct Limits {
    /// Linear memory per instance, bytes. Default 512 MiB (`--max-memory`). Guards the node's
    /// memory against a guest that allocates without bound.
    pub max_memory_bytes: u64,
    /// Wall-clock time per episode, including host calls. Default 600 s (`--timeout`). Enforced
    /// by epoch interruption, so a spinning guest is really stopped.
    pub timeout: Duration,
    /// Fuel (roughly wasm instructions) per episode; `None` = unmetered. Default none
    /// (`--fuel`). Deterministic CPU budget; turning it on instruments all compiled code.
    pub fuel: Option<u64>,
    /// Bytes a guest may move into the host in one call, arguments or results
    /// (wasmtime hostcall fuel). Default 64 MiB (`--max-boundary-bytes`). Guards against huge
    /// strings and lists.
    pub max_boundary_bytes: usize,
    /// Live resource handles (tensors) per instance. Default 10 000 (`--max-handles`).
    pub max_handles: usize,
    /// Total bytes of host tensors an episode may create. Default 1 GiB
    /// (`--max-tensor-bytes`).
    pub max_tensor_bytes: usize,
    /// `generate` requests per episode (each request of `generate-many` counts). Default 1 024
    /// (`--max-generate-calls`).
    pub max_generate_calls: u32,
    /// Generated tokens per episode across all requests. Default 1 048 576
    /// (`--max-episode-tokens`).
    pub max_generated_tokens: u64,
    /// Captured stdout bytes per episode; output past this is dropped and counted, never an
    /// error for the guest. Default 64 KiB (`--max-output-bytes`, applies to stderr too).
    pub max_stdout_bytes: usize,
    /// Captured stderr bytes per episode. Default 64 KiB.
    pub max_stderr_bytes: usize,
    /// Log lines and stats per episode; more are counted and dropped. Default 1 000.
    pub max_log_lines: usize,
    /// Bytes per log line or stat key; longer ones are truncated. Default 4 KiB.
    pub max_log_line_bytes: usize,
    /// Bytes of input one tokenizer call takes (text to encode, chat messages and their
    /// options, 4 per id to decode); more is refused with `limit-exceeded`. Default 1 MiB
    /// (`--max-tokenizer-bytes`; a 128k-token prompt is ~0.5 MiB). Guards the host's CPU: an
    /// encode cannot be interrupted once started (~1.3 µs per byte here), so this bounds how
    /// long one call can run past the episode's deadline.
    pub max_tokenizer_input_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits::DEFAULT
    }
}

impl Limits {
    /// The defaults for workflow episodes (`Limits::default()`), as a constant.
    pub const DEFAULT: Limits = Limits {
        max_memory_bytes: 512 << 20,
        timeout: Duration::from_secs(600),
        fuel: None,
        max_boundary_bytes: 64 << 20,
        max_handles: 10_000,
        max_tensor_bytes: 1 << 30,
        max_generate_calls: 1024,
        max_generated_tokens: 1 << 20,
        max_stdout_bytes: 64 << 10,
        max_stderr_bytes: 64 << 10,
        max_log_lines: 1000,
        max_log_line_bytes: 4 << 10,
        max_tokenizer_input_bytes: 1 << 20,
    };

    /// Defaults for sandboxed reward and tool calls: 15 s, 256 MiB, 1 MiB across the boundary,
    /// no tensors and no generation (AReaL's `AsyncRewardWrapper` timeout).
    pub fn untrusted_call() -> Self {
        Limits {
            max_memory_bytes: 256 << 20,
            timeout: Duration::from_secs(15),
            fuel: None,
            max_boundary_bytes: 1 << 20,
            max_handles: 100,
            max_tensor_bytes: 0,
            max_generate_calls: 0,
            max_generated_tokens: 0,
            max_stdout_bytes: 16 << 10,
            max_stderr_bytes: 16 << 10,
            max_log_lines: 100,
            max_log_line_bytes: 4 << 10,
            max_tokenizer_input_bytes: 1 << 20,
        }
    }

    /// Defaults for tool calls: [`Limits::untrusted_call`] with 5 s and 128 MiB. An agent waits
    /// on every call, and model-written code that runs longer is a loop more often than not.
    pub fn untrusted_tool() -> Self {
        Limits {
            max_memory_bytes: 128 << 20,
            timeout: Duration::from_secs(5),
            ..Self::untrusted_call()
        }
    }

    /// Check that the settings are usable, naming the first one that is not.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_memory_bytes == 0 || self.max_memory_bytes > MAX_MEMORY_BYTES_CAP {
            return Err(format!(
                "max memory {} bytes is out of range: use 1 byte ..= 4 GiB (wasm32 linear memory)",
                self.max_memory_bytes
            ));
        }
        if self.timeout.is_zero() {
            return Err("timeout must be greater than zero".into());
        }
        if self.max_boundary_bytes == 0 {
            return Err("max boundary bytes must be greater than zero".into());
        }
        if self.fuel == Some(0) {
            return Err("fuel must be greater than zero (omit it to run unmetered)".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_valid_and_reward_defaults_match_areal() {
        assert_eq!(Limits::default().validate(), Ok(()));
        let r = Limits::untrusted_call();
        assert_eq!(r.validate(), Ok(()));
        assert_eq!(r.timeout, Duration::from_secs(15));
        assert_eq!(r.max_memory_bytes, 256 << 20);
    }

    #[test]
    fn invalid_settings_are_named() {
        let l = Limits {
            max_memory_bytes: 5 << 30,
            ..Limits::default()
        };
        assert!(l.validate().expect_err("too big").contains("4 GiB"));
        let l = Limits {
            timeout: Duration::ZERO,
            ..Limits::default()
        };
        assert!(l.validate().expect_err("zero").contains("timeout"));
        let l = Limits {
            fuel: Some(0),
            ..Limits::default()
        };
        assert!(l.validate().expect_err("fuel").contains("fuel"));
    }
}
