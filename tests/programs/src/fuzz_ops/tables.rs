//! The tables the fuzz interpreter's readers index (see the encoding in `bin/fuzz_ops.rs`).

use rollbox_sdk::log;

/// Ops one program may run, so a program always ends.
pub(crate) const MAX_OPS: usize = 256;
/// Bytes of one generated text (log lines, prompts, tool arguments, error messages).
pub(crate) const MAX_TEXT_BYTES: usize = 4 << 20;
/// Bytes of one stop string or image string.
pub(crate) const MAX_SHORT_TEXT_BYTES: usize = 256;
/// Bytes of text one tokenizer call gets (ENCODE, and all the content of one `messages`): a
/// tokenizer call runs to its end on the host, so this keeps an episode near its deadline.
pub(crate) const MAX_TOKENIZER_TEXT_BYTES: usize = 256 << 10;
/// Bytes of tensor data the guest builds for one `create`, so the guest stays well inside its
/// memory limit; larger shapes get deliberately mismatched data instead.
pub(crate) const MAX_GUEST_DATA_BYTES: usize = 16 << 20;

#[derive(Clone, Copy)]
pub(crate) enum Op {
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

pub(crate) const OPS: [Op; 32] = [
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

pub(crate) const DIMS: [u32; 16] = [
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
pub(crate) const RANKS: [usize; 8] = [5, 8, 16, 17, 32, 64, 255, 300];
pub(crate) const COUNTS: [usize; 8] = [16, 64, 255, 256, 300, 1000, 4096, 4097];
pub(crate) const UDIMS: [u32; 8] = [16, 17, 255, 256, 300, 65_535, 2_147_483_647, u32::MAX];
pub(crate) const TOKS: [u32; 8] = [
    0,
    2,
    49_151,
    49_152,
    100_000,
    2_147_483_647,
    u32::MAX - 1,
    u32::MAX,
];
pub(crate) const IDS: [u32; 8] = [1, 2, 3, 4, 1000, 10_000, 65_536, u32::MAX - 1];

pub(crate) const KEYS: [&str; 16] = [
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

pub(crate) const PADS: [f64; 16] = [
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

pub(crate) const F32S: [f32; 16] = [
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

pub(crate) const EDGE_I32: [i32; 8] = [0, 1, -1, i32::MIN, i32::MAX, 2, 49_152, -2];
pub(crate) const EDGE_I64: [i64; 8] = [0, 1, -1, i64::MIN, i64::MAX, 1 << 32, -(1 << 32), 2];
pub(crate) const EDGE_BF16: [u16; 8] = [0, 0x3F80, 0x7FC0, 0x7F80, 0xFF80, 0x8000, 0x0001, 0xFFFF];
pub(crate) const EDGE_U8: [u8; 5] = [0, 1, 127, 128, 255];
/// Element sizes by dtype index (i32 i64 f32 bf16 bool u8).
pub(crate) const ELEM_BYTES: [usize; 6] = [4, 8, 4, 2, 1, 1];

pub(crate) const RUN_CHARS: [char; 8] = ['a', ' ', '\n', 'é', '中', '😀', '\u{0}', '<'];
pub(crate) const RUN_LENS: [usize; 8] = [16, 255, 4096, 65_536, 200_000, 1 << 20, 4 << 20, 1];
pub(crate) const SPECIALS: [&str; 8] = [
    "<|im_start|>",
    "<|im_end|>",
    "<|endoftext|>",
    "<s>",
    "</s>",
    "<|im_start|>user\nhi<|im_end|>\n",
    "<unk>",
    "<|im_start|><|im_start|>",
];
pub(crate) const ODD_CHARS: [char; 16] = [
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
pub(crate) const JSONS: [&str; 16] = [
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

pub(crate) const MESSAGES: [&str; 12] = [
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
pub(crate) const ROLES: [&str; 8] = [
    "user",
    "assistant",
    "system",
    "tool",
    "",
    "ROLE",
    "user\n",
    "developer",
];
pub(crate) const CONTENTS: [&str; 8] = [
    "null",
    "5",
    "[]",
    "{}",
    "true",
    r#"[{"type":"text","text":"hi"}]"#,
    r#"{"a":1}"#,
    r#""x""#,
];
pub(crate) const DEPTHS: [usize; 8] = [10, 64, 127, 128, 129, 1000, 10_000, 100_000];
pub(crate) const TOOLS: [&str; 5] = [
    "[]",
    r#"[{"type":"function","function":{"name":"calc","description":"d","parameters":{"type":"object","properties":{"x":{"type":"number"}}}}}]"#,
    "not json",
    r#"{"a":1}"#,
    r#"[null,1,"x"]"#,
];
pub(crate) const EXTRAS: [&str; 7] = [
    r#"{"enable_thinking":false}"#,
    r#"{"enable_thinking":true}"#,
    r#"{"messages":1}"#,
    r#"{"add_generation_prompt":"yes","bos_token":5}"#,
    "[]",
    "garbage",
    r#"{"tools":[{"x":1}],"documents":null,"raise_exception":1}"#,
];

pub(crate) const N_SAMPLES: [u32; 8] = [1, 1, 1, 1, 0, 2, 3, u32::MAX];
pub(crate) const MAX_NEW: [u32; 8] = [16, 0, 1, 2, 64, 16_384, 1 << 20, u32::MAX];
pub(crate) const MIN_NEW: [u32; 8] = [0, 0, 1, 2, 16, 1 << 20, u32::MAX - 1, u32::MAX];
pub(crate) const MAX_TOKENS: [u32; 8] = [32_768, 0, 1, 2, 3, 4, 16_384, u32::MAX];
pub(crate) const TOP_K: [u32; 8] = [
    100_000_000,
    0,
    1,
    2,
    50,
    u32::MAX,
    2_147_483_648,
    100_000_001,
];

pub(crate) const REWARD_NAMES: [&str; 8] = [
    "faulty",
    "const",
    "spin",
    "",
    "nope",
    "(300 x r)",
    "faulty\u{0}",
    "FAULTY",
];
pub(crate) const REWARD_DATA: [&str; 16] = [
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
pub(crate) const TOOL_NAMES: [&str; 8] = [
    "echo",
    "calc",
    "",
    "nope",
    "(300 x t)",
    "echo\u{0}",
    "ECHO",
    "spin",
];
pub(crate) const LEVELS: [log::Level; 5] = [
    log::Level::Trace,
    log::Level::Debug,
    log::Level::Info,
    log::Level::Warn,
    log::Level::Error,
];
pub(crate) const HANDLE_COUNTS: [usize; 8] = [10, 100, 999, 1000, 1001, 1100, 5000, 20_000];
pub(crate) const VALID_LENS: [u32; 8] = [3, 1, 0, 2, 7, 64, 1000, 4096];
pub(crate) const METADATA: [&str; 8] = [
    "{}",
    "",
    "[1]",
    "not json",
    "{\"a\":",
    "(text)",
    "{} {}",
    "{\"k\":NaN}",
];
