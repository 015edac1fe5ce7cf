#!/usr/bin/env python3
"""Write the seed corpus of the host-call fuzzer: tests/fixtures/fuzz/corpus/*.hex.

Each seed is one program for the `fuzz_ops` guest (tests/programs/src/bin/fuzz_ops.rs), written
here from a readable description with the same encoding; the encoding is documented at the top
of fuzz_ops.rs, and the tables below mirror its tables exactly (change both together). A file
holds `#` comment lines (what the seed is for) and then the program as lowercase hex; the
driver (tests/tests/fuzz.rs) drops the comments.

    python3 scripts/fuzz_corpus.py            # rewrites every seed (others are left alone)
"""

import struct
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "tests" / "fixtures" / "fuzz" / "corpus"

# Canonical opcodes (op = byte % 32).
OP = {
    "create": 0,
    "concat": 3,
    "cpad": 4,
    "unsq": 6,
    "shape": 7,
    "dtype": 8,
    "data": 9,
    "drop": 10,
    "stale": 11,
    "forge": 12,
    "gen": 13,
    "genmany": 14,
    "version": 15,
    "encode": 16,
    "decode": 17,
    "apply": 18,
    "render": 19,
    "special": 20,
    "score": 21,
    "rnames": 22,
    "tool": 23,
    "tnames": 24,
    "log": 25,
    "stat": 26,
    "handles": 27,
    "print": 28,
    "valid": 29,
    "ret": 31,
}

# Tables of fuzz_ops.rs, same order.
DIMS = [0, 1, 2, 3, 255, 256, 65535, 65536, 2**31 - 1, 2**31, 2**32 - 1, 2**32 - 2,
        1 << 20, 1 << 24, 4096, 300]
RANKS = [5, 8, 16, 17, 32, 64, 255, 300]
COUNTS = [16, 64, 255, 256, 300, 1000, 4096, 4097]
UDIMS = [16, 17, 255, 256, 300, 65535, 2**31 - 1, 2**32 - 1]
TOKS = [0, 2, 49151, 49152, 100000, 2**31 - 1, 2**32 - 2, 2**32 - 1]
IDS = [1, 2, 3, 4, 1000, 10000, 65536, 2**32 - 2]
LONG_KEY = "k" * 4096
KEYS = ["input_ids", "attention_mask", "loss_mask", "logprobs", "versions", "rewards", "x", "",
        "__metadata__", "attention_mask", LONG_KEY, "a\0b", "ключ\n\"q\"", "input_ids", "y",
        "rollout_reward"]
DTYPES = ["i32", "i64", "f32", "bf16", "bool", "u8"]
PADS = ["0", "-1", "1", "nan", "inf", "-inf", "1e300", "-1e300", "255.5", "0.5", "-0",
        "min_positive", "2^32", "2^31", "denormal_min", "65504"]
F32S = ["1", "0", "-0", "-1", "nan", "inf", "-inf", "1e-30", "1e30", "denormal_min", "0.5", "2",
        "max", "-2.5", "100", "1e-7"]
RUN_CHARS = ["a", " ", "\n", "é", "中", "😀", "\0", "<"]
RUN_LENS = [16, 255, 4096, 65536, 200_000, 1 << 20, 4 << 20, 1]
SPECIALS = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<s>", "</s>",
            "<|im_start|>user\nhi<|im_end|>\n", "<unk>", "<|im_start|><|im_start|>"]
JSONS = ["{}", "", "[]", "null", "not json", '{"a":', '{"k":"v"}', "1e999", '"str"',
         '{"a":1} {}', "{{ raise_exception('boom') }}",
         "{% for x in range(100000000) %}x{% endfor %}", "[[[[[[[[[[]]]]]]]]]]",
         '{"__proto__":{}}', "\0", '{"k":NaN}']
ROLES = ["user", "assistant", "system", "tool", "", "ROLE", "user\n", "developer"]
CONTENTS = ["null", "5", "[]", "{}", "true", '[{"type":"text","text":"hi"}]', '{"a":1}', '"x"']
DEPTHS = [10, 64, 127, 128, 129, 1000, 10_000, 100_000]
TOOLS = ["[]", "calc-schema", "not json", '{"a":1}', '[null,1,"x"]']
EXTRAS = ['{"enable_thinking":false}', '{"enable_thinking":true}', '{"messages":1}',
          '{"add_generation_prompt":"yes","bos_token":5}', "[]", "garbage",
          '{"tools":[{"x":1}],"documents":null,"raise_exception":1}']
N_SAMPLES = [1, 1, 1, 1, 0, 2, 3, 2**32 - 1]
MAX_NEW = [16, 0, 1, 2, 64, 16384, 1 << 20, 2**32 - 1]
MIN_NEW = [0, 0, 1, 2, 16, 1 << 20, 2**32 - 2, 2**32 - 1]
MAX_TOKENS = [32768, 0, 1, 2, 3, 4, 16384, 2**32 - 1]
TOP_K = [100_000_000, 0, 1, 2, 50, 2**32 - 1, 2**31, 100_000_001]
REWARD_NAMES = ["faulty", "const", "spin", "", "nope", "r" * 300, "faulty\0", "FAULTY"]
REWARD_DATA = ['{"value":0.5}', '{"mode":"panic"}', '{"mode":"nan"}', '{"mode":"err"}',
               '{"mode":"huge"}', '{"mode":"alloc"}', '{"mode":"snoop"}', "not json", "", "[]",
               '{"value":1e308}', '{"value":"x"}', "null", '{"value":-0.0}', '{"mode":"spin"}',
               "{}"]
TOOL_NAMES = ["echo", "calc", "", "nope", "t" * 300, "echo\0", "ECHO", "spin"]
LEVELS = ["trace", "debug", "info", "warn", "error"]
HANDLE_COUNTS = [10, 100, 999, 1000, 1001, 1100, 5000, 20_000]
VALID_LENS = [3, 1, 0, 2, 7, 64, 1000, 4096]
METADATA = ["{}", "", "[1]", "not json", '{"a":', "(text)", "{} {}", '{"k":NaN}']
RIDS = ["", "r", "rid-ü", "r" * 1000, "\0", "same"]

assert len(DIMS) == 16 and len(KEYS) == 16 and len(PADS) == 16 and len(F32S) == 16
assert len(JSONS) == 16 and len(REWARD_DATA) == 16


def index(table, value):
    return table.index(value)


# ---- readers ---------------------------------------------------------------------------------

def dim(v):
    return [v] if v < 5 else [0xF0 + index(DIMS, v)]


def rank(r):
    return [r] if r < 5 else [0xF8 + index(RANKS, r)]


def count(n):
    return [n] if n < 9 else [0xF8 + index(COUNTS, n)]


def udim(d):
    return [d] if d < 5 else [0xF8 + index(UDIMS, d)]


def tok(t):
    return [t] if t < 0xF8 else [0xF8 + index(TOKS, t)]


def key(k):
    return [index(KEYS, k)]


def u16(v):
    return list(struct.pack("<H", v))


def u32(v):
    return list(struct.pack("<I", v))


def u64(v):
    return list(struct.pack("<Q", v))


def ids_ramp(n):
    """ids 1..=n."""
    return count(n) + [0]


def ids_same(t, n):
    return count(n) + [1] + tok(t)


def ids_list(ts):
    out = count(len(ts)) + [2]
    for t in ts:
        out += tok(t)
    return out


def text_empty():
    return [0]


def text_ascii(s):
    assert len(s) < 256 and all(0x20 <= ord(c) < 0x7F for c in s)
    return [1, len(s)] + [ord(c) - 32 for c in s]


def text_run(ch, n):
    return [2, index(RUN_CHARS, ch), index(RUN_LENS, n)]


def text_special(token, times):
    return [3, index(SPECIALS, token), times]


def text_odd(picks):
    """`picks` are indices into ODD_CHARS."""
    return [4, len(picks)] + list(picks)


def text_json(j):
    return [5, index(JSONS, j)]


def text_raw(raw):
    return [6, len(raw)] + list(raw)


def text_words(n):
    return [7, index(RUN_LENS, n)]


def msgs_static(i):
    assert 0 <= i <= 11
    return [i]


def msgs_dynamic(items):
    """items: (role, text bytes)."""
    out = [12] + count(len(items))
    for role, text in items:
        out += [index(ROLES, role)] + text
    return out


def msgs_deep(depth):
    return [13, index(DEPTHS, depth)]


def msgs_text(text):
    return [14] + text


def msgs_typed(items):
    """items: (role, content JSON)."""
    out = [15] + count(len(items))
    for role, content in items:
        out += [index(ROLES, role), index(CONTENTS, content)]
    return out


def options(add_generation_prompt=True, tools=None, extra=None):
    t = 0 if tools is None else 1 + index(TOOLS, tools)
    e = 0 if extra is None else 1 + index(EXTRAS, extra)
    return [0 if add_generation_prompt else 1, t, e]


def request(rid="", ids=None, n_samples=1, max_new=16, min_new=0, max_tokens=32768,
            temperature="1", top_p="1", top_k=100_000_000, frequency_penalty="0", seed=None,
            greedy=False, ignore_eos=False, skip_special=True, exclude_default_stops=False,
            stop_ids=None, stops=(), images=(), metadata="{}"):
    out = [index(RIDS, rid)]
    out += ids if ids is not None else ids_ramp(3)
    out += [index(N_SAMPLES, n_samples), index(MAX_NEW, max_new), index(MIN_NEW, min_new),
            index(MAX_TOKENS, max_tokens), index(F32S, temperature), index(F32S, top_p),
            index(TOP_K, top_k), index(F32S, frequency_penalty)]
    if seed is None:
        out += [0]
    elif seed == 0:
        out += [1]
    elif seed == 2**64 - 1:
        out += [2]
    else:
        out += [3] + u64(seed)
    out += [int(greedy) | int(ignore_eos) << 1 | int(not skip_special) << 2
            | int(exclude_default_stops) << 3]
    out += stop_ids if stop_ids is not None else ids_ramp(0)
    out += count(len(stops))
    for s in stops:
        out += s
    assert len(images) < 3
    out += [len(images)]
    for s in images:
        out += s
    out += [index(JSONS, metadata)]
    return out


# ---- ops -------------------------------------------------------------------------------------

def create(dtype, dims, length="exact", fill="ramp"):
    """length: exact | plus1 | minus1 | zero | an int (u16); fill: zeros | ramp | edge | an int
    (random seed)."""
    out = [OP["create"], index(DTYPES, dtype)] + rank(len(dims))
    for d in dims:
        out += dim(d)
    if isinstance(length, int):
        out += [7] + u16(length)
    else:
        out += [{"exact": 0, "plus1": 4, "minus1": 5, "zero": 6}[length]]
    if isinstance(fill, int):
        out += [3] + u32(fill)
    else:
        out += [{"zeros": 0, "ramp": 1, "edge": 2}[fill]]
    return out


def concat_same(n, pick):
    return [OP["concat"]] + count(n) + [0, pick]


def concat_each(picks):
    return [OP["concat"]] + count(len(picks)) + [1] + list(picks)


def cpad_valid(n, pad):
    """The last n VALID dicts (needs one VALID before)."""
    return [OP["cpad"], n, 2, index(PADS, pad)]


def cpad_shared(keys, dict_picks, pad="0"):
    out = [OP["cpad"], len(dict_picks), 1, index(PADS, pad), len(keys)]
    for k in keys:
        out += key(k)
    for picks in dict_picks:
        assert len(picks) == len(keys)
        out += list(picks)
    return out


def cpad_each(dicts, pad="0"):
    """dicts: lists of (key, pick)."""
    out = [OP["cpad"], len(dicts), 0, index(PADS, pad)]
    for d in dicts:
        out += [len(d)]
        for k, p in d:
            out += key(k) + [p]
    return out


def unsq(pick, d):
    return [OP["unsq"], pick] + udim(d)


def shape(pick):
    return [OP["shape"], pick]


def dtype_of(pick):
    return [OP["dtype"], pick]


def data(pick):
    return [OP["data"], pick]


def drop(pick):
    return [OP["drop"], pick]


ACTIONS = {"shape": 0, "data": 1, "concat": 2, "unsqueeze": 3, "drop": 4, "keep": 5}


def stale(which, action):
    return [OP["stale"], which, ACTIONS[action]]


def forge_pick(pick, action):
    return [OP["forge"], 0, pick, ACTIONS[action]]


def forge_byte(b, action):
    return [OP["forge"], 1, b, ACTIONS[action]]


def forge_u32(v, action):
    return [OP["forge"], 2] + u32(v) + [ACTIONS[action]]


def forge_table(v, action):
    return [OP["forge"], 3, index(IDS, v), ACTIONS[action]]


def gen(req):
    return [OP["gen"]] + req


def genmany_same(n, req):
    return [OP["genmany"]] + count(n) + [0] + req


def genmany_each(reqs):
    out = [OP["genmany"]] + count(len(reqs)) + [1]
    for r in reqs:
        out += r
    return out


def encode(text, add_special=False):
    return [OP["encode"]] + text + [int(add_special)]


def decode(ids, skip_special=False):
    return [OP["decode"]] + ids + [int(skip_special)]


def apply(messages, opts=None):
    return [OP["apply"]] + messages + (opts or options())


def render(messages, opts=None):
    return [OP["render"]] + messages + (opts or options())


def score(name, prompt=None, completion=None, prompt_ids=None, completion_ids=None, row="{}"):
    return ([OP["score"], index(REWARD_NAMES, name)] + (prompt or text_empty())
            + (completion or text_empty()) + (prompt_ids or ids_ramp(3))
            + (completion_ids or ids_ramp(2)) + [index(REWARD_DATA, row)])


def tool(name, args):
    return [OP["tool"], index(TOOL_NAMES, name)] + args


def log(level, text):
    return [OP["log"], index(LEVELS, level)] + text


def stat(key_text, value):
    return [OP["stat"]] + key_text + [index(PADS, value)]


def handles(n):
    return [OP["handles"], index(HANDLE_COUNTS, n)]


def prints(stdout, text):
    return [OP["print"], int(stdout)] + text


def valid(length, attention_i32=False, x3=False, no_rewards=False):
    return [OP["valid"], index(VALID_LENS, length),
            int(attention_i32) | int(x3) << 1 | int(no_rewards) << 2]


def metadata(m, text=None):
    return [index(METADATA, m)] + (text if m == "(text)" else [])


def ret_none():
    return [OP["ret"], 0]


def ret_err(text):
    return [OP["ret"], 1] + text


def ret_tensors(pairs, meta="{}", meta_text=None):
    """pairs: (key, pick); each pick is counted among the handles still live at that point."""
    out = [OP["ret"], 2] + count(len(pairs))
    for k, p in pairs:
        out += key(k) + [p]
    return out + metadata(meta, meta_text)


def ret_valid(extra=(), meta="{}", meta_text=None):
    assert len(extra) < 3
    out = [OP["ret"], 3, len(extra)]
    for k, p in extra:
        out += key(k) + [p]
    return out + metadata(meta, meta_text)


# ---- seeds -----------------------------------------------------------------------------------

def version():
    return [OP["version"]]


def special():
    return [OP["special"]]


def rnames():
    return [OP["rnames"]]


def tnames():
    return [OP["tnames"]]


SEEDS = {}


def seed(name, *parts):
    """A seed: its description lines (the leading strings), then its ops."""
    description = [p for p in parts if isinstance(p, str)]
    program = []
    for op in parts:
        if not isinstance(op, str):
            program += op
    assert all(isinstance(b, int) and 0 <= b < 256 for b in program), name
    assert name not in SEEDS, name
    SEEDS[name] = (description, bytes(program))


seed("01-zero-elements-u32max-256-concat-padded",
     "A zero-element f32 tensor [0, 4294967295, 256] concat-padded against [1, 1, 1]: the",
     "padded result would be [1, 4294967295, 256]; it must be refused before any allocation.",
     create("f32", [0, 2**32 - 1, 256], fill="zeros"),
     create("f32", [1, 1, 1], fill="zeros"),
     cpad_shared(["x"], [[0], [1]]),
     cpad_shared(["x"], [[1], [0]], pad="nan"),
     cpad_shared(["attention_mask"], [[0], [1]]),
     concat_each([0, 1]),
     unsq(0, 0),
     data(0),
     ret_none())

seed("02-zero-elements-u32max-u32max-concat-padded",
     "[0, 4294967295, 4294967295] concat-padded against [1, 1, 1] (an element count near 2^64",
     "once padded), and the same shape as i64 and bool.",
     create("f32", [0, 2**32 - 1, 2**32 - 1], fill="zeros"),
     create("f32", [1, 1, 1], fill="zeros"),
     cpad_shared(["x"], [[0], [1]], pad="1e300"),
     ret_none())

seed("02b-zero-elements-bool-both-sides",
     "Two zero-element bool tensors, [0, 4294967295, 4294967295] and [1, 4294967295, 0], whose",
     "padded concatenation would be [1, 4294967295, 4294967295].",
     create("bool", [0, 2**32 - 1, 2**32 - 1], fill="zeros"),
     create("bool", [1, 2**32 - 1, 0], fill="zeros"),
     cpad_shared(["attention_mask"], [[0], [1]], pad="255.5"),
     concat_same(300, 0),
     concat_each([0, 1]),
     ret_none())

seed("02c-zero-elements-rank-16-overflow",
     "A zero-element rank-16 tensor [0, 4294967295 x 15] padded against [1 x 16]: the padded",
     "element count overflows even 128 bits.",
     create("i64", [0] + [2**32 - 1] * 15, fill="zeros"),
     create("i64", [1] * 16, fill="ramp"),
     cpad_shared(["x"], [[0], [1]], pad="-1"),
     ret_none())

seed("03-300-borrows-of-16mib",
     "300 borrows of one 16 MiB u8 tensor in one concat (4.8 GiB if it were built), then 4097,",
     "then the data read back twice.",
     create("u8", [1 << 24], fill="ramp"),
     data(0),
     data(0),
     concat_same(300, 0),
     concat_each([0] * 16),
     ret_none())

seed("03b-4097-borrows",
     "4097 borrows of one small tensor in one concat, then 1000 of the result.",
     create("i32", [1, 1], fill="ramp"),
     concat_same(4097, 0),
     concat_same(1000, 1),
     ret_none())

seed("04-high-rank-concat-padded",
     "A rank-300 tensor concat-padded with itself and unsqueezed at 300.",
     create("i32", [1] * 300, fill="ramp"),
     cpad_shared(["x"], [[0], [0]]),
     unsq(0, 300),
     concat_each([0, 0]),
     ret_none())

seed("04b-rank-16-and-17",
     "[1, 2, ..., 2] (rank 16) padded against [1, ..., 1], unsqueezed to rank 17, and a rank-17",
     "create.",
     create("i32", [1] + [2] * 15, fill="ramp"),
     create("i32", [1] * 16, fill="ramp"),
     cpad_shared(["x"], [[0], [1]], pad="inf"),
     unsq(0, 16),
     unsq(1, 17),
     create("f32", [1] * 17, fill="edge"),
     create("bf16", [2] * 8, fill="edge"),
     concat_each([0, 1]),
     ret_none())

seed("05-metadata-key-returned",
     "A tensor named `__metadata__` (safetensors' reserved name) in the returned dict.",
     create("i32", [1], fill="ramp"),
     ret_tensors([("__metadata__", 0)]))

seed("06-valid-dict-plus-reserved-and-odd-keys",
     "An otherwise valid trajectory returned with `__metadata__` and a key with a NUL byte added.",
     valid(3),
     create("f32", [1], fill="zeros"),
     create("f32", [1], fill="zeros"),
     ret_valid([("__metadata__", 0), ("a\0b", 0)]))

seed("06b-empty-key-returned",
     "A tensor returned under the empty key.",
     create("i32", [1], fill="ramp"),
     ret_tensors([("", 0)]))

seed("07-stale-handle-use",
     "A handle used after it was dropped (shape).",
     create("i32", [2, 2], fill="ramp"),
     drop(0),
     stale(0, "shape"),
     ret_none())

seed("08-double-drop",
     "A handle dropped twice.",
     create("i32", [2], fill="ramp"),
     create("i32", [2], fill="ramp"),
     drop(0),
     stale(0, "drop"),
     ret_none())

seed("09-stale-in-concat",
     "A dropped handle borrowed twice in a concat.",
     create("f32", [3], fill="edge"),
     create("f32", [3], fill="edge"),
     drop(1),
     stale(0, "concat"),
     ret_none())

seed("10-stale-kept-and-returned",
     "A dropped handle taken back as owned and returned in the output.",
     create("i32", [1, 3], fill="ramp"),
     drop(0),
     stale(0, "keep"),
     ret_tensors([("input_ids", 0)]))

seed("11-forged-ids",
     "Forged handle ids: small ones that may name the live tensor or a WASI resource of the",
     "instance, then ids never issued; each use must be served or trap.",
     create("i32", [1], fill="ramp"),
     forge_byte(1, "data"),
     forge_byte(2, "drop"),
     forge_table(65536, "concat"),
     forge_u32(12345, "shape"),
     ret_none())

seed("11b-forged-id-returned",
     "A forged id kept as an owned tensor and returned in the output.",
     forge_byte(3, "keep"),
     create("i32", [1, 2], fill="ramp"),
     ret_tensors([("x", 0), ("y", 0)]))

seed("12-forged-alias-dropped",
     "A forged alias of a live handle dropped, then the original used and dropped at the end.",
     create("i32", [2, 2], fill="ramp"),
     forge_pick(0, "drop"),
     shape(0),
     ret_none())

seed("13-forged-alias-returned-twice",
     "A live handle and its forged alias both returned under two keys.",
     create("i32", [1, 3], fill="ramp"),
     forge_pick(0, "keep"),
     ret_tensors([("x", 0), ("y", 0)]))

seed("14-handle-flood",
     "1100 live handles against a limit of 1000: refused once, then the guest insists.",
     handles(1100),
     create("i32", [1], fill="ramp"),
     ret_none())

seed("15-generate-many-64",
     "generate-many with 64 requests (one reused), then 64 distinct ones with edge settings.",
     genmany_same(64, request()),
     genmany_each([request(rid="same", ids=ids_same(2**32 - 1, 2), max_new=1),
                   request(n_samples=0),
                   request(ids=ids_ramp(0)),
                   request(max_tokens=2, ids=ids_ramp(3))] * 16),
     version(),
     ret_none())

seed("16-generate-many-4097",
     "generate-many with 4097 requests: one past the host's per-call cap.",
     genmany_same(4097, request(ids=ids_ramp(1), max_new=1)),
     ret_none())

seed("17-generate-edges",
     "generate with ids near u32::MAX, max-tokens/max-new-tokens/min-new-tokens at u32::MAX,",
     "n-samples 0 and u32::MAX, an empty prompt, no room under max-tokens, NaN/inf sampling,",
     "4096 stop ids, 16 stop strings, images, a long rid and a seed.",
     gen(request(ids=ids_list([2**32 - 1, 2**32 - 2, 2**31 - 1, 100000]), max_tokens=2**32 - 1,
                 max_new=2**32 - 1, min_new=2**32 - 1, ignore_eos=True)),
     gen(request(n_samples=0)),
     gen(request(n_samples=2**32 - 1)),
     gen(request(ids=ids_ramp(0))),
     gen(request(ids=ids_ramp(4), max_tokens=3)),
     gen(request(temperature="nan", top_p="0", top_k=0, frequency_penalty="inf", greedy=False,
                 seed=2**64 - 1)),
     gen(request(stop_ids=ids_ramp(4096), exclude_default_stops=True,
                 stops=[text_special("<|im_end|>", 1)] * 16, images=[text_json("not json")],
                 rid="r" * 1000, seed=0x0123456789ABCDEF, metadata="not json")),
     gen(request(ids=ids_same(0, 4097), max_new=1 << 20, max_tokens=2**32 - 1)),
     ret_none())

seed("18-encode-200kb-word",
     "Encode a 200 KB single word, special tokens run together, and odd unicode.",
     encode(text_run("a", 200_000)),
     encode(text_special("<|im_start|>", 255), add_special=True),
     encode(text_odd(list(range(16)) * 4)),
     encode(text_raw(bytes(range(256))[:255])),
     encode(text_empty()),
     special(),
     ret_none())

seed("19-decode-edges",
     "Decode ids out of the vocabulary and at u32::MAX, with and without skipping specials.",
     decode(ids_list([2**32 - 1, 2**32 - 2, 49152, 100000, 0, 2])),
     decode(ids_list([2**32 - 1]), skip_special=True),
     decode(ids_ramp(4096)),
     decode(ids_ramp(0)),
     ret_none())

seed("20-chat-template-garbage",
     "Chat templates fed garbage: deep nesting, wrong types, invalid tools/extra JSON, keyword",
     "arguments that clash with the template's own, and a 200 KB content.",
     apply(msgs_deep(100_000)),
     render(msgs_deep(129)),
     apply(msgs_static(5)),
     render(msgs_typed([("user", "{}"), ("", "5"), ("tool", "null")])),
     apply(msgs_static(0), options(tools="not json", extra='{"messages":1}')),
     render(msgs_static(8), options(False, tools="calc-schema", extra="garbage")),
     apply(msgs_dynamic([("user", text_run("a", 200_000))])),
     render(msgs_text(text_json("{% for x in range(100000000) %}x{% endfor %}"))),
     render(msgs_static(10),
            options(extra='{"tools":[{"x":1}],"documents":null,"raise_exception":1}')),
     ret_none())

seed("21-rewards",
     "Rewards: a panicking, a huge-error, an allocating and a spinning component, an unknown",
     "long name, and garbage rows.",
     score("faulty", row='{"mode":"panic"}'),
     score("faulty", row='{"mode":"huge"}'),
     score("faulty", row='{"mode":"alloc"}'),
     score("r" * 300),
     score("const", prompt=text_run("a", 1 << 20), row="not json"),
     score("spin"),
     score("faulty\0", completion_ids=ids_list([2**32 - 1])),
     rnames(),
     ret_none())

seed("22-tools",
     "Tools: unknown and long names, and 4 MiB of arguments (past the tool's 1 MiB boundary).",
     tool("t" * 300, text_empty()),
     tool("nope", text_json("{}")),
     tool("echo", text_run("a", 4 << 20)),
     tool("echo", text_json('{"a":')),
     tool("", text_empty()),
     tnames(),
     ret_none())

seed("23-logs-stats-output",
     "Log lines of every level at 4 MiB, stats with NaN/inf and huge keys, stdout and stderr",
     "floods.",
     *[log(level, text_run("😀", 4 << 20)) for level in LEVELS],
     stat(text_words(4 << 20), "nan"),
     stat(text_empty(), "inf"),
     stat(text_odd([0, 5, 10]), "denormal_min"),
     prints(True, text_run("a", 4 << 20)),
     prints(False, text_run("\n", 65536)),
     ret_none())

seed("24-valid-accepted",
     "A valid AReaL trajectory: must be accepted.",
     valid(3),
     ret_valid())

seed("25-valid-concat-padded",
     "VALID dicts of lengths 3, 64 and 0 (with an extra [1, L, 2] key) concat-padded with NaN,",
     "-inf and 1e300 padding, then a valid one returned.",
     valid(3),
     valid(64, x3=True),
     valid(0),
     cpad_valid(3, "nan"),
     cpad_valid(8, "-inf"),
     cpad_valid(0, "1e300"),
     valid(7, attention_i32=True),
     cpad_valid(2, "0"),
     ret_valid())

seed("26-unsqueeze-edges",
     "unsqueeze at rank, rank + 1 and u32::MAX, on a rank-16 tensor and a scalar.",
     create("i32", [1] * 16, fill="ramp"),
     create("f32", [], fill="edge"),
     unsq(0, 16),
     unsq(0, 17),
     unsq(0, 2**31 - 1),
     unsq(1, 0),
     unsq(1, 1),
     unsq(1, 2),
     unsq(1, 2**32 - 1),
     ret_none())

seed("27-concat-edges",
     "concat of nothing, of scalars, of mixed dtypes, and of a zero-row with a full tensor.",
     concat_each([]),
     create("i32", [], fill="ramp"),
     create("i64", [2], fill="edge"),
     create("i32", [0, 3], fill="zeros"),
     create("i32", [2, 3], fill="ramp"),
     concat_each([0, 0]),
     concat_each([0, 1]),
     concat_each([2, 3, 2]),
     concat_same(1000, 2),
     ret_none())

seed("28-create-mismatches",
     "create with data one too long, one too short, empty, 65535 elements, capped data for",
     "[65536, 65536] and [2147483648], random bf16/bool data, and every dtype at rank 0.",
     create("i32", [2, 3], length="plus1"),
     create("i32", [2, 3], length="minus1"),
     create("f32", [2, 3], length="zero"),
     create("u8", [2, 3], length=65535),
     create("i64", [65536, 65536]),
     create("bool", [2**31]),
     create("bf16", [4, 4], fill=0xDEADBEEF),
     create("bool", [3, 3], fill=7),
     *[create(d, [], fill="edge") for d in DTYPES],
     create("f32", [255, 255, 255], fill="edge"),
     ret_none())

seed("29-concat-padded-odd-keys",
     "concat-padded with duplicated keys, empty/odd/long/reserved keys, mismatched key sets,",
     "zero dicts and eight dicts.",
     create("i32", [1, 2], fill="ramp"),
     create("i32", [1, 3], fill="ramp"),
     cpad_each([[("x", 0), ("x", 1)], [("x", 0)]]),
     cpad_each([[("", 0)], [("", 1)]]),
     cpad_each([[(LONG_KEY, 0)], [(LONG_KEY, 1)]]),
     cpad_each([[("__metadata__", 0)], [("__metadata__", 1)]]),
     cpad_each([[("attention_mask", 0)], [("y", 1)]]),
     cpad_each([]),
     cpad_shared(["input_ids", "attention_mask"], [[0, 1]] * 8, pad="-0"),
     ret_none())

seed("30-invalid-metadata",
     "A valid trajectory whose metadata is not JSON.",
     valid(3),
     ret_valid(meta="not json"))

seed("31-metadata-nan",
     "A valid trajectory whose metadata holds NaN (not JSON).",
     valid(1),
     ret_valid(meta='{"k":NaN}'))

seed("32-huge-error",
     "Err with a 4 MiB message.",
     ret_err(text_run("😀", 4 << 20)))

seed("33-mixed-after-refusal",
     "The tensor byte budget refused once (a 16 MiB tensor concatenated 8 times), then the guest",
     "keeps calling other interfaces.",
     create("u8", [1 << 24], fill="zeros"),
     concat_same(8, 0),
     encode(text_ascii("hello")),
     gen(request()),
     log("info", text_ascii("still here")),
     create("u8", [1 << 24], fill="zeros"),
     concat_same(8, 1),
     ret_none())


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (description, program) in sorted(SEEDS.items()):
        lines = [f"# {line}" for line in description]
        lines.append(program.hex())
        (OUT / f"{name}.hex").write_text("\n".join(lines) + "\n")
        print(f"{name}: {len(program)} bytes")


if __name__ == "__main__":
    main()
