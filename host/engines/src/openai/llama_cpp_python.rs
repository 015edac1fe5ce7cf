//! llama-cpp-python's server for the `openai` backend: it takes only text prompts and reports
//! each output token as its decoded text, so ids travel through its tokenizer, checked.
//!
//! * Prompt: rendered by the host's [`Detokenizer`], then checked with the server's
//!   `/extras/tokenize` to give back exactly the prompt ids (else an invalid-request error).
//! * Output: each piece is mapped to an id with `/extras/tokenize` (cached per piece). This is
//!   exact when the piece holds the token's whole bytes, which the `text_offset` step equal to
//!   the piece's length shows, because a byte-level BPE vocabulary gives each byte string one
//!   id. The ids are then checked with `/extras/detokenize` against the pieces. A token inside a
//!   character split across tokens, or a special token, decodes to an empty or partial piece;
//!   its id cannot be recovered and the answer is an error, never a guess. (Not detectable: a
//!   last token ending in part of a character, decoded to its complete prefix.)

use std::collections::HashMap;
use std::sync::Mutex;

use serde::{Deserialize, Serialize};

use super::{BACKEND, Detokenizer, unavailable};
use crate::EngineError;
use crate::http::HttpClient;

#[derive(Serialize)]
struct TokenizeBody<'a> {
    input: &'a str,
}

#[derive(Deserialize)]
struct TokenizeReply {
    tokens: Vec<u32>,
}

#[derive(Serialize)]
struct DetokenizeBody<'a> {
    tokens: &'a [u32],
}

#[derive(Deserialize)]
struct DetokenizeReply {
    text: String,
}

/// Carries token ids through a llama-cpp-python server's tokenizer.
#[derive(Default)]
pub(super) struct TextBridge {
    piece_ids: Mutex<HashMap<String, u32>>,
    bos_prefix: tokio::sync::OnceCell<Vec<u32>>,
}

impl TextBridge {
    /// The server's tokenization of `text`, without the BOS token it adds on its own.
    async fn tokenize(
        &self,
        http: &HttpClient,
        base: &str,
        text: &str,
    ) -> Result<Vec<u32>, EngineError> {
        let url = format!("{base}/extras/tokenize");
        let bos = self
            .bos_prefix
            .get_or_try_init(|| async {
                let reply: TokenizeReply =
                    http.post_json(&url, &TokenizeBody { input: "" }).await?;
                Ok::<_, EngineError>(reply.tokens)
            })
            .await?;
        let reply: TokenizeReply = http.post_json(&url, &TokenizeBody { input: text }).await?;
        let mut tokens = reply.tokens;
        if tokens.starts_with(bos) {
            tokens.drain(..bos.len());
        }
        Ok(tokens)
    }

    /// The prompt as text, checked to tokenize back to `ids` on the server.
    pub(super) async fn prompt(
        &self,
        http: &HttpClient,
        base: &str,
        detokenize: &Detokenizer,
        ids: &[u32],
    ) -> Result<String, EngineError> {
        let text = detokenize(ids).map_err(|m| EngineError::InvalidRequest {
            backend: BACKEND,
            message: format!("cannot render the prompt as text for llama-cpp-python: {m}"),
        })?;
        let back = self.tokenize(http, base, &text).await?;
        if back != ids {
            let at = back.iter().zip(ids).take_while(|(a, b)| a == b).count();
            return Err(EngineError::InvalidRequest {
                backend: BACKEND,
                message: format!(
                    "the prompt's text tokenizes to other ids on {base} (first difference at \
                     position {at}: sent {:?}, server has {:?}); llama-cpp-python takes only text \
                     prompts, so use a server that takes token ids (vLLM, SGLang) for this prompt",
                    ids.get(at),
                    back.get(at)
                ),
            });
        }
        Ok(text)
    }

    /// The exact ids of the decoded output `pieces` (see the module doc).
    pub(super) async fn output_ids(
        &self,
        http: &HttpClient,
        base: &str,
        pieces: &[String],
        offsets: &[u64],
    ) -> Result<Vec<u32>, EngineError> {
        let mut ids = Vec::with_capacity(pieces.len());
        for (i, piece) in pieces.iter().enumerate() {
            let whole = match offsets.get(i + 1).zip(offsets.get(i)) {
                Some((next, this)) => next.checked_sub(*this) == Some(piece.chars().count() as u64),
                None => true,
            };
            if piece.is_empty() || !whole {
                return Err(unavailable(
                    base,
                    format!(
                        "output token {i} came back as {piece:?}, part of a character split \
                         across tokens or a special token; llama-cpp-python cannot report its \
                         id. Use a server that returns token ids (vLLM, SGLang, llama.cpp's \
                         llama-server)"
                    ),
                ));
            }
            let cached = self.cache().get(piece).copied();
            let id = match cached {
                Some(id) => id,
                None => {
                    let tokens = self.tokenize(http, base, piece).await?;
                    let [id] = tokens[..] else {
                        return Err(unavailable(
                            base,
                            format!(
                                "output token {i} ({piece:?}) tokenizes to {tokens:?}, not one \
                                 id; its id cannot be recovered exactly from llama-cpp-python"
                            ),
                        ));
                    };
                    self.cache().insert(piece.clone(), id);
                    id
                }
            };
            ids.push(id);
        }
        if !ids.is_empty() {
            let url = format!("{base}/extras/detokenize");
            let reply: DetokenizeReply = http
                .post_json(&url, &DetokenizeBody { tokens: &ids })
                .await?;
            let joined = pieces.concat();
            if reply.text.trim_start() != joined.trim_start() {
                return Err(unavailable(
                    base,
                    format!(
                        "the recovered ids {ids:?} decode to {:?}, not the reported pieces \
                         {joined:?}",
                        reply.text
                    ),
                ));
            }
        }
        Ok(ids)
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashMap<String, u32>> {
        // A poisoned lock only means another request panicked mid-insert; the map is still a
        // valid cache.
        self.piece_ids.lock().unwrap_or_else(|p| p.into_inner())
    }
}
