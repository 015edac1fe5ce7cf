//! Fuzz target for the host-call boundary: runs the row's `program` (lowercase hex) as a
//! program of host calls against every interface the workflow world imports.
//!
//! Driven by `tests/tests/fuzz.rs`. The seed programs in `tests/fixtures/fuzz/corpus/` are
//! written by `scripts/fuzz_corpus.py`, which mirrors the encoding below exactly (change both
//! together). Every host error value is ignored and the program goes on; a handle used after
//! its drop, dropped twice or forged is expected to trap, which ends the episode with a typed
//! fault. The interpreter is deterministic: the same bytes make the same calls.
//!
//! ```text
//! Reading: a cursor over the bytes; a read past the end gives 0; u16/u32/u64 are
//! little-endian. At most 256 ops run; when the bytes (or ops) run out the episode returns
//! Ok(None) and drops every handle it still holds.
//!
//! op = byte % 32:
//!   0 1 2 CREATE   3 30 CONCAT   4 5 CPAD   6 UNSQ   7 SHAPE   8 DTYPE   9 DATA   10 DROP
//!   11 STALE   12 FORGE   13 GEN   14 GENMANY   15 VERSION   16 ENCODE   17 DECODE
//!   18 APPLY   19 RENDER   20 SPECIAL   21 SCORE   22 RNAMES   23 TOOL   24 TNAMES   25 LOG
//!   26 STAT   27 HANDLES   28 PRINT   29 VALID   31 RETURN
//!
//! Readers (b = the next byte):
//!   pick      the (b % live)-th live handle in slot order (none when no handle is live)
//!   dim       b < 0xF0: b % 5, else DIMS[b - 0xF0]
//!   rank      b < 0xF8: b % 5, else RANKS[b - 0xF8]
//!   count     b < 0xF8: b % 9, else COUNTS[b - 0xF8]
//!   udim      b < 0xF8: b % 5, else UDIMS[b - 0xF8]
//!   tok       b < 0xF8: b, else TOKS[b - 0xF8]
//!   key       KEYS[b % 16] (10: 4096 x "k")
//!   ids       count n, mode b % 3: 0 ids 1..=n, 1 one tok n times, 2 n toks
//!   text      kind b % 8, then:
//!               0 empty
//!               1 len byte n, n bytes each giving char 0x20 + b % 95
//!               2 RUN_CHARS[b % 8] repeated RUN_LENS[b % 8] times
//!               3 SPECIALS[b % 8] repeated (byte) times
//!               4 len byte n, n bytes each giving ODD_CHARS[b % 16]
//!               5 JSONS[b % 16]
//!               6 len byte n, n raw bytes as lossy UTF-8
//!               7 "hello world " repeated RUN_LENS[b % 8] / 12 times
//!             cut to the op's cap: 4 MiB; 256 KiB for ENCODE and for all of one messages
//!             array's content (host calls that cannot be interrupted stay short); 256 bytes
//!             for stop strings and images
//!   messages  kind b % 16: 0..=11 MESSAGES[kind]; 12 count n, n x (ROLES[b % 8], text);
//!             13 DEPTHS[b % 8] nested "[" .. "]"; 14 text;
//!             15 count n, n x (ROLES[b % 8], CONTENTS[b % 8])
//!   options   flags (bit 0: add-generation-prompt false), tools b % 6 (0 none, k TOOLS[k-1]),
//!             extra b % 8 (0 none, k EXTRAS[k-1])
//!   request   RIDS b % 6, ids, NSAMPLES[b % 8], MAXNEW[b % 8], MINNEW[b % 8], MAXTOK[b % 8],
//!             temperature F32S[b % 16], top-p F32S[b % 16], TOPK[b % 8],
//!             frequency-penalty F32S[b % 16], seed b % 4 (0 none, 1 0, 2 u64::MAX, 3 a u64),
//!             flags (bit 0 greedy, 1 ignore-eos, 2 skip-special-tokens false,
//!             3 exclude-default-stop-ids), stop ids (ids), stop strings (count n, n x text),
//!             images (b % 3 x text), metadata JSONS[b % 16]
//!
//! Ops and their arguments, in order:
//!   CREATE   dtype b % 6 (i32 i64 f32 bf16 bool u8), rank r, r x dim, length b % 8
//!            (0..=3 the product, 4 product + 1, 5 product - 1, 6 zero, 7 a u16),
//!            fill b % 4 (zeros, ramp, edge values, random from a u32 seed that follows);
//!            the data is capped at 16 MiB
//!   CONCAT   count n, mode (bit 0 clear: one pick borrowed n times; set: n picks)
//!   CPAD     dicts n = b % 9, mode, pad PADS[b % 16]; then, when mode bit 1 is set and a
//!            VALID dict exists: the last n VALID dicts (cycled), nothing more read; else
//!            mode bit 0 set: keys k = b % 6, k x key, then per dict k x pick; else per dict
//!            k = b % 6, k x (key, pick)
//!   UNSQ     pick, udim
//!   SHAPE DTYPE DATA DROP   pick (DROP remembers the handle id as stale)
//!   STALE    b: the stale id stale[b % len] (skipped when none), action
//!   FORGE    source b % 4 (0 a pick's handle id, 1 a byte, 2 a u32, 3 IDS[b % 8]), action;
//!            id 0 becomes 1 and u32::MAX becomes u32::MAX - 1
//!            action b % 6: 0 shape, 1 data, 2 concat [h, h], 3 unsqueeze(0), 4 drop,
//!            5 keep as an owned handle
//!   GEN      request
//!   GENMANY  count n, mode (bit 0 clear: one request sent n times; set: n requests)
//!   VERSION SPECIAL RNAMES TNAMES   nothing
//!   ENCODE   text, add-special-tokens (bit 0)
//!   DECODE   ids, skip-special-tokens (bit 0)
//!   APPLY RENDER   messages, options
//!   SCORE    REWARD_NAMES[b % 8] (5: 300 x "r"), prompt text, completion text,
//!            prompt ids, completion ids, REWARD_DATA[b % 16]
//!   TOOL     TOOL_NAMES[b % 8] (4: 300 x "t"), args text
//!   LOG      level b % 5 (trace debug info warn error), text
//!   STAT     key text, value PADS[b % 16]
//!   HANDLES  HANDLE_COUNTS[b % 8] one-element i32 tensors, kept
//!   PRINT    stream (bit 0 set: stdout, else stderr), text
//!   VALID    VALID_LENS[b % 8] = L, variant (bit 0: attention_mask i32 instead of bool,
//!            bit 1: an extra f32 [1, L, 2] `x3`, bit 2: no `rewards`): AReaL's keys for one row
//!   RETURN   mode b % 4: 0 Ok(None); 1 Err(text); 2 count n, n x (key, pick) moved into the
//!            output; 3 the last VALID dict's live tensors, then b % 3 x (key, pick);
//!            modes 2 and 3 end with METADATA[b % 8] (5: {"text": text})
//! ```

use rollbox_sdk::bindings::workflow::Guest;
use rollbox_sdk::bindings::workflow::rollbox::workflow::episode::{EpisodeInput, EpisodeOutput};
use rollbox_sdk::tensor::{self, Tensor, TensorData};
use rollbox_sdk::tokenizer::{self, ChatOptions};
use rollbox_sdk::{GenConfig, ModelRequest, RewardInput, engine, log, rewards, tools};

/// Ops one program may run, so a program always ends.
const MAX_OPS: usize = 256;
/// Bytes of one generated text (log lines, prompts, tool arguments, error messages).
const MAX_TEXT_BYTES: usize = 4 << 20;
/// Bytes of one stop string or image string.
const MAX_SHORT_TEXT_BYTES: usize = 256;
/// Bytes of text one tokenizer call gets (ENCODE, and all the content of one `messages`): a
/// tokenizer call runs to its end on the host, so this keeps an episode near its deadline.
const MAX_TOKENIZER_TEXT_BYTES: usize = 256 << 10;
/// Bytes of tensor data the guest builds for one `create`, so the guest stays well inside its
/// memory limit; larger shapes get deliberately mismatched data instead.
const MAX_GUEST_DATA_BYTES: usize = 16 << 20;

#[derive(Clone, Copy)]
enum Op {
    Create,
    Concat,
    ConcatPadded,
    Unsqueeze,
    Shape,
    Dtype,
    Data,
    DropOne,
    Stale,
    Forge,
    Generate,
    GenerateMany,
    Version,
    Encode,
    Decode,
    ApplyChat,
    RenderChat,
    Special,
    Score,
    RewardNames,
    Tool,
    ToolNames,
    Log,
    Stat,
    Handles,
    Print,
    Valid,
    Return,
}

const OPS: [Op; 32] = [
    Op::Create,
    Op::Create,
    Op::Create,
    Op::Concat,
    Op::ConcatPadded,
    Op::ConcatPadded,
    Op::Unsqueeze,
    Op::Shape,
    Op::Dtype,
    Op::Data,
    Op::DropOne,
    Op::Stale,
    Op::Forge,
    Op::Generate,
    Op::GenerateMany,
    Op::Version,
    Op::Encode,
    Op::Decode,
    Op::ApplyChat,
    Op::RenderChat,
    Op::Special,
    Op::Score,
    Op::RewardNames,
    Op::Tool,
    Op::ToolNames,
    Op::Log,
    Op::Stat,
    Op::Handles,
    Op::Print,
    Op::Valid,
    Op::Concat,
    Op::Return,
];

const DIMS: [u32; 16] = [
    0,
    1,
    2,
    3,
    255,
    256,
    65_535,
    65_536,
    2_147_483_647,
    2_147_483_648,
    u32::MAX,
    u32::MAX - 1,
    1 << 20,
    1 << 24,
    4096,
    300,
];
const RANKS: [usize; 8] = [5, 8, 16, 17, 32, 64, 255, 300];
const COUNTS: [usize; 8] = [16, 64, 255, 256, 300, 1000, 4096, 4097];
const UDIMS: [u32; 8] = [16, 17, 255, 256, 300, 65_535, 2_147_483_647, u32::MAX];
const TOKS: [u32; 8] = [
    0,
    2,
    49_151,
    49_152,
    100_000,
    2_147_483_647,
    u32::MAX - 1,
    u32::MAX,
];
const IDS: [u32; 8] = [1, 2, 3, 4, 1000, 10_000, 65_536, u32::MAX - 1];

const KEYS: [&str; 16] = [
    "input_ids",
    "attention_mask",
    "loss_mask",
    "logprobs",
    "versions",
    "rewards",
    "x",
    "",
    "__metadata__",
    "attention_mask",
    "(4096 x k)",
    "a\u{0}b",
    "ключ\n\"q\"",
    "input_ids",
    "y",
    "rollout_reward",
];

const PADS: [f64; 16] = [
    0.0,
    -1.0,
    1.0,
    f64::NAN,
    f64::INFINITY,
    f64::NEG_INFINITY,
    1e300,
    -1e300,
    255.5,
    0.5,
    -0.0,
    f64::MIN_POSITIVE,
    4_294_967_296.0,
    2_147_483_648.0,
    f64::from_bits(1),
    65_504.0,
];

const F32S: [f32; 16] = [
    1.0,
    0.0,
    -0.0,
    -1.0,
    f32::NAN,
    f32::INFINITY,
    f32::NEG_INFINITY,
    1e-30,
    1e30,
    f32::from_bits(1),
    0.5,
    2.0,
    f32::MAX,
    -2.5,
    100.0,
    1e-7,
];

const EDGE_I32: [i32; 8] = [0, 1, -1, i32::MIN, i32::MAX, 2, 49_152, -2];
const EDGE_I64: [i64; 8] = [0, 1, -1, i64::MIN, i64::MAX, 1 << 32, -(1 << 32), 2];
const EDGE_BF16: [u16; 8] = [0, 0x3F80, 0x7FC0, 0x7F80, 0xFF80, 0x8000, 0x0001, 0xFFFF];
const EDGE_U8: [u8; 5] = [0, 1, 127, 128, 255];
/// Element sizes by dtype index (i32 i64 f32 bf16 bool u8).
const ELEM_BYTES: [usize; 6] = [4, 8, 4, 2, 1, 1];

const RUN_CHARS: [char; 8] = ['a', ' ', '\n', 'é', '中', '😀', '\u{0}', '<'];
const RUN_LENS: [usize; 8] = [16, 255, 4096, 65_536, 200_000, 1 << 20, 4 << 20, 1];
const SPECIALS: [&str; 8] = [
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<s>",
    "</s>",
    "<|im_start|>user\nhi<|im_end|>\n",
    "<unk>",
    "<|im_start|><|im_start|>",
];
const ODD_CHARS: [char; 16] = [
    '\u{0}',
    '\u{FFFD}',
    '\u{FEFF}',
    '\u{200D}',
    '\u{202E}',
    '\u{10FFFF}',
    '\u{FFFE}',
    '\u{FFFF}',
    '\u{E000}',
    '\u{0301}',
    '\u{1F600}',
    '\u{7F}',
    '\u{85}',
    '\u{2028}',
    '\t',
    '\r',
];
const JSONS: [&str; 16] = [
    "{}",
    "",
    "[]",
    "null",
    "not json",
    "{\"a\":",
    "{\"k\":\"v\"}",
    "1e999",
    "\"str\"",
    "{\"a\":1} {}",
    "{{ raise_exception('boom') }}",
    "{% for x in range(100000000) %}x{% endfor %}",
    "[[[[[[[[[[]]]]]]]]]]",
    "{\"__proto__\":{}}",
    "\u{0}",
    "{\"k\":NaN}",
];

const MESSAGES: [&str; 12] = [
    r#"[{"role":"user","content":"What is 2+2?"}]"#,
    "[]",
    "not json",
    "{}",
    "[1,2,3]",
    r#"[{"role":5,"content":null}]"#,
    r#"[{"role":"user","content":[{"type":"text","text":"hi"}]}]"#,
    r#"[{"role":"system"}]"#,
    r#"[{"role":"assistant","content":"a","tool_calls":[{"type":"function","function":{"name":"f","arguments":{"x":1}}}]}]"#,
    "null",
    r#"[{"role":"user","content":"hi"},{"role":"assistant","content":"<think>x</think>y"},{"role":"user","content":"again"}]"#,
    r#"[{"role":"tool","content":"{\"r\":1}","name":"calc"},{"role":"user","content":"\u0000"}]"#,
];
const ROLES: [&str; 8] = [
    "user",
    "assistant",
    "system",
    "tool",
    "",
    "ROLE",
    "user\n",
    "developer",
];
const CONTENTS: [&str; 8] = [
    "null",
    "5",
    "[]",
    "{}",
    "true",
    r#"[{"type":"text","text":"hi"}]"#,
    r#"{"a":1}"#,
    r#""x""#,
];
const DEPTHS: [usize; 8] = [10, 64, 127, 128, 129, 1000, 10_000, 100_000];
const TOOLS: [&str; 5] = [
    "[]",
    r#"[{"type":"function","function":{"name":"calc","description":"d","parameters":{"type":"object","properties":{"x":{"type":"number"}}}}}]"#,
    "not json",
    r#"{"a":1}"#,
    r#"[null,1,"x"]"#,
];
const EXTRAS: [&str; 7] = [
    r#"{"enable_thinking":false}"#,
    r#"{"enable_thinking":true}"#,
    r#"{"messages":1}"#,
    r#"{"add_generation_prompt":"yes","bos_token":5}"#,
    "[]",
    "garbage",
    r#"{"tools":[{"x":1}],"documents":null,"raise_exception":1}"#,
];

const N_SAMPLES: [u32; 8] = [1, 1, 1, 1, 0, 2, 3, u32::MAX];
const MAX_NEW: [u32; 8] = [16, 0, 1, 2, 64, 16_384, 1 << 20, u32::MAX];
const MIN_NEW: [u32; 8] = [0, 0, 1, 2, 16, 1 << 20, u32::MAX - 1, u32::MAX];
const MAX_TOKENS: [u32; 8] = [32_768, 0, 1, 2, 3, 4, 16_384, u32::MAX];
const TOP_K: [u32; 8] = [
    100_000_000,
    0,
    1,
    2,
    50,
    u32::MAX,
    2_147_483_648,
    100_000_001,
];

const REWARD_NAMES: [&str; 8] = [
    "faulty",
    "const",
    "spin",
    "",
    "nope",
    "(300 x r)",
    "faulty\u{0}",
    "FAULTY",
];
const REWARD_DATA: [&str; 16] = [
    r#"{"value":0.5}"#,
    r#"{"mode":"panic"}"#,
    r#"{"mode":"nan"}"#,
    r#"{"mode":"err"}"#,
    r#"{"mode":"huge"}"#,
    r#"{"mode":"alloc"}"#,
    r#"{"mode":"snoop"}"#,
    "not json",
    "",
    "[]",
    r#"{"value":1e308}"#,
    r#"{"value":"x"}"#,
    "null",
    r#"{"value":-0.0}"#,
    r#"{"mode":"spin"}"#,
    "{}",
];
const TOOL_NAMES: [&str; 8] = [
    "echo",
    "calc",
    "",
    "nope",
    "(300 x t)",
    "echo\u{0}",
    "ECHO",
    "spin",
];
const LEVELS: [log::Level; 5] = [
    log::Level::Trace,
    log::Level::Debug,
    log::Level::Info,
    log::Level::Warn,
    log::Level::Error,
];
const HANDLE_COUNTS: [usize; 8] = [10, 100, 999, 1000, 1001, 1100, 5000, 20_000];
const VALID_LENS: [u32; 8] = [3, 1, 0, 2, 7, 64, 1000, 4096];
const METADATA: [&str; 8] = [
    "{}",
    "",
    "[1]",
    "not json",
    "{\"a\":",
    "(text)",
    "{} {}",
    "{\"k\":NaN}",
];

/// `table[b % len]`.
fn at<T: Copy>(table: &[T], b: u8) -> T {
    table[usize::from(b) % table.len()]
}

/// Cut `s` to at most `cap` bytes on a char boundary.
fn cut(mut s: String, cap: usize) -> String {
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
struct XorShift(u32);

impl XorShift {
    fn step(&mut self) -> u32 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        self.0 = x;
        x
    }

    fn wide(&mut self) -> u64 {
        (u64::from(self.step()) << 32) | u64::from(self.step())
    }
}

/// Reads the program; past the end every byte is 0.
struct Cursor<'a> {
    bytes: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    fn u8(&mut self) -> u8 {
        let b = self.bytes.get(self.pos).copied().unwrap_or(0);
        self.pos = self.pos.saturating_add(1);
        b
    }

    fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }

    fn u32(&mut self) -> u32 {
        u32::from_le_bytes([self.u8(), self.u8(), self.u8(), self.u8()])
    }

    fn u64(&mut self) -> u64 {
        let low = u64::from(self.u32());
        let high = u64::from(self.u32());
        (high << 32) | low
    }

    fn dim(&mut self) -> u32 {
        match self.u8() {
            b @ 0xF0.. => DIMS[usize::from(b - 0xF0)],
            b => u32::from(b % 5),
        }
    }

    fn rank(&mut self) -> usize {
        match self.u8() {
            b @ 0xF8.. => RANKS[usize::from(b - 0xF8)],
            b => usize::from(b % 5),
        }
    }

    fn count(&mut self) -> usize {
        match self.u8() {
            b @ 0xF8.. => COUNTS[usize::from(b - 0xF8)],
            b => usize::from(b % 9),
        }
    }

    fn udim(&mut self) -> u32 {
        match self.u8() {
            b @ 0xF8.. => UDIMS[usize::from(b - 0xF8)],
            b => u32::from(b % 5),
        }
    }

    fn tok(&mut self) -> u32 {
        match self.u8() {
            b @ 0xF8.. => TOKS[usize::from(b - 0xF8)],
            b => u32::from(b),
        }
    }

    fn key(&mut self) -> String {
        match self.u8() % 16 {
            10 => "k".repeat(4096),
            k => KEYS[usize::from(k)].to_string(),
        }
    }

    fn ids(&mut self) -> Vec<u32> {
        let n = self.count();
        match self.u8() % 3 {
            0 => (1..=n).map(|i| i as u32).collect(),
            1 => vec![self.tok(); n],
            _ => (0..n).map(|_| self.tok()).collect(),
        }
    }

    fn text(&mut self, cap: usize) -> String {
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

    fn messages(&mut self) -> String {
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

    fn options(&mut self) -> ChatOptions {
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

    fn request(&mut self) -> ModelRequest {
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
struct Fill {
    n: usize,
    mode: u8,
    rng: XorShift,
}

impl Fill {
    fn of<T: Copy + Default>(
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
fn fill_data(dtype: u8, n: usize, mode: u8, seed: u32) -> TensorData {
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

/// The interpreter's state: the program and every handle it made.
struct Interp<'a> {
    cur: Cursor<'a>,
    /// Handles in creation order; `None` once dropped or moved into the output.
    slots: Vec<Option<Tensor>>,
    /// Raw ids of dropped handles.
    stale: Vec<u32>,
    /// Slot indices of the dicts built by VALID, by key.
    valid: Vec<Vec<(String, usize)>>,
}

impl<'a> Interp<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        Interp {
            cur: Cursor { bytes, pos: 0 },
            slots: Vec::new(),
            stale: Vec::new(),
            valid: Vec::new(),
        }
    }

    /// The slot of the (b % live)-th live handle; reads one byte even when none is live.
    fn pick(&mut self) -> Option<usize> {
        let b = usize::from(self.cur.u8());
        let live = self.slots.iter().filter(|s| s.is_some()).count();
        if live == 0 {
            return None;
        }
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_some())
            .nth(b % live)
            .map(|(i, _)| i)
    }

    fn tensor(&self, slot: usize) -> Option<&Tensor> {
        self.slots.get(slot).and_then(Option::as_ref)
    }

    fn keep<E>(&mut self, made: Result<Tensor, E>) {
        if let Ok(t) = made {
            self.slots.push(Some(t));
        }
    }

    fn run(mut self) -> Result<Option<EpisodeOutput>, String> {
        let mut ops = 0;
        while !self.cur.at_end() && ops < MAX_OPS {
            ops += 1;
            match OPS[usize::from(self.cur.u8()) % OPS.len()] {
                Op::Return => return self.finish(),
                op => self.step(op),
            }
        }
        Ok(None)
    }

    fn step(&mut self, op: Op) {
        match op {
            Op::Create => self.create(),
            Op::Concat => self.concat(),
            Op::ConcatPadded => self.concat_padded(),
            Op::Unsqueeze => {
                let slot = self.pick();
                let dim = self.cur.udim();
                if let Some(t) = slot.and_then(|s| self.tensor(s)) {
                    let made = t.unsqueeze(dim);
                    self.keep(made);
                }
            }
            Op::Shape => {
                if let Some(t) = self.pick().and_then(|s| self.tensor(s)) {
                    let _ = t.shape();
                }
            }
            Op::Dtype => {
                if let Some(t) = self.pick().and_then(|s| self.tensor(s)) {
                    let _ = t.dtype();
                }
            }
            Op::Data => {
                if let Some(t) = self.pick().and_then(|s| self.tensor(s)) {
                    let _ = t.data();
                }
            }
            Op::DropOne => {
                if let Some(t) = self.pick().and_then(|s| self.slots[s].take()) {
                    self.stale.push(t.handle());
                    drop(t);
                }
            }
            Op::Stale => {
                let which = usize::from(self.cur.u8());
                let action = self.cur.u8();
                if !self.stale.is_empty() {
                    let id = self.stale[which % self.stale.len()];
                    self.forged(id, action);
                }
            }
            Op::Forge => {
                let id = match self.cur.u8() % 4 {
                    0 => {
                        let slot = self.pick();
                        slot.and_then(|s| self.tensor(s)).map_or(1, Tensor::handle)
                    }
                    1 => u32::from(self.cur.u8()),
                    2 => self.cur.u32(),
                    _ => at(&IDS, self.cur.u8()),
                };
                let id = id.clamp(1, u32::MAX - 1);
                let action = self.cur.u8();
                self.forged(id, action);
            }
            Op::Generate => {
                let request = self.cur.request();
                let _ = engine::generate(&request);
            }
            Op::GenerateMany => {
                let n = self.cur.count();
                let requests: Vec<ModelRequest> = if self.cur.u8() & 1 == 0 {
                    vec![self.cur.request(); n]
                } else {
                    (0..n).map(|_| self.cur.request()).collect()
                };
                let _ = engine::generate_many(&requests);
            }
            Op::Version => {
                let _ = engine::version();
            }
            Op::Encode => {
                let text = self.cur.text(MAX_TOKENIZER_TEXT_BYTES);
                let _ = tokenizer::encode(&text, self.cur.u8() & 1 == 1);
            }
            Op::Decode => {
                let ids = self.cur.ids();
                let _ = tokenizer::decode(&ids, self.cur.u8() & 1 == 1);
            }
            Op::ApplyChat => {
                let messages = self.cur.messages();
                let options = self.cur.options();
                let _ = tokenizer::apply_chat_template(&messages, &options);
            }
            Op::RenderChat => {
                let messages = self.cur.messages();
                let options = self.cur.options();
                let _ = tokenizer::render_chat_template(&messages, &options);
            }
            Op::Special => {
                let _ = tokenizer::special_tokens();
            }
            Op::Score => self.score(),
            Op::RewardNames => {
                let _ = rewards::names();
            }
            Op::Tool => {
                let name = match self.cur.u8() % 8 {
                    4 => "t".repeat(300),
                    k => TOOL_NAMES[usize::from(k)].to_string(),
                };
                let args = self.cur.text(MAX_TEXT_BYTES);
                let _ = tools::call(&name, &args);
            }
            Op::ToolNames => {
                let _ = tools::names();
            }
            Op::Log => {
                let level = at(&LEVELS, self.cur.u8());
                let message = self.cur.text(MAX_TEXT_BYTES);
                log::log(level, &message);
            }
            Op::Stat => {
                let key = self.cur.text(MAX_TEXT_BYTES);
                let value = at(&PADS, self.cur.u8());
                log::stat(&key, value);
            }
            Op::Handles => {
                let n = at(&HANDLE_COUNTS, self.cur.u8());
                for i in 0..n {
                    let made = Tensor::create(&TensorData::I32(vec![i as i32]), &[1]);
                    self.keep(made);
                }
            }
            Op::Print => {
                let stdout = self.cur.u8() & 1 == 1;
                let text = self.cur.text(MAX_TEXT_BYTES);
                if stdout {
                    print!("{text}");
                } else {
                    eprint!("{text}");
                }
            }
            Op::Valid => self.valid(),
            Op::Return => {}
        }
    }

    fn create(&mut self) {
        let dtype = self.cur.u8() % 6;
        let rank = self.cur.rank();
        let shape: Vec<u32> = (0..rank).map(|_| self.cur.dim()).collect();
        let product = shape
            .iter()
            .fold(1u128, |p, &d| p.saturating_mul(u128::from(d)));
        let wanted = match self.cur.u8() % 8 {
            0..=3 => product,
            4 => product.saturating_add(1),
            5 => product.saturating_sub(1),
            6 => 0,
            _ => u128::from(self.cur.u16()),
        };
        let fill = self.cur.u8() % 4;
        let seed = if fill == 3 { self.cur.u32() } else { 0 };
        let cap = MAX_GUEST_DATA_BYTES / ELEM_BYTES[usize::from(dtype)];
        let n = usize::try_from(wanted).map_or(cap, |w| w.min(cap));
        let data = fill_data(dtype, n, fill, seed);
        let made = Tensor::create(&data, &shape);
        drop(data);
        self.keep(made);
    }

    fn concat(&mut self) {
        let n = self.cur.count();
        let slots: Vec<usize> = if self.cur.u8() & 1 == 0 {
            self.pick().map(|s| vec![s; n]).unwrap_or_default()
        } else {
            (0..n).filter_map(|_| self.pick()).collect()
        };
        let refs: Vec<&Tensor> = slots.iter().filter_map(|&s| self.tensor(s)).collect();
        let made = tensor::concat(&refs);
        self.keep(made);
    }

    fn concat_padded(&mut self) {
        let n = usize::from(self.cur.u8() % 9);
        let mode = self.cur.u8();
        let pad = at(&PADS, self.cur.u8());
        let mut dicts: Vec<Vec<(String, usize)>> = Vec::with_capacity(n);
        if mode & 2 != 0 && !self.valid.is_empty() {
            let built = self.valid.len();
            for i in 0..n {
                dicts.push(self.valid[built - 1 - i % built].clone());
            }
        } else if mode & 1 != 0 {
            let k = usize::from(self.cur.u8() % 6);
            let keys: Vec<String> = (0..k).map(|_| self.cur.key()).collect();
            for _ in 0..n {
                let mut dict = Vec::with_capacity(k);
                for key in &keys {
                    if let Some(s) = self.pick() {
                        dict.push((key.clone(), s));
                    }
                }
                dicts.push(dict);
            }
        } else {
            for _ in 0..n {
                let k = usize::from(self.cur.u8() % 6);
                let mut dict = Vec::with_capacity(k);
                for _ in 0..k {
                    let key = self.cur.key();
                    if let Some(s) = self.pick() {
                        dict.push((key, s));
                    }
                }
                dicts.push(dict);
            }
        }
        let mut views: Vec<Vec<(String, &Tensor)>> = Vec::with_capacity(dicts.len());
        for entries in &dicts {
            let view = entries
                .iter()
                .filter_map(|(k, s)| self.tensor(*s).map(|t| (k.clone(), t)))
                .collect();
            views.push(view);
        }
        let made = tensor::concat_padded(&views, pad);
        if let Ok(out) = made {
            for (_, t) in out {
                self.slots.push(Some(t));
            }
        }
    }

    /// Use a handle id the guest does not own (stale, forged or an alias of a live one).
    fn forged(&mut self, id: u32, action: u8) {
        // SAFETY: deliberately not sound: the handle may be dropped, never created, another
        // resource's, or owned by another `Tensor`. Each use below is a call the host (or the
        // component model) must refuse with a trap; nothing here dereferences guest memory.
        let t = unsafe { Tensor::from_handle(id) };
        match action % 6 {
            0 => {
                let _ = t.shape();
                std::mem::forget(t);
            }
            1 => {
                let _ = t.data();
                std::mem::forget(t);
            }
            2 => {
                let made = tensor::concat(&[&t, &t]);
                self.keep(made);
                std::mem::forget(t);
            }
            3 => {
                let made = t.unsqueeze(0);
                self.keep(made);
                std::mem::forget(t);
            }
            4 => drop(t),
            _ => self.slots.push(Some(t)),
        }
    }

    fn score(&mut self) {
        let name = match self.cur.u8() % 8 {
            5 => "r".repeat(300),
            k => REWARD_NAMES[usize::from(k)].to_string(),
        };
        let prompt = self.cur.text(MAX_TEXT_BYTES);
        let completion = self.cur.text(MAX_TEXT_BYTES);
        let prompt_ids = self.cur.ids();
        let completion_ids = self.cur.ids();
        let data = at(&REWARD_DATA, self.cur.u8()).to_string();
        let input = RewardInput {
            prompt,
            completion,
            prompt_ids,
            completion_ids,
            data,
        };
        let _ = rewards::score(&name, &input);
    }

    /// Create `data` with `shape` and record it in `dict` under `key`.
    fn add(&mut self, d: &mut Vec<(String, usize)>, key: &str, data: TensorData, shape: &[u32]) {
        if let Ok(t) = Tensor::create(&data, shape) {
            d.push((key.to_string(), self.slots.len()));
            self.slots.push(Some(t));
        }
    }

    /// AReaL's tensors for one row of `L` tokens (AReaL's RLVR layout), as a dict for CPAD
    /// and RETURN.
    fn valid(&mut self) {
        let len = at(&VALID_LENS, self.cur.u8());
        let variant = self.cur.u8();
        let n = len as usize;
        let row = [1, len];
        let mut dict = Vec::new();
        let ids = (0..n).map(|i| i as i32 + 1).collect();
        self.add(&mut dict, "input_ids", TensorData::I32(ids), &row);
        let mask = (0..n).map(|i| (i % 2) as i32).collect();
        self.add(&mut dict, "loss_mask", TensorData::I32(mask), &row);
        let logprobs = TensorData::F32(vec![-0.5; n]);
        self.add(&mut dict, "logprobs", logprobs, &row);
        self.add(&mut dict, "versions", TensorData::I32(vec![0; n]), &row);
        let attention = if variant & 1 != 0 {
            TensorData::I32(vec![1; n])
        } else {
            TensorData::Bool(vec![true; n])
        };
        self.add(&mut dict, "attention_mask", attention, &row);
        if variant & 2 != 0 {
            let x3 = TensorData::F32(vec![0.25; n * 2]);
            self.add(&mut dict, "x3", x3, &[1, len, 2]);
        }
        if variant & 4 == 0 {
            self.add(&mut dict, "rewards", TensorData::F32(vec![1.0]), &[1]);
        }
        self.valid.push(dict);
    }

    /// RETURN: end the episode. Handles not moved into the output are dropped on the way out.
    fn finish(mut self) -> Result<Option<EpisodeOutput>, String> {
        let mode = self.cur.u8() % 4;
        if mode == 0 {
            return Ok(None);
        }
        if mode == 1 {
            return Err(self.cur.text(MAX_TEXT_BYTES));
        }
        let mut tensors = Vec::new();
        let extra = if mode == 3 {
            if let Some(dict) = self.valid.last().cloned() {
                for (key, s) in dict {
                    if let Some(t) = self.slots[s].take() {
                        tensors.push((key, t));
                    }
                }
            }
            usize::from(self.cur.u8() % 3)
        } else {
            self.cur.count()
        };
        for _ in 0..extra {
            let key = self.cur.key();
            if let Some(s) = self.pick()
                && let Some(t) = self.slots[s].take()
            {
                tensors.push((key, t));
            }
        }
        let metadata = match self.cur.u8() % 8 {
            5 => {
                let text = self.cur.text(MAX_TEXT_BYTES);
                serde_json::json!({"text": text}).to_string()
            }
            k => METADATA[usize::from(k)].to_string(),
        };
        Ok(Some(EpisodeOutput { tensors, metadata }))
    }
}

fn nibble(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

/// The row's `program`, hex-decoded (an odd trailing digit is ignored).
fn program(data: &str) -> Result<Vec<u8>, String> {
    let row: serde_json::Value =
        serde_json::from_str(data).map_err(|e| format!("the row is not JSON: {e}"))?;
    let hex = row["program"].as_str().unwrap_or("");
    let mut bytes = Vec::with_capacity(hex.len() / 2);
    for pair in hex.as_bytes().chunks_exact(2) {
        let (Some(high), Some(low)) = (nibble(pair[0]), nibble(pair[1])) else {
            return Err("the row's `program` must be a hex string".into());
        };
        bytes.push((high << 4) | low);
    }
    Ok(bytes)
}

struct FuzzOps;

impl Guest for FuzzOps {
    fn run_episode(input: EpisodeInput) -> Result<Option<EpisodeOutput>, String> {
        let bytes = program(&input.data)?;
        Interp::new(&bytes).run()
    }
}

// The SDK's `export_workflow!` goes through `Output`, whose metadata is always valid JSON;
// this program also returns invalid metadata, so it exports the world directly.
rollbox_sdk::bindings::workflow::__export_workflow_world!(
    FuzzOps with_types_in rollbox_sdk::bindings::workflow
);

fn main() {}
