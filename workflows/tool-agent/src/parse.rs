//! Tool-call parsers and observation text: pure functions over the decoded assistant text,
//! tested against fixtures (`tests/parsers.json`) without a host.

use serde_json::{Map, Value};

/// Opening tag of a Hermes tool call.
pub const HERMES_OPEN: &str = "<tool_call>";
/// Closing tag of a Hermes tool call.
pub const HERMES_CLOSE: &str = "</tool_call>";

/// One tool call the model wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    /// The tool name.
    pub name: String,
    /// The arguments, a JSON object.
    pub arguments: Map<String, Value>,
}

/// Why a written call cannot be run. It becomes the call's observation
/// (`error: <kind>: <detail>`), not a failed episode.
#[derive(Debug, Clone, PartialEq)]
pub struct Invalid {
    /// `invalid_json` or `invalid_call`.
    pub kind: &'static str,
    /// What is wrong, for the model to read.
    pub detail: String,
}

/// The calls of one assistant turn, in the order written.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Parsed {
    /// Each call, or why it cannot run.
    pub calls: Vec<Result<Call, Invalid>>,
    /// A call was opened and never closed (a turn cut by length ends the episode there).
    pub unclosed: bool,
}

/// Longest call body parsed, bytes; a longer one is invalid without being parsed.
pub const MAX_CALL_BYTES: usize = 256 << 10;

/// Hermes tool calls (Qwen2.5, Hermes 2 Pro): every `<tool_call>{"name": ..., "arguments":
/// ...}</tool_call>` in `text`, with `arguments` a JSON object or a JSON string holding one
/// (missing means `{}`).
pub fn hermes(text: &str) -> Parsed {
    let mut out = Parsed::default();
    let mut rest = text;
    while let Some(start) = rest.find(HERMES_OPEN) {
        let body_start = &rest[start + HERMES_OPEN.len()..];
        let Some(end) = body_start.find(HERMES_CLOSE) else {
            out.unclosed = true;
            break;
        };
        out.calls.push(hermes_call(&body_start[..end]));
        rest = &body_start[end + HERMES_CLOSE.len()..];
    }
    out
}

fn hermes_call(body: &str) -> Result<Call, Invalid> {
    let invalid = |kind, detail: String| Err(Invalid { kind, detail });
    let body = body.trim();
    if body.len() > MAX_CALL_BYTES {
        return invalid(
            "invalid_call",
            format!("the call is {} bytes; at most {MAX_CALL_BYTES}", body.len()),
        );
    }
    let value: Value = match serde_json::from_str(body) {
        Ok(v) => v,
        Err(e) => return invalid("invalid_json", format!("{e}")),
    };
    let Value::Object(mut obj) = value else {
        return invalid(
            "invalid_call",
            "the call is not a JSON object; write {\"name\": ..., \"arguments\": {...}}".into(),
        );
    };
    let name = match obj.remove("name") {
        Some(Value::String(n)) if !n.is_empty() => n,
        _ => return invalid("invalid_call", "the call has no `name` string".into()),
    };
    let arguments = match obj.remove("arguments") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(a)) => a,
        Some(Value::String(s)) => match serde_json::from_str(&s) {
            Ok(Value::Object(a)) => a,
            Ok(_) => {
                return invalid(
                    "invalid_call",
                    "`arguments` is a string that does not hold a JSON object".into(),
                );
            }
            Err(e) => return invalid("invalid_json", format!("in `arguments`: {e}")),
        },
        Some(_) => {
            return invalid("invalid_call", "`arguments` is not a JSON object".into());
        }
    };
    Ok(Call { name, arguments })
}

/// AReaL TIR's stop markers: where the code of a block opened by `start` and closed by `end`
/// begins and ends in `text`, the text of one segment generated after `start` was produced.
/// `Some(code)` when `end` closes the block; `None` when it never does (a cut turn).
pub fn marked_code<'a>(after_start: &'a str, end: &str) -> Option<&'a str> {
    let close = after_start.find(end)?;
    Some(after_start[..close].trim_matches('\n'))
}

/// Whether a segment stopped on the start marker (its text ends with it, allowing for
/// trailing whitespace and the end-of-turn token's text).
pub fn ends_with_marker(text: &str, marker: &str, eos_text: Option<&str>) -> bool {
    let mut t = text.trim_end();
    if let Some(eos) = eos_text.filter(|e| !e.is_empty()) {
        t = t.strip_suffix(eos).unwrap_or(t).trim_end();
    }
    !marker.is_empty() && t.ends_with(marker)
}

/// Marker inserted where an over-long output was cut.
pub const TRUNCATION_MARKER: &str = "...(truncated)...";

/// `text` cut to at most `max_chars` characters (plus the marker) by dropping its middle, so
/// the start and the end (where errors and results usually are) stay.
pub fn truncate_middle(text: &str, max_chars: usize) -> String {
    let n = text.chars().count();
    if n <= max_chars {
        return text.to_string();
    }
    let head = max_chars.div_ceil(2);
    let tail = max_chars - head;
    let mut out: String = text.chars().take(head).collect();
    out.push_str(TRUNCATION_MARKER);
    out.extend(text.chars().skip(n - tail));
    out
}

/// An observation for a call that did not produce output: `error: <kind>: <detail>`.
pub fn error_observation(kind: &str, detail: &str) -> String {
    format!("error: {kind}: {detail}")
}
