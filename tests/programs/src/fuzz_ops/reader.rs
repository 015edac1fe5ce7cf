//! Reading the program: a cursor over its bytes and the argument readers (see the encoding in
//! `bin/fuzz_ops.rs`).

use rollbox_sdk::tensor::TensorData;
use rollbox_sdk::tokenizer::ChatOptions;
use rollbox_sdk::{GenConfig, ModelRequest};

use crate::tables::*;

/// `table[b % len]`.
pub(crate) fn at<T: Copy>(table: &[T], b: u8) -> T {
    table[usize::from(b) % table.len()]
}

/// Cut `s` to at most `cap` bytes on a char boundary.
pub(crate) fn cut(mut s: String, cap: usize) -> String {
    if s.len() > cap {
        let mut end = cap;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// xorshift32, for the `random` fill.
pub(crate) struct XorShift(u32);

impl XorShift {
    pub(crate) fn step(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        x
    }

    pub(crate) fn wide(&mut self) -> u64 {
        (u64::from(self.step()) << 32) | u64::from(self.step())
    }
}

/// Reads the program; past the end every byte is 0.
pub(crate) struct Cursor<'a> {
    pub(crate) bytes: &'a [u8],
    pub(crate) pos: usize,
}

impl Cursor<'_> {
    pub(crate) fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    pub(crate) fn u8(&mut self) -> u8 {
        let b = self.bytes.get(self.pos).copied().unwrap_or(0);
        self.pos = self.pos.saturating_add(1);
        b
    }

    pub(crate) fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    pub(crate) fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    pub(crate) fn u64(&mut self) -> u64 {
        let low = u64::from(self.u32());
        let high = u64::from(self.u32());
        (high << 32) | low
    }

    pub(crate) fn dim(&mut self) -> u32 {
        match self.u8() {
            b @ 0xF0.. => DIMS[usize::from(b - 0xF0)],
            b => u32::from(b % 5),
        }
    }

    pub(crate) fn rank(&mut self) -> usize {
        match self.u8() {
            b @ 0xF8.. => RANKS[usize::from(b - 0xF8)],
            b => usize::from(b % 5),
        }
    }

    pub(crate) fn count(&mut self) -> usize {
        match self.u8() {
            b @ 0xF8.. => COUNTS[usize::from(b - 0xF8)],
            b => usize::from(b % 9),
        }
    }

    pub(crate) fn udim(&mut self) -> u32 {
        match self.u8() {
            b @ 0xF8.. => UDIMS[usize::from(b - 0xF8)],
            b => u32::from(b % 5),
        }
    }

    pub(crate) fn tok(&mut self) -> u32 {
        match self.u8() {
            b @ 0xF8.. => TOKS[usize::from(b - 0xF8)],
            b => u32::from(b),
        }
    }

    pub(crate) fn key(&mut self) -> String {
        match self.u8() % 16 {
            10 => "k".repeat(4096),
            k => KEYS[usize::from(k)].to_string(),
        }
    }

    pub(crate) fn ids(&mut self) -> Vec<u32> {
        let n = self.count();
        match self.u8() % 3 {
            0 => (1..=n).map(|i| i as u32).collect(),
            1 => vec![self.tok(); n],
            _ => (0..n).map(|_| self.tok()).collect(),
        }
    }

    pub(crate) fn text(&mut self, cap: usize) -> String {
        let s = match self.u8() % 8 {
            0 => String::new(),
            1 => {
                let n = self.u8();
                (0..n).map(|_| char::from(32 + self.u8() % 95)).collect()
            }
            2 => {
                let ch = at(&RUN_CHARS, self.u8());
                let n = at(&RUN_LENS, self.u8()).min(cap / ch.len_utf8());
                std::iter::repeat_n(ch, n).collect()
            }
            3 => {
                let token = at(&SPECIALS, self.u8());
                let times = usize::from(self.u8()).min(cap / token.len());
                token.repeat(times)
            }
            4 => {
                let n = self.u8();
                (0..n).map(|_| at(&ODD_CHARS, self.u8())).collect()
            }
            5 => at(&JSONS, self.u8()).to_string(),
            6 => {
                let n = self.u8();
                let raw: Vec<u8> = (0..n).map(|_| self.u8()).collect();
                String::from_utf8_lossy(&raw).into_owned()
            }
            _ => {
                let words = "hello world ";
                let times = at(&RUN_LENS, self.u8()) / words.len();
                words.repeat(times.min(cap / words.len()))
            }
        };
        cut(s, cap)
    }

    pub(crate) fn messages(&mut self) -> String {
        match self.u8() % 16 {
            k @ 0..=11 => MESSAGES[usize::from(k)].to_string(),
            12 => {
                let n = self.count();
                let mut left = MAX_TOKENIZER_TEXT_BYTES;
                let mut list = Vec::with_capacity(n);
                for _ in 0..n {
                    let role = at(&ROLES, self.u8());
                    let content = self.text(left);
                    left -= content.len();
                    list.push(serde_json::json!({"role": role, "content": content}));
                }
                serde_json::Value::Array(list).to_string()
            }
            13 => {
                let depth = at(&DEPTHS, self.u8());
                format!("{}{}", "[".repeat(depth), "]".repeat(depth))
            }
            14 => self.text(MAX_TOKENIZER_TEXT_BYTES),
            _ => {
                let n = self.count();
                let mut list = Vec::with_capacity(n);
                for _ in 0..n {
                    let role = serde_json::Value::from(at(&ROLES, self.u8())).to_string();
                    let content = at(&CONTENTS, self.u8());
                    list.push(format!("{{\"role\":{role},\"content\":{content}}}"));
                }
                format!("[{}]", list.join(","))
            }
        }
    }

    pub(crate) fn options(&mut self) -> ChatOptions {
        let flags = self.u8();
        let tools = match self.u8() % 6 {
            0 => None,
            k => Some(TOOLS[usize::from(k) - 1].to_string()),
        };
        let extra = match self.u8() % 8 {
            0 => None,
            k => Some(EXTRAS[usize::from(k) - 1].to_string()),
        };
        ChatOptions {
            add_generation_prompt: flags & 1 == 0,
            tools,
            extra,
        }
    }

    pub(crate) fn request(&mut self) -> ModelRequest {
        let rid = match self.u8() % 6 {
            0 => String::new(),
            1 => "r".to_string(),
            2 => "rid-ü".to_string(),
            3 => "r".repeat(1000),
            4 => "\u{0}".to_string(),
            _ => "same".to_string(),
        };
        let input_ids = self.ids();
        let n_samples = at(&N_SAMPLES, self.u8());
        let max_new_tokens = at(&MAX_NEW, self.u8());
        let min_new_tokens = at(&MIN_NEW, self.u8());
        let max_tokens = at(&MAX_TOKENS, self.u8());
        let temperature = at(&F32S, self.u8());
        let top_p = at(&F32S, self.u8());
        let top_k = at(&TOP_K, self.u8());
        let frequency_penalty = at(&F32S, self.u8());
        let seed = match self.u8() % 4 {
            0 => None,
            1 => Some(0),
            2 => Some(u64::MAX),
            _ => Some(self.u64()),
        };
        let flags = self.u8();
        let stop_token_ids = self.ids();
        let stops = self.count();
        let stop = (0..stops)
            .map(|_| self.text(MAX_SHORT_TEXT_BYTES))
            .collect();
        let images = self.u8() % 3;
        let image_data = (0..images)
            .map(|_| self.text(MAX_SHORT_TEXT_BYTES))
            .collect();
        let metadata = at(&JSONS, self.u8()).to_string();
        ModelRequest {
            rid,
            input_ids,
            gconfig: GenConfig {
                n_samples,
                max_new_tokens,
                min_new_tokens,
                max_tokens,
                greedy: flags & 1 != 0,
                temperature,
                top_p,
                top_k,
                stop_token_ids,
                stop,
                ignore_eos: flags & 2 != 0,
                skip_special_tokens: flags & 4 == 0,
                frequency_penalty,
                seed,
                exclude_default_stop_ids: flags & 8 != 0,
            },
            image_data,
            metadata,
        }
    }
}

/// Element values for CREATE: zeros, a ramp, edge values cycled, or xorshift bits.
pub(crate) struct Fill {
    n: usize,
    mode: u8,
    rng: XorShift,
}

impl Fill {
    pub(crate) fn of<T: Copy + Default>(
        &mut self,
        edge: &[T],
        ramp: fn(usize) -> T,
        random: fn(&mut XorShift) -> T,
    ) -> Vec<T> {
        let mut out = Vec::with_capacity(self.n);
        for i in 0..self.n {
            out.push(match self.mode {
                0 => T::default(),
                1 => ramp(i),
                2 => edge[i % edge.len()],
                _ => random(&mut self.rng),
            });
        }
        out
    }
}

/// `n` elements of dtype `dtype` (index into i32 i64 f32 bf16 bool u8), filled by `mode`.
pub(crate) fn fill_data(dtype: u8, n: usize, mode: u8, seed: u32) -> TensorData {
    let mut v = Fill {
        n,
        mode,
        rng: XorShift(seed | 1),
    };
    match dtype {
        0 => TensorData::I32(v.of(&EDGE_I32, |i| i as i32, |r| r.step() as i32)),
        1 => TensorData::I64(v.of(&EDGE_I64, |i| i as i64, |r| r.wide() as i64)),
        2 => TensorData::F32(v.of(&F32S, |i| i as f32, |r| f32::from_bits(r.step()))),
        3 => TensorData::Bf16(v.of(&EDGE_BF16, |i| i as u16, |r| r.step() as u16)),
        4 => TensorData::Bool(v.of(&[false, true], |i| i & 1 == 1, |r| r.step() & 1 == 1)),
        _ => TensorData::U8(v.of(&EDGE_U8, |i| i as u8, |r| r.step() as u8)),
    }
}
