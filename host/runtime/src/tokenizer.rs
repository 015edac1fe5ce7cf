//! Host side of the `tokenizer` interface: the loaded [`HostTokenizer`] (shared by every
//! episode, loaded once at start-up).
//!
//! Limits: texts up to `rollbox_tokenizer::MAX_TEXT_BYTES`, decode lists up to
//! `MAX_DECODE_TOKENS`, and the episode's boundary-bytes limit on every argument. Malformed
//! JSON, unknown ids, template errors (with the template line) and a missing tokenizer are
//! error values; nothing here traps.

use rollbox_tokenizer::{ChatOptions as HostChatOptions, TokenizerError};
use serde_json::Value;

use crate::bindings::tokenizer::{self, ChatOptions, SpecialTokenIds};
use crate::bindings::types::Error;
use crate::state::StoreState;

fn no_tokenizer() -> Error {
    Error::Unsupported(
        "this rollbox host has no tokenizer loaded; start it with --tokenizer PATH (a .gguf or tokenizer.json) or an engine that carries one".into(),
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

impl StoreState {
    /// Run `f` with the tokenizer: inline for small inputs, on the blocking pool past
    /// [`OFFLOAD_BYTES`]. (The future holds no borrow of the store, only the tokenizer.)
    fn with_tokenizer<T: Send + 'static>(
        &self,
        input_bytes: usize,
        f: impl FnOnce(&rollbox_tokenizer::HostTokenizer) -> Result<T, Error> + Send + 'static,
    ) -> impl std::future::Future<Output = wasmtime::Result<Result<T, Error>>> + Send + 'static
    {
        let tokenizer = self.ctx.services.tokenizer().cloned();
        async move {
            let Some(t) = tokenizer else {
                return Ok(Err(no_tokenizer()));
            };
            if input_bytes <= OFFLOAD_BYTES {
                return Ok(f(&t));
            }
            tokio::task::spawn_blocking(move || f(&t))
                .await
                .map_err(|e| wasmtime::format_err!("tokenizer task failed: {e}"))
        }
    }
}

impl tokenizer::Host for StoreState {
    async fn encode(
        &mut self,
        text: String,
        add_special_tokens: bool,
    ) -> wasmtime::Result<Result<Vec<u32>, Error>> {
        self.with_tokenizer(text.len(), move |t| {
            t.encode(&text, add_special_tokens).map_err(to_error)
        })
        .await
    }

    async fn decode(
        &mut self,
        ids: Vec<u32>,
        skip_special_tokens: bool,
    ) -> wasmtime::Result<Result<String, Error>> {
        self.with_tokenizer(ids.len() * 4, move |t| {
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
        self.with_tokenizer(size, move |t| {
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
        self.with_tokenizer(size, move |t| {
            let messages = parse_json("messages", &messages)?;
            t.render_chat_template(&messages, &self::options(&options)?)
                .map_err(to_error)
        })
        .await
    }

    async fn special_tokens(&mut self) -> wasmtime::Result<SpecialTokenIds> {
        Ok(match self.ctx.services.tokenizer() {
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
