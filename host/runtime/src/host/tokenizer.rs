//! Host side of the `tokenizer` interface: the loaded [`HostTokenizer`] (shared by every
//! episode, loaded once at start-up).
//!
//! Limits: the episode's `max_tokenizer_bytes` per call (a soft limit: `limit-exceeded`
//! once, then a trap), texts up to `rollbox_tokenizer::MAX_TEXT_BYTES`, decode lists up to
//! `MAX_DECODE_TOKENS`, and the episode's boundary-bytes limit on every argument; each call's
//! CPU time is charged to the episode (its fuel, when metered) and none starts past its
//! deadline (`timeout`). Malformed JSON, unknown ids, template errors (with the template line)
//! and a missing tokenizer are error values.

use rollbox_tokenizer::{ChatOptions as HostChatOptions, TokenizerError};
use serde_json::Value;

use crate::bindings::tokenizer::{self, ChatOptions, SpecialTokenIds};
use crate::bindings::types::Error;
use crate::budget::TOKENIZER_BYTES_PER_INPUT_BYTE;
use crate::host_work::{offload, past_deadline, timed_inline};
use crate::limits::Setting;
use crate::views::HostView;

fn no_tokenizer() -> Error {
    Error::Unsupported(
        "this host has no tokenizer: give it one (a .gguf, a tokenizer.json or a folder with one), or an engine that carries one".into(),
    )
}

fn to_error(e: TokenizerError) -> Error {
    match e {
        TokenizerError::NoTemplate => Error::Unsupported(e.to_string()),
        other => Error::InvalidArgument(other.to_string()),
    }
}

fn parse_json(what: &str, text: &str) -> Result<Value, Error> {
    serde_json::from_str(text)
        .map_err(|e| Error::InvalidArgument(format!("{what} is not valid JSON: {e}")))
}

fn chat_options_len(o: &ChatOptions) -> usize {
    o.tools.as_ref().map_or(0, String::len) + o.extra.as_ref().map_or(0, String::len)
}

fn options(o: &ChatOptions) -> Result<HostChatOptions, Error> {
    Ok(HostChatOptions {
        add_generation_prompt: o.add_generation_prompt,
        tools: o
            .tools
            .as_deref()
            .map(|t| parse_json("tools", t))
            .transpose()?,
        extra: o
            .extra
            .as_deref()
            .map(|t| parse_json("extra", t))
            .transpose()?,
    })
}

/// Inputs of more bytes than this are tokenized on tokio's blocking pool instead of the async
/// worker: the work is linear (n log n for one long word) but a few MiB still take
/// milliseconds, and the workers also answer `/healthz` and run every other episode. The
/// episode's deadline holds around it (the outer timeout of `sandbox::guarded`).
const OFFLOAD_BYTES: usize = 64 << 10;

impl HostView<'_> {
    /// Run `f` with the tokenizer for an input of `input_bytes`: refused past the episode's
    /// `max_tokenizer_bytes` (a soft limit) or its deadline; inline for small inputs, on
    /// the blocking pool past [`OFFLOAD_BYTES`]; its CPU time charged to the episode
    /// (`host_work`).
    async fn with_tokenizer<T: Send + 'static>(
        &mut self,
        what: &str,
        input_bytes: usize,
        f: impl FnOnce(&rollbox_tokenizer::HostTokenizer) -> Result<T, Error> + Send + 'static,
    ) -> wasmtime::Result<Result<T, Error>> {
        let Some(t) = self.services.tokenizer().cloned() else {
            return Ok(Err(no_tokenizer()));
        };
        let max = self.call.limits.max_tokenizer_bytes;
        if input_bytes > max {
            return Ok(Err(self.call.refuse(
                Setting::Limit("max_tokenizer_bytes"),
                format!(
                    "tokenizer {what} got {input_bytes} bytes of input; at most {max} per call (`max_tokenizer_bytes`)"
                ),
            )?));
        }
        if self.call.past_deadline() {
            return Ok(Err(past_deadline(&format!("tokenizer {what}"))));
        }
        // The call's working memory, from the host-wide budget while it runs.
        let host = self.services.host_memory().clone();
        let work = input_bytes.saturating_mul(TOKENIZER_BYTES_PER_INPUT_BYTE);
        let Some(_working) = host.try_reserve_bulk(work) else {
            return Ok(Err(self.call.refuse(
                Setting::HostMemory,
                host.exhausted(&format!("tokenizer {what}"), work),
            )?));
        };
        let (result, cpu) = if input_bytes <= OFFLOAD_BYTES {
            timed_inline(|| f(&t))
        } else {
            offload(move || f(&t)).await?
        };
        self.call.charge_host(cpu);
        Ok(result)
    }
}

impl tokenizer::Host for HostView<'_> {
    async fn encode(
        &mut self,
        text: String,
        add_special_tokens: bool,
    ) -> wasmtime::Result<Result<Vec<u32>, Error>> {
        self.with_tokenizer("encode", text.len(), move |t| {
            t.encode(&text, add_special_tokens).map_err(to_error)
        })
        .await
    }

    async fn decode(
        &mut self,
        ids: Vec<u32>,
        skip_special_tokens: bool,
    ) -> wasmtime::Result<Result<String, Error>> {
        self.with_tokenizer("decode", ids.len().saturating_mul(4), move |t| {
            t.decode(&ids, skip_special_tokens).map_err(to_error)
        })
        .await
    }

    async fn apply_chat_template(
        &mut self,
        messages: String,
        options: ChatOptions,
    ) -> wasmtime::Result<Result<Vec<u32>, Error>> {
        let size = messages.len() + chat_options_len(&options);
        self.with_tokenizer("apply-chat-template", size, move |t| {
            let messages = parse_json("messages", &messages)?;
            t.apply_chat_template(&messages, &self::options(&options)?)
                .map_err(to_error)
        })
        .await
    }

    async fn render_chat_template(
        &mut self,
        messages: String,
        options: ChatOptions,
    ) -> wasmtime::Result<Result<String, Error>> {
        let size = messages.len() + chat_options_len(&options);
        self.with_tokenizer("render-chat-template", size, move |t| {
            let messages = parse_json("messages", &messages)?;
            t.render_chat_template(&messages, &self::options(&options)?)
                .map_err(to_error)
        })
        .await
    }

    async fn special_tokens(&mut self) -> wasmtime::Result<SpecialTokenIds> {
        Ok(match self.services.tokenizer() {
            Some(t) => {
                let s = t.special();
                SpecialTokenIds {
                    bos: s.bos,
                    eos: s.eos,
                    pad: s.pad,
                }
            }
            None => SpecialTokenIds {
                bos: None,
                eos: None,
                pad: None,
            },
        })
    }
}
