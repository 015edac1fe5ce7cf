//! Chat templates, rendered the way `transformers` renders them: jinja2 with `trim_blocks`,
//! `lstrip_blocks` and loop controls; Python string methods on values; `tojson` as
//! `json.dumps(ensure_ascii=False)`; `raise_exception` and `strftime_now` globals; the special
//! token texts (`bos_token`, `eos_token`, ...) and any extra keyword arguments in the context.

use std::fmt::Write as _;

use minijinja::value::{Kwargs, Value as JValue};
use minijinja::{Environment, Error, ErrorKind};
use serde_json::Value;

use crate::{MAX_TEXT_BYTES, TokenizerError};

/// Options of a chat-template call (`apply_chat_template`'s keyword arguments).
#[derive(Debug, Clone, PartialEq)]
pub struct ChatOptions {
    /// Append the assistant header. Default true.
    pub add_generation_prompt: bool,
    /// Tool definitions (a JSON array), passed as `tools`.
    pub tools: Option<Value>,
    /// Extra template variables (a JSON object), e.g. `{"enable_thinking": false}`.
    pub extra: Option<Value>,
}

impl Default for ChatOptions {
    fn default() -> Self {
        ChatOptions {
            add_generation_prompt: true,
            tools: None,
            extra: None,
        }
    }
}

/// A compiled chat template with its fixed context (special token texts).
pub(crate) struct ChatTemplate {
    env: Environment<'static>,
    specials: Vec<(&'static str, Option<String>)>,
}

fn template_error(e: &Error) -> TokenizerError {
    let mut message = e
        .detail()
        .map(str::to_string)
        .unwrap_or_else(|| e.kind().to_string());
    if let Some(source) = std::error::Error::source(e) {
        let _ = write!(message, ": {source}");
    }
    TokenizerError::Template {
        line: e.line(),
        message,
    }
}

impl ChatTemplate {
    pub(crate) fn new<const N: usize>(
        source: &str,
        specials: [(&'static str, Option<String>); N],
    ) -> Result<Self, TokenizerError> {
        let mut env = Environment::new();
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .build()
            .map_err(|e| template_error(&e))?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_function("raise_exception", raise_exception);
        env.add_function("strftime_now", strftime_now);
        env.add_filter("tojson", tojson);
        env.add_template_owned("chat", source.to_string())
            .map_err(|e| template_error(&e))?;
        Ok(ChatTemplate {
            env,
            specials: specials.into_iter().collect(),
        })
    }

    pub(crate) fn render(
        &self,
        messages: &Value,
        options: &ChatOptions,
    ) -> Result<String, TokenizerError> {
        if !messages.is_array() {
            return Err(TokenizerError::Invalid(
                "messages must be a JSON array of {\"role\", \"content\"} objects".into(),
            ));
        }
        // The context is built as template values directly (one walk over the messages; no
        // serde_json copy of them). Later keys win, as keyword arguments do in transformers.
        let mut ctx = std::collections::BTreeMap::<String, JValue>::new();
        for (k, v) in &self.specials {
            if let Some(v) = v {
                ctx.insert(k.to_string(), JValue::from(v.as_str()));
            }
        }
        if let Some(Value::Object(extra)) = &options.extra {
            for (k, v) in extra {
                ctx.insert(k.to_string(), JValue::from(minijinja::value::Serde(v)));
            }
        } else if options.extra.as_ref().is_some_and(|e| !e.is_null()) {
            return Err(TokenizerError::Invalid(
                "extra template arguments must be a JSON object".into(),
            ));
        }
        ctx.insert(
            "messages".into(),
            JValue::from(minijinja::value::Serde(messages)),
        );
        ctx.insert(
            "add_generation_prompt".into(),
            JValue::from(options.add_generation_prompt),
        );
        if let Some(tools) = &options.tools {
            ctx.insert("tools".into(), JValue::from(minijinja::value::Serde(tools)));
        }
        let template = self
            .env
            .get_template("chat")
            .map_err(|e| template_error(&e))?;
        let ctx = JValue::from(ctx);
        let out = template.render(ctx).map_err(|e| template_error(&e))?;
        if out.len() > MAX_TEXT_BYTES {
            return Err(TokenizerError::Invalid(format!(
                "the rendered chat is {} bytes, over the {MAX_TEXT_BYTES} byte limit",
                out.len()
            )));
        }
        Ok(out)
    }
}

fn raise_exception(message: String) -> Result<JValue, Error> {
    Err(Error::new(ErrorKind::InvalidOperation, message))
}

/// `strftime_now(format)`: the current UTC time formatted with the common `%` codes.
fn strftime_now(format: String) -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    strftime(&format, secs)
}

pub(crate) fn strftime(format: &str, unix: i64) -> String {
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    const DAYS: [&str; 7] = [
        "Thursday",
        "Friday",
        "Saturday",
        "Sunday",
        "Monday",
        "Tuesday",
        "Wednesday",
    ];
    let days = unix.div_euclid(86_400);
    let rem = unix.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let weekday = DAYS[days.rem_euclid(7) as usize];
    let month = MONTHS[(m - 1) as usize];
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('Y') => {
                let _ = write!(out, "{y:04}");
            }
            Some('m') => {
                let _ = write!(out, "{m:02}");
            }
            Some('d') => {
                let _ = write!(out, "{d:02}");
            }
            Some('-') if chars.clone().next() == Some('d') => {
                chars.next();
                let _ = write!(out, "{d}");
            }
            Some('H') => {
                let _ = write!(out, "{:02}", rem / 3600);
            }
            Some('M') => {
                let _ = write!(out, "{:02}", rem % 3600 / 60);
            }
            Some('S') => {
                let _ = write!(out, "{:02}", rem % 60);
            }
            Some('B') => out.push_str(month),
            Some('b') => out.push_str(&month[..3]),
            Some('A') => out.push_str(weekday),
            Some('a') => out.push_str(&weekday[..3]),
            Some('%') => out.push('%'),
            Some(other) => {
                out.push('%');
                out.push(other);
            }
            None => out.push('%'),
        }
    }
    out
}

/// `tojson(indent=None, sort_keys=False)`: Python's `json.dumps(x, ensure_ascii=False)`.
fn tojson(value: JValue, kwargs: Kwargs) -> Result<JValue, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    let sort_keys: Option<bool> = kwargs.get("sort_keys")?;
    let _: Option<JValue> = kwargs.get("ensure_ascii")?;
    let _: Option<JValue> = kwargs.get("separators")?;
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(&value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("tojson: {e}")))?;
    let mut out = String::new();
    python_json(&json, indent, sort_keys.unwrap_or(false), 0, &mut out);
    Ok(JValue::from_safe_string(out))
}

/// Serialise like Python's `json.dumps`: `", "` and `": "` separators (`","` between items when
/// indenting), non-ASCII kept, floats as Python's `repr`.
pub(crate) fn python_json(
    v: &Value,
    indent: Option<usize>,
    sort_keys: bool,
    level: usize,
    out: &mut String,
) {
    let newline = |out: &mut String, level: usize| {
        if let Some(n) = indent {
            out.push('\n');
            out.push_str(&" ".repeat(n * level));
        }
    };
    let item_sep = if indent.is_some() { "," } else { ", " };
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            if n.is_f64() {
                out.push_str(&python_float(n.as_f64().unwrap_or(0.0)));
            } else {
                out.push_str(&n.to_string());
            }
        }
        Value::String(s) => python_string(s, out),
        Value::Array(items) => {
            if items.is_empty() {
                out.push_str("[]");
                return;
            }
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                python_json(item, indent, sort_keys, level + 1, out);
            }
            newline(out, level);
            out.push(']');
        }
        Value::Object(map) => {
            if map.is_empty() {
                out.push_str("{}");
                return;
            }
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            if sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            out.push('{');
            for (i, (k, val)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline(out, level + 1);
                python_string(k, out);
                out.push_str(": ");
                python_json(val, indent, sort_keys, level + 1, out);
            }
            newline(out, level);
            out.push('}');
        }
    }
}

fn python_string(s: &str, out: &mut String) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{08}' => out.push_str("\\b"),
            '\u{0c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Python's `repr(float)`: shortest round-trip digits, `.0` on integral values, exponent form
/// below 1e-4 and from 1e16.
fn python_float(x: f64) -> String {
    if x.is_nan() {
        return "NaN".into();
    }
    if x.is_infinite() {
        return if x > 0.0 {
            "Infinity".into()
        } else {
            "-Infinity".into()
        };
    }
    let a = x.abs();
    if a != 0.0 && !(1e-4..1e16).contains(&a) {
        let s = format!("{x:e}");
        let (mantissa, exp) = s.split_once('e').unwrap_or((&s, "0"));
        let (sign, digits) = match exp.strip_prefix('-') {
            Some(d) => ('-', d),
            None => ('+', exp),
        };
        return format!("{mantissa}e{sign}{digits:0>2}");
    }
    if x.fract() == 0.0 {
        format!("{x:.1}")
    } else {
        format!("{x}")
    }
}

#[cfg(test)]
mod tests;
