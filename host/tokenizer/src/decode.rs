//! Direct decoding for byte-level BPE tokenizers: every id's bytes are computed once at load,
//! so decoding a completion is a table walk plus one UTF-8 check.
//!
//! It reproduces `tokenizers`' `TokenizerImpl::decode` with a `ByteLevel` decoder exactly:
//! ids without a token are dropped, special added tokens are dropped when asked, each token's
//! chars map back to bytes through GPT-2's byte table (a token with a char outside the table
//! contributes its UTF-8 bytes unchanged), and the bytes are read as lossy UTF-8.

use tokenizers::Tokenizer;

use crate::bpe::byte_to_char;

/// Per-id byte strings and special flags.
pub(crate) struct ByteLevelDecoder {
    bytes: Vec<u8>,
    /// `bytes[offsets[id]..offsets[id + 1]]` is the text of `id`.
    offsets: Vec<u32>,
    special: Vec<bool>,
}

impl ByteLevelDecoder {
    /// The table for `tokenizer`, or `None` when its decoder is not exactly `ByteLevel` (then
    /// the `tokenizers` pipeline decodes).
    pub(crate) fn new(tokenizer: &Tokenizer) -> Option<Self> {
        if !matches!(
            tokenizer.get_decoder(),
            Some(tokenizers::decoders::DecoderWrapper::ByteLevel(_))
        ) {
            return None;
        }
        let mut char_to_byte = std::collections::HashMap::with_capacity(256);
        for (b, c) in byte_to_char().into_iter().enumerate() {
            char_to_byte.insert(c, b as u8);
        }
        let size = tokenizer.get_vocab_size(true);
        let added = tokenizer.get_added_vocabulary();
        let mut bytes = Vec::new();
        let mut offsets = Vec::with_capacity(size + 1);
        let mut special = Vec::with_capacity(size);
        offsets.push(0);
        for id in 0..size as u32 {
            let token = tokenizer.id_to_token(id);
            if let Some(t) = &token {
                let mapped: Option<Vec<u8>> =
                    t.chars().map(|c| char_to_byte.get(&c).copied()).collect();
                match mapped {
                    Some(m) => bytes.extend_from_slice(&m),
                    None => bytes.extend_from_slice(t.as_bytes()),
                }
            }
            special.push(token.as_deref().is_some_and(|t| added.is_special_token(t)));
            offsets.push(u32::try_from(bytes.len()).ok()?);
        }
        Some(ByteLevelDecoder {
            bytes,
            offsets,
            special,
        })
    }

    /// Decode ids already checked to be inside the vocabulary.
    pub(crate) fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> String {
        let mut out = Vec::with_capacity(ids.len() * 4);
        for &id in ids {
            let id = id as usize;
            if skip_special_tokens && self.special[id] {
                continue;
            }
            let (start, end) = (self.offsets[id] as usize, self.offsets[id + 1] as usize);
            out.extend_from_slice(&self.bytes[start..end]);
        }
        match String::from_utf8(out) {
            Ok(s) => s,
            Err(e) => String::from_utf8_lossy(e.as_bytes()).into_owned(),
        }
    }
}
