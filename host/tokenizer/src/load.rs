//! Loading a tokenizer from `tokenizer.json` or a GGUF file, and the encode/decode calls.

use std::path::Path;

use serde_json::{Value, json};
use tokenizers::Tokenizer;

use crate::bpe::ByteLevelBpe;
use crate::decode::ByteLevelDecoder;
use crate::file::{MAX_TOKENIZER_FILE_BYTES, read_capped, read_capped_text};
use crate::gguf::{GgufMetadata, GgufValue};
use crate::template::{ChatOptions, ChatTemplate};
use crate::{MAX_DECODE_TOKENS, MAX_TEXT_BYTES, TokenizerError};

/// Special token ids and their texts.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpecialTokens {
    /// Beginning of sequence.
    pub bos: Option<u32>,
    /// End of sequence.
    pub eos: Option<u32>,
    /// Padding.
    pub pad: Option<u32>,
    /// Unknown.
    pub unk: Option<u32>,
}

/// A loaded tokenizer with its chat template. Cheap to share behind an `Arc`.
pub struct HostTokenizer {
    inner: Tokenizer,
    /// The direct encoder, for tokenizers built from GGUF (byte-level BPE without a
    /// post-processor); `None` uses `inner`.
    fast: Option<ByteLevelBpe>,
    /// The direct decoder, for tokenizers whose decoder is `ByteLevel`; `None` uses `inner`.
    byte_decoder: Option<ByteLevelDecoder>,
    template: Option<ChatTemplate>,
    special: SpecialTokens,
    source: String,
    /// `inner.get_vocab_size(true)`, which looks up every added token on each call.
    vocab_size: usize,
}

impl std::fmt::Debug for HostTokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HostTokenizer")
            .field("source", &self.source)
            .field("special", &self.special)
            .finish_non_exhaustive()
    }
}

fn tk(e: impl std::fmt::Display) -> TokenizerError {
    TokenizerError::Tokenizers(e.to_string())
}

/// The chat template in `dir/chat_template.jinja`, else `dir/chat_template.json`'s
/// `chat_template`, if either exists.
fn side_template(dir: &Path) -> Result<Option<String>, TokenizerError> {
    let read = |p: &Path| {
        read_capped_text(p, MAX_TOKENIZER_FILE_BYTES).map_err(|e| TokenizerError::Io {
            path: p.display().to_string(),
            source: e,
        })
    };
    let jinja = dir.join("chat_template.jinja");
    if jinja.is_file() {
        return read(&jinja).map(Some);
    }
    let json_file = dir.join("chat_template.json");
    if !json_file.is_file() {
        return Ok(None);
    }
    let v: Value =
        serde_json::from_str(&read(&json_file)?).map_err(|e| TokenizerError::Format {
            path: json_file.display().to_string(),
            message: e.to_string(),
        })?;
    match &v["chat_template"] {
        Value::String(t) => Ok(Some(t.clone())),
        _ => Err(TokenizerError::Format {
            path: json_file.display().to_string(),
            message: "has no `chat_template` string".into(),
        }),
    }
}

impl HostTokenizer {
    /// Load from a `.gguf` file, a `tokenizer.json`, or a directory holding `tokenizer.json`
    /// (and optionally `tokenizer_config.json`).
    pub fn load(path: &Path) -> Result<Self, TokenizerError> {
        if path.is_dir() {
            return Self::from_hf_files(
                &path.join("tokenizer.json"),
                Some(&path.join("tokenizer_config.json")),
            );
        }
        if path.extension().is_some_and(|e| e == "gguf") {
            return Self::from_gguf(path);
        }
        let config = path.with_file_name("tokenizer_config.json");
        Self::from_hf_files(path, Some(&config))
    }

    /// Load from a Hugging Face `tokenizer.json`; the chat template and special tokens come
    /// from `tokenizer_config.json` when it exists.
    pub fn from_hf_files(
        tokenizer_json: &Path,
        config: Option<&Path>,
    ) -> Result<Self, TokenizerError> {
        let bytes = read_capped(tokenizer_json, MAX_TOKENIZER_FILE_BYTES).map_err(|e| {
            TokenizerError::Io {
                path: tokenizer_json.display().to_string(),
                source: e,
            }
        })?;
        let inner = Tokenizer::from_bytes(&bytes).map_err(|e| TokenizerError::Format {
            path: tokenizer_json.display().to_string(),
            message: e.to_string(),
        })?;
        let config: Value = match config.filter(|p| p.is_file()) {
            Some(p) => {
                let text = read_capped_text(p, MAX_TOKENIZER_FILE_BYTES).map_err(|e| {
                    TokenizerError::Io {
                        path: p.display().to_string(),
                        source: e,
                    }
                })?;
                serde_json::from_str(&text).map_err(|e| TokenizerError::Format {
                    path: p.display().to_string(),
                    message: e.to_string(),
                })?
            }
            None => json!({}),
        };
        let id_of = |key: &str| -> Option<u32> {
            let text = match &config[key] {
                Value::String(s) => s.clone(),
                Value::Object(o) => o.get("content")?.as_str()?.to_string(),
                _ => return None,
            };
            inner.token_to_id(&text)
        };
        let special = SpecialTokens {
            bos: id_of("bos_token"),
            eos: id_of("eos_token"),
            pad: id_of("pad_token"),
            unk: id_of("unk_token"),
        };
        let template = match &config["chat_template"] {
            Value::String(t) => Some(t.clone()),
            // A list of named templates: use `default`.
            Value::Array(list) => list
                .iter()
                .find(|t| t["name"] == "default")
                .and_then(|t| t["template"].as_str())
                .map(str::to_string),
            _ => None,
        };
        // transformers 5 saves the template beside the config (`chat_template.jinja`), and
        // vision-language models ship their processor's (`chat_template.json`).
        let template = match template {
            Some(t) => Some(t),
            None => side_template(tokenizer_json.parent().unwrap_or(Path::new(".")))?,
        };
        Self::assemble(
            inner,
            None,
            special,
            template,
            tokenizer_json.display().to_string(),
        )
    }

    /// Load from a GGUF file's metadata (`tokenizer.ggml.model = "gpt2"`: byte-level BPE).
    pub fn from_gguf(path: &Path) -> Result<Self, TokenizerError> {
        let meta = GgufMetadata::read(path)?;
        let bad = |message: String| TokenizerError::Format {
            path: path.display().to_string(),
            message,
        };
        let model = meta
            .get("tokenizer.ggml.model")
            .and_then(GgufValue::as_str)
            .unwrap_or("");
        if model != "gpt2" {
            return Err(bad(format!(
                "tokenizer.ggml.model is `{model}`; only byte-level BPE (`gpt2`) GGUF tokenizers are supported, use the model's tokenizer.json instead"
            )));
        }
        let strings = |key: &str| -> Result<Vec<String>, TokenizerError> {
            match meta.get(key) {
                Some(GgufValue::Array(v)) => v
                    .iter()
                    .map(|x| {
                        x.as_str()
                            .map(str::to_string)
                            .ok_or_else(|| bad(format!("{key} holds a non-string")))
                    })
                    .collect(),
                _ => Err(bad(format!("{key} is missing"))),
            }
        };
        let tokens = strings("tokenizer.ggml.tokens")?;
        let merges = strings("tokenizer.ggml.merges")?;
        let types: Vec<i64> = match meta.get("tokenizer.ggml.token_type") {
            Some(GgufValue::Array(v)) => v
                .iter()
                .map(|x| match x {
                    GgufValue::Int(i) => *i,
                    GgufValue::Uint(u) => *u as i64,
                    _ => 1,
                })
                .collect(),
            _ => vec![1; tokens.len()],
        };
        let id = |key: &str| {
            meta.get(key)
                .and_then(GgufValue::as_u32)
                .filter(|&i| (i as usize) < tokens.len())
        };
        let special = SpecialTokens {
            bos: id("tokenizer.ggml.bos_token_id"),
            eos: id("tokenizer.ggml.eos_token_id"),
            pad: id("tokenizer.ggml.padding_token_id"),
            unk: id("tokenizer.ggml.unknown_token_id"),
        };
        let add_bos = matches!(
            meta.get("tokenizer.ggml.add_bos_token"),
            Some(GgufValue::Bool(true))
        );
        let vocab: serde_json::Map<String, Value> = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| (t.clone(), json!(i)))
            .collect();
        // Control (3) and user-defined (4) tokens are added tokens; control ones are special.
        let added: Vec<Value> = types
            .iter()
            .enumerate()
            .filter(|(_, t)| **t == 3 || **t == 4)
            .map(|(i, t)| {
                json!({"id": i, "content": tokens[i], "single_word": false, "lstrip": false,
                       "rstrip": false, "normalized": false, "special": *t == 3})
            })
            .collect();
        let post_processor = match (add_bos, special.bos) {
            (true, Some(b)) => json!({
                "type": "TemplateProcessing",
                "single": [{"SpecialToken": {"id": tokens[b as usize], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}}],
                "pair": [{"SpecialToken": {"id": tokens[b as usize], "type_id": 0}}, {"Sequence": {"id": "A", "type_id": 0}},
                         {"SpecialToken": {"id": tokens[b as usize], "type_id": 1}}, {"Sequence": {"id": "B", "type_id": 1}}],
                "special_tokens": {tokens[b as usize].clone(): {"id": tokens[b as usize], "ids": [b], "tokens": [tokens[b as usize]]}}
            }),
            _ => Value::Null,
        };
        let spec = json!({
            "version": "1.0",
            "truncation": null,
            "padding": null,
            "added_tokens": added,
            "normalizer": null,
            "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": true},
            "post_processor": post_processor,
            "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
            "model": {
                "type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
                "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
                "vocab": vocab,
                "merges": merges,
            }
        });
        let inner: Tokenizer = spec
            .to_string()
            .parse()
            .map_err(|e| bad(format!("building the tokenizer: {e}")))?;
        let added_tokens: Vec<(String, u32)> = types
            .iter()
            .enumerate()
            .filter(|(_, t)| **t == 3 || **t == 4)
            .map(|(i, _)| (tokens[i].clone(), i as u32))
            .collect();
        // The direct encoder reproduces this exact pipeline; a bos post-processor is rare
        // enough to leave to `inner`.
        let fast = if add_bos {
            None
        } else {
            ByteLevelBpe::new(&tokens, &merges, added_tokens)
        };
        let template = meta
            .get("tokenizer.chat_template")
            .and_then(GgufValue::as_str)
            .map(str::to_string);
        Self::assemble(inner, fast, special, template, path.display().to_string())
    }

    fn assemble(
        inner: Tokenizer,
        fast: Option<ByteLevelBpe>,
        special: SpecialTokens,
        template: Option<String>,
        source: String,
    ) -> Result<Self, TokenizerError> {
        let byte_decoder = ByteLevelDecoder::new(&inner);
        let vocab_size = inner.get_vocab_size(true);
        let tok = HostTokenizer {
            vocab_size,
            inner,
            fast,
            byte_decoder,
            template: None,
            special,
            source,
        };
        match template {
            Some(t) => tok.with_chat_template(&t),
            None => Ok(tok),
        }
    }

    /// The same tokenizer with `template` (Jinja text) as its chat template instead of the
    /// one it was loaded with, e.g. a model's template on a tokenizer that shares its
    /// vocabulary, or a tool-calling template for a test.
    pub fn with_chat_template(mut self, template: &str) -> Result<Self, TokenizerError> {
        let text_of = |id: Option<u32>| id.and_then(|i| self.inner.id_to_token(i));
        let s = &self.special;
        self.template = Some(ChatTemplate::new(
            template,
            [
                ("bos_token", text_of(s.bos)),
                ("eos_token", text_of(s.eos)),
                ("pad_token", text_of(s.pad)),
                ("unk_token", text_of(s.unk)),
            ],
        )?);
        Ok(self)
    }

    /// The same tokenizer with `tokens` added as special tokens (ids after the vocabulary, in
    /// order, as `transformers`' `add_special_tokens` assigns them; tokens already there keep
    /// their ids), e.g. a vision-language model's image tokens on a text tokenizer for a test.
    /// Encoding then goes through the `tokenizers` pipeline.
    pub fn with_added_special_tokens(mut self, tokens: &[&str]) -> Result<Self, TokenizerError> {
        let added: Vec<tokenizers::AddedToken> = tokens
            .iter()
            .map(|t| tokenizers::AddedToken::from(t.to_string(), true))
            .collect();
        self.inner.add_special_tokens(added).map_err(tk)?;
        self.fast = None;
        self.byte_decoder = ByteLevelDecoder::new(&self.inner);
        self.vocab_size = self.inner.get_vocab_size(true);
        Ok(self)
    }

    /// Where it was loaded from.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The special token ids.
    pub fn special(&self) -> &SpecialTokens {
        &self.special
    }

    /// Number of tokens in the vocabulary, added tokens included.
    pub fn vocab_size(&self) -> usize {
        self.vocab_size
    }

    /// Text to ids; `add_special_tokens` adds what the post-processor adds (e.g. bos).
    pub fn encode(&self, text: &str, add_special_tokens: bool) -> Result<Vec<u32>, TokenizerError> {
        if text.len() > MAX_TEXT_BYTES {
            return Err(TokenizerError::Invalid(format!(
                "text of {} bytes is longer than the {MAX_TEXT_BYTES} byte limit",
                text.len()
            )));
        }
        if let Some(fast) = &self.fast {
            return Ok(fast.encode(text));
        }
        self.encode_reference(text, add_special_tokens)
    }

    /// Encode with the `tokenizers` crate pipeline, bypassing the direct encoder (for
    /// differential tests).
    #[doc(hidden)]
    pub fn encode_reference(
        &self,
        text: &str,
        add_special_tokens: bool,
    ) -> Result<Vec<u32>, TokenizerError> {
        let enc = self
            .inner
            .encode_fast(text, add_special_tokens)
            .map_err(tk)?;
        Ok(enc.get_ids().to_vec())
    }

    /// Ids to text; `skip_special_tokens` drops special tokens. Unknown ids are an error.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, TokenizerError> {
        if ids.len() > MAX_DECODE_TOKENS {
            return Err(TokenizerError::Invalid(format!(
                "{} ids is more than the {MAX_DECODE_TOKENS} id limit",
                ids.len()
            )));
        }
        let size = self.vocab_size() as u32;
        if let Some(bad) = ids.iter().find(|&&i| i >= size) {
            return Err(TokenizerError::Invalid(format!(
                "token id {bad} is outside the vocabulary (size {size})"
            )));
        }
        if let Some(d) = &self.byte_decoder {
            return Ok(d.decode(ids, skip_special_tokens));
        }
        self.decode_reference(ids, skip_special_tokens)
    }

    /// Whether `decode` takes the direct byte-level table (for tests).
    #[doc(hidden)]
    pub fn has_direct_decoder(&self) -> bool {
        self.byte_decoder.is_some()
    }

    /// Decode with the `tokenizers` crate pipeline, bypassing the direct decoder (for
    /// differential tests). No limit checks.
    #[doc(hidden)]
    pub fn decode_reference(
        &self,
        ids: &[u32],
        skip_special_tokens: bool,
    ) -> Result<String, TokenizerError> {
        self.inner.decode(ids, skip_special_tokens).map_err(tk)
    }

    /// Render `messages` (a JSON array) with the chat template.
    pub fn render_chat_template(
        &self,
        messages: &Value,
        options: &ChatOptions,
    ) -> Result<String, TokenizerError> {
        let template = self.template.as_ref().ok_or(TokenizerError::NoTemplate)?;
        template.render(messages, options)
    }

    /// Render and tokenize without adding special tokens (`apply_chat_template(tokenize=True)`).
    pub fn apply_chat_template(
        &self,
        messages: &Value,
        options: &ChatOptions,
    ) -> Result<Vec<u32>, TokenizerError> {
        let text = self.render_chat_template(messages, options)?;
        self.encode(&text, false)
    }
}
