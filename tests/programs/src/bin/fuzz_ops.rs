//! Fuzz target for the host-call boundary: runs the row's `program` (lowercase hex) as a
//! program of host calls against every interface the workflow world imports.
//!
//! Driven by `tests/tests/fuzz.rs`. The seed programs in `tests/fixtures/fuzz/corpus/` are
//! written by `scripts/fixtures/fuzz_corpus.py`, which mirrors the encoding below exactly (change both
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

#[path = "../fuzz_ops/interp.rs"]
mod interp;
#[path = "../fuzz_ops/reader.rs"]
mod reader;
#[path = "../fuzz_ops/tables.rs"]
mod tables;

use rollbox_sdk::bindings::workflow::Guest;
use rollbox_sdk::bindings::workflow::rollbox::workflow::episode::{EpisodeInput, EpisodeOutput};

use interp::*;

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
