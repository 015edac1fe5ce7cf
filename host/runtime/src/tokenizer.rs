//! Host side of the `tokenizer` interface.
//!
//! No tokenizer is loaded by this runtime yet: every call returns an `unsupported` value that
//! says so, and `special-tokens` reports none. Never traps.

use crate::bindings::tokenizer::{self, ChatOptions, SpecialTokenIds};
use crate::bindings::types::Error;
use crate::state::StoreState;

fn no_tokenizer() -> Error {
    Error::Unsupported(
        "this rollbox host has no tokenizer loaded; tokenize in the workflow or pass token ids in the dataset row".into(),
    )
}

impl tokenizer::Host for StoreState {
    async fn encode(
        &mut self,
        _text: String,
        _add_special_tokens: bool,
    ) -> wasmtime::Result<Result<Vec<u32>, Error>> {
        Ok(Err(no_tokenizer()))
    }

    async fn decode(
        &mut self,
        _ids: Vec<u32>,
        _skip_special_tokens: bool,
    ) -> wasmtime::Result<Result<String, Error>> {
        Ok(Err(no_tokenizer()))
    }

    async fn apply_chat_template(
        &mut self,
        _messages: String,
        _options: ChatOptions,
    ) -> wasmtime::Result<Result<Vec<u32>, Error>> {
        Ok(Err(no_tokenizer()))
    }

    async fn render_chat_template(
        &mut self,
        _messages: String,
        _options: ChatOptions,
    ) -> wasmtime::Result<Result<String, Error>> {
        Ok(Err(no_tokenizer()))
    }

    async fn special_tokens(&mut self) -> wasmtime::Result<SpecialTokenIds> {
        Ok(SpecialTokenIds {
            bos: None,
            eos: None,
            pad: None,
        })
    }
}
