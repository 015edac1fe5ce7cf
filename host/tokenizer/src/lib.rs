//! `rollbox-tokenizer`: tokenization and chat templates on the host, identical to Hugging Face
//! `transformers` for the same tokenizer.
//!
//! A [`HostTokenizer`] loads from a Hugging Face `tokenizer.json` (+ `tokenizer_config.json`
//! for the chat template and special tokens), or from a GGUF file's own metadata
//! (`tokenizer.ggml.*`, `tokenizer.chat_template`), as llama.cpp does, so one GGUF file carries
//! model, tokenizer and template. Chat templates render with minijinja set up as transformers
//! sets up jinja2 (`trim_blocks`, `lstrip_blocks`, loop controls, Python string methods,
//! `tojson`, `raise_exception`, `strftime_now`). Load once and share: nothing here is on a
//! per-episode path except the calls themselves.
//!
//! No wasmtime, no model weights.
//!
//! ```no_run
//! use rollbox_tokenizer::{ChatOptions, HostTokenizer};
//! let tok = HostTokenizer::load("SmolLM2-135M-Instruct.Q4_1.gguf".as_ref())?;
//! let ids = tok.encode("Hello world", false)?;
//! let messages = serde_json::json!([{"role": "user", "content": "What is 2 + 2?"}]);
//! let prompt = tok.apply_chat_template(&messages, &ChatOptions::default())?;
//! # Ok::<(), rollbox_tokenizer::TokenizerError>(())
//! ```

mod bpe;
mod decode;
pub mod file;
pub mod gguf;
mod load;
mod template;

pub use load::{HostTokenizer, SpecialTokens};
pub use template::ChatOptions;

/// Texts longer than this are refused by `encode` and chat rendering. Guards the host against
/// a guest asking to tokenize gigabytes.
pub const MAX_TEXT_BYTES: usize = 16 << 20;

/// Token lists longer than this are refused by `decode`.
pub const MAX_DECODE_TOKENS: usize = 4 << 20;

/// Errors of loading and using a tokenizer.
#[derive(Debug, thiserror::Error)]
pub enum TokenizerError {
    /// A file could not be read.
    #[error("{path}: {source}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// A file is not what it should be.
    #[error("{path}: {message}")]
    Format {
        /// The file.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The tokenizer library failed.
    #[error("tokenizer: {0}")]
    Tokenizers(String),
    /// A request is out of bounds (too long, unknown id).
    #[error("{0}")]
    Invalid(String),
    /// The tokenizer has no chat template.
    #[error(
        "this tokenizer has no chat template; give one with a tokenizer_config.json `chat_template` or use a model whose GGUF carries `tokenizer.chat_template`"
    )]
    NoTemplate,
    /// Rendering the chat template failed.
    #[error("chat template error{}: {message}", line.map(|l| format!(" at line {l}")).unwrap_or_default())]
    Template {
        /// The template line, when known.
        line: Option<usize>,
        /// What failed (includes `raise_exception` messages).
        message: String,
    },
}
