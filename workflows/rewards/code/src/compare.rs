//! Output comparisons, made by the reward after the program's instance is gone: on the text it
//! printed, or on the JSON value its function returned, never on an object the program built.

use serde_json::Value;

/// Python's `str.isspace` for one character: Unicode white space plus the information
/// separators `\x1c`-`\x1f`, which Python strips and Rust's `char::is_whitespace` does not.
fn py_space(c: char) -> bool {
    c.is_whitespace() || ('\x1c'..='\x1f').contains(&c)
}

/// Python's `str.strip()`.
pub fn py_strip(s: &str) -> &str {
    s.trim_matches(py_space)
}

/// Python's `str.splitlines()`: `\n`, `\r`, `\r\n`, `\v`, `\f`, `\x1c`-`\x1e`, `\x85`,
/// `\u2028`, `\u2029` end a line; a final line ending adds no empty line.
pub fn py_splitlines(s: &str) -> Vec<&str> {
    let mut lines = Vec::new();
    let mut start = 0;
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        let ends = matches!(
            c,
            '\n' | '\r'
                | '\x0b'
                | '\x0c'
                | '\x1c'
                | '\x1d'
                | '\x1e'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        );
        if !ends {
            continue;
        }
        lines.push(&s[start..i]);
        let mut next = i + c.len_utf8();
        if c == '\r'
            && let Some(&(j, '\n')) = chars.peek()
        {
            chars.next();
            next = j + 1;
        }
        start = next;
    }
    if start < s.len() {
        lines.push(&s[start..]);
    }
    lines
}

/// Python's `float(text)` for the forms a program prints: surrounding white space allowed,
/// `inf`/`nan` in any case, `_` between digits.
fn py_float(text: &str) -> Option<f64> {
    let t = py_strip(text);
    if t.is_empty() {
        return None;
    }
    let cleaned: String;
    let t = if t.contains('_') {
        let b = t.as_bytes();
        for (i, &c) in b.iter().enumerate() {
            let between =
                i > 0 && i + 1 < b.len() && b[i - 1].is_ascii_digit() && b[i + 1].is_ascii_digit();
            if c == b'_' && !between {
                return None;
            }
        }
        cleaned = t.replace('_', "");
        &cleaned
    } else {
        t
    };
    let lower = t.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if matches!(body, "inf" | "infinity" | "nan") {
        return t.parse().ok();
    }
    if !body
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | '+' | '-'))
    {
        return None;
    }
    t.parse().ok()
}

/// numpy's `isclose` with `allclose`'s defaults: `|a - b| <= 1e-8 + 1e-5 * |b|`; infinities
/// equal only themselves, NaN nothing.
fn close(a: f64, b: f64) -> bool {
    if a.is_nan() || b.is_nan() {
        return false;
    }
    if a.is_infinite() || b.is_infinite() {
        return a == b;
    }
    (a - b).abs() <= 1e-8 + 1e-5 * b.abs()
}

/// `str.isdigit()` for the ASCII digits (the int-like check before the float tolerance).
fn int_like(s: &str) -> bool {
    !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit())
}

/// Whether printed `out` answers `expected` under the APPS harness's rules, as verl's
/// `prime_code` applies them: equal after stripping the whole text or each line; equal line
/// lists once empty lines are dropped (expected lines stripped); else, when the line counts
/// match and not every pair is integer-like, every line a number within numpy's `allclose`.
pub fn prime_stdio(out: &str, expected: &str) -> bool {
    let lines = py_splitlines(out);
    if py_strip(&lines.join("\n")) == py_strip(expected) {
        return true;
    }
    let stripped: Vec<&str> = lines.iter().map(|l| py_strip(l)).collect();
    if py_strip(&stripped.join("\n")) == py_strip(expected) {
        return true;
    }
    let want: Vec<&str> = expected
        .split('\n')
        .filter(|x| !x.is_empty())
        .map(py_strip)
        .collect();
    if lines == want {
        return true;
    }
    let got: Vec<&str> = lines.iter().copied().filter(|l| !l.is_empty()).collect();
    if got == want {
        return true;
    }
    if got.len() == want.len()
        && !got
            .iter()
            .zip(&want)
            .all(|(a, b)| int_like(a) && int_like(b))
    {
        let pairs: Option<Vec<(f64, f64)>> = got
            .iter()
            .zip(&want)
            .map(|(a, b)| Some((py_float(a)?, py_float(b)?)))
            .collect();
        if let Some(pairs) = pairs {
            return pairs.iter().all(|&(a, b)| close(a, b));
        }
    }
    false
}

/// SandboxFusion's rule: the printed text equals the expected output once trailing newlines
/// are dropped from both, nothing else forgiven.
pub fn sandbox_fusion_stdio(out: &str, expected: &str) -> bool {
    out.trim_end_matches('\n') == expected.trim_end_matches('\n')
}

/// Integers with more digits than this are kept as text by [`parse_json`] (an `i64` or `u64`
/// holds every integer of 18 digits).
const EXACT_DIGITS: usize = 18;

/// How [`parse_json`] keeps an integer too long for `i64`/`u64`: a string with this prefix.
const BIG_INT: &str = "\u{0}int:";

/// [`BIG_INT`] as it opens a JSON string (`serde_json` writes NUL as `\u0000`).
const BIG_INT_JSON: &str = "\"\\u0000int:";

/// JSON text as a [`Value`], with integers of more than 18 digits kept exactly (Python's ints
/// are unbounded; `serde_json` would round them to `f64`, and `n! + 1` would equal `n!`).
pub fn parse_json(text: &str) -> serde_json::Result<Value> {
    let b = text.as_bytes();
    let mut tagged = 0;
    let mut out = String::with_capacity(text.len());
    let (mut i, mut start) = (0, 0);
    let mut in_string = false;
    while i < b.len() {
        let c = b[i];
        if in_string {
            match c {
                b'\\' => i += 1,
                b'"' => in_string = false,
                _ => {}
            }
            i += 1;
            continue;
        }
        if c == b'"' {
            in_string = true;
            i += 1;
            continue;
        }
        if c == b'-' || c.is_ascii_digit() {
            let mut j = i + 1;
            while j < b.len()
                && (b[j].is_ascii_digit() || matches!(b[j], b'.' | b'e' | b'E' | b'+' | b'-'))
            {
                j += 1;
            }
            let token = &text[i..j];
            let digits = token.trim_start_matches('-');
            if digits.len() > EXACT_DIGITS && digits.bytes().all(|d| d.is_ascii_digit()) {
                out.push_str(&text[start..i]);
                out.push_str(BIG_INT_JSON);
                out.push_str(token);
                out.push('"');
                start = j;
                tagged += 1;
            }
            i = j;
            continue;
        }
        i += 1;
    }
    let value: Value = if start == 0 {
        serde_json::from_str(text)?
    } else {
        out.push_str(&text[start..]);
        serde_json::from_str(&out)?
    };
    // A string of the program's that reads as the tag (however its JSON escapes spell it)
    // would be taken for an integer, a result of "\u0000int:55" equal to 55: refused, the case
    // is an error.
    if tags(&value) != tagged {
        return Err(serde::de::Error::custom(
            "a string starting with NUL and `int:` (how the grader keeps big integers)",
        ));
    }
    Ok(value)
}

/// `v` as JSON text, the big integers [`parse_json`] kept written back as numbers (so they
/// reach a program exactly as they came).
pub fn to_json(v: &Value) -> String {
    let text = v.to_string();
    let mut out = String::with_capacity(text.len());
    let mut rest = text.as_str();
    while let Some(at) = rest.find(BIG_INT_JSON) {
        out.push_str(&rest[..at]);
        let after = &rest[at + BIG_INT_JSON.len()..];
        // The tag's digits end at the string's closing quote.
        match after.find('"') {
            Some(end) => {
                out.push_str(&after[..end]);
                rest = &after[end + 1..];
            }
            None => {
                out.push_str(&rest[at..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// Strings (keys included) in `v` that start as [`BIG_INT`] does.
fn tags(v: &Value) -> usize {
    match v {
        Value::String(s) => usize::from(s.starts_with(BIG_INT)),
        Value::Array(items) => items.iter().map(tags).sum(),
        Value::Object(map) => map
            .iter()
            .map(|(k, v)| usize::from(k.starts_with(BIG_INT)) + tags(v))
            .sum(),
        _ => 0,
    }
}

/// A big integer [`parse_json`] kept, as its sign and digits without leading zeros.
fn big_int(v: &Value) -> Option<(bool, &str)> {
    let t = v.as_str()?.strip_prefix(BIG_INT)?;
    let (neg, digits) = match t.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, t),
    };
    let digits = digits.trim_start_matches('0');
    Some((
        neg && !digits.is_empty(),
        if digits.is_empty() { "0" } else { digits },
    ))
}

/// Python's `==` between a big integer and another value.
fn big_eq((neg, digits): (bool, &str), other: &Value) -> bool {
    if let Some(o) = big_int(other) {
        return (neg, digits) == o;
    }
    let text = match other {
        Value::Number(n) if n.is_i64() || n.is_u64() => n.to_string(),
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.is_finite() && f.fract() == 0.0 => format!("{f:.0}"),
            _ => return false,
        },
        _ => return false,
    };
    let (o_neg, o_digits) = match text.strip_prefix('-') {
        Some(d) => (true, d),
        None => (false, text.as_str()),
    };
    (neg, digits) == (o_neg && o_digits != "0", o_digits)
}

/// Python's `==` on JSON-decoded values: numbers and booleans compare by value (`True == 1`,
/// `2 == 2.0`, big integers exactly), lists element by element, dicts by key set and values.
pub fn py_eq(a: &Value, b: &Value) -> bool {
    if let Some(x) = big_int(a) {
        return big_eq(x, b);
    }
    if let Some(y) = big_int(b) {
        return big_eq(y, a);
    }
    match (a, b) {
        (Value::Null, Value::Null) => true,
        (Value::String(x), Value::String(y)) => x == y,
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| py_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| py_eq(v, w)))
        }
        _ => match (number(a), number(b)) {
            (Some(x), Some(y)) => x.eq(&y),
            _ => false,
        },
    }
}

/// A number or boolean, as an exact integer where it is one.
#[derive(PartialEq)]
enum Num {
    Int(i128),
    Float(f64),
}

impl Num {
    fn eq(&self, other: &Num) -> bool {
        match (self, other) {
            (Num::Int(a), Num::Int(b)) => a == b,
            (Num::Float(a), Num::Float(b)) => a == b,
            (Num::Int(i), Num::Float(f)) | (Num::Float(f), Num::Int(i)) => {
                f.fract() == 0.0 && f.is_finite() && (*f as i128) == *i && (*i as f64) == *f
            }
        }
    }
}

fn number(v: &Value) -> Option<Num> {
    match v {
        Value::Bool(b) => Some(Num::Int(i128::from(*b))),
        Value::Number(n) => {
            if let Some(i) = n.as_i64() {
                Some(Num::Int(i128::from(i)))
            } else if let Some(u) = n.as_u64() {
                Some(Num::Int(i128::from(u)))
            } else {
                n.as_f64().map(Num::Float)
            }
        }
        _ => None,
    }
}

/// A dict whose keys all read as integers, with them written as Python's `int(k)` would print
/// them (verl converts such dicts' keys to `int`).
fn int_keyed(map: &serde_json::Map<String, Value>) -> Option<Value> {
    let mut out = serde_json::Map::new();
    for (k, v) in map {
        let n: i128 = py_strip(k).replace('_', "").parse().ok()?;
        out.insert(n.to_string(), v.clone());
    }
    Some(Value::Object(out))
}

/// Whether a function's `result` answers `expected` under verl's `prime_code` call-based rules:
/// an expected dict with integer keys is wrapped in a list (as verl's key conversion does);
/// the result passes when equal to the expected value or, for a non-empty expected list, to
/// its first element. Tuples arrive as lists (JSON has no tuples).
pub fn prime_call(result: &Value, expected: &Value) -> bool {
    let mut exp = expected.clone();
    if let Value::Object(m) = &exp
        && let Some(converted) = int_keyed(m)
    {
        exp = Value::Array(vec![converted]);
    } else if let Value::Array(items) = &exp
        && let Some(Value::Object(m)) = items.first()
        && let Some(converted) = int_keyed(m)
    {
        exp = Value::Array(vec![converted]);
    }
    if py_eq(result, &exp) {
        return true;
    }
    matches!(&exp, Value::Array(items) if items.first().is_some_and(|first| py_eq(result, first)))
}

/// What SandboxFusion's call-based wrapper prints for a result: JSON for a dict, list, None or
/// bool (Python's `json.dumps`, which the program's instance already produced as `json`), the
/// string itself for a string, `str()` (the same text as JSON) for a number.
pub fn sandbox_fusion_printed(result_json: &str, result: &Value) -> String {
    match result {
        Value::String(s) if big_int(result).is_none() => s.clone(),
        _ => result_json.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn big_integers_print_as_their_digits_and_cannot_be_forged() {
        let text = "354224848179261915075";
        let v = parse_json(text).expect("a big integer");
        assert_eq!(sandbox_fusion_printed(text, &v), text);
        assert!(prime_call(&v, &v));
        assert!(parse_json("\"\\u0000int:354224848179261915075\"").is_err());
        assert!(parse_json("[1, {\"\\u0000int:5\": 2}]").is_err());
        assert!(parse_json("\"\\u0000\\u0069nt:5\"").is_err());
        // Kept and written back as the same number.
        let mixed = "[123456789012345678901234,{\"a\":-98765432109876543210},\"x\",1]";
        assert_eq!(to_json(&parse_json(mixed).expect("json")), mixed);
        assert_eq!(
            parse_json("[\"int:5\", 3]").expect("a string like the tag, without NUL"),
            serde_json::json!(["int:5", 3])
        );
    }

    #[test]
    fn splitlines_as_python() {
        assert_eq!(py_splitlines("a\nb\r\nc\rd\n"), vec!["a", "b", "c", "d"]);
        assert_eq!(py_splitlines("a\n\nb"), vec!["a", "", "b"]);
        assert_eq!(py_splitlines(""), Vec::<&str>::new());
        assert_eq!(py_splitlines("x\u{2028}y\x0cz"), vec!["x", "y", "z"]);
    }

    #[test]
    fn prime_stdio_rules() {
        // The cases verl's own harness was seen to pass and fail.
        assert!(prime_stdio("3\n", "3"));
        assert!(prime_stdio("\n3\n\n", "3\n"));
        assert!(prime_stdio("1 2 \n3\n", "1 2\n3\n"));
        assert!(prime_stdio("1\n\n2\n", "1\n2\n"));
        assert!(prime_stdio("", ""));
        assert!(prime_stdio("", "\n"));
        assert!(!prime_stdio("1\n \n2\n", "1\n2\n"));
        assert!(!prime_stdio("1  2\n", "1 2\n"));
        assert!(!prime_stdio("yes\n", "YES\n"));
        assert!(!prime_stdio("01\n", "1\n"));
        assert!(prime_stdio("-1.0\n", "-1\n"));
        assert!(prime_stdio("0.3333333\n", "0.333333333\n"));
        assert!(!prime_stdio("1.0001\n", "1.0\n"));
        assert!(!prime_stdio("1.0 2.0\n", "1 2\n"));
        assert!(!prime_stdio("nan\n", "0.0\n"));
        assert!(prime_stdio("inf\n", "inf\n"));
    }

    #[test]
    fn sandbox_fusion_is_exact_but_for_trailing_newlines() {
        assert!(sandbox_fusion_stdio("3\n\n", "3"));
        assert!(!sandbox_fusion_stdio("3 \n", "3\n"));
        assert!(!sandbox_fusion_stdio(" 3\n", "3\n"));
    }

    #[test]
    fn python_equality_on_json() {
        assert!(py_eq(&json!(true), &json!(1)));
        assert!(py_eq(&json!(2), &json!(2.0)));
        assert!(!py_eq(&json!(0.30000000000000004), &json!(0.3)));
        assert!(py_eq(&json!({"a": [1, 2]}), &json!({"a": [1.0, 2]})));
        assert!(!py_eq(&json!("1"), &json!(1)));
        assert!(!py_eq(&json!([1]), &json!([1, 1])));
    }

    #[test]
    fn big_integers_compare_exactly() {
        let fact21 = "51090942171709440000";
        let plus1 = "51090942171709440001";
        let a = parse_json(fact21).expect("json");
        let b = parse_json(plus1).expect("json");
        assert!(!py_eq(&a, &b));
        assert!(py_eq(&a, &parse_json(fact21).expect("json")));
        assert!(py_eq(
            &parse_json("[1, -0000000000000000000000]").expect("json"),
            &json!([1, 0])
        ));
        assert!(py_eq(&a, &json!(51090942171709440000.0)));
        assert!(!py_eq(&a, &json!(fact21)));
        // Inside strings, digits stay text.
        assert_eq!(
            parse_json("[\"12345678901234567890\"]").expect("json"),
            json!(["12345678901234567890"])
        );
        assert!(!prime_call(
            &parse_json(plus1).expect("json"),
            &parse_json(&format!("[{fact21}]")).expect("json")
        ));
    }

    #[test]
    fn prime_call_rules() {
        assert!(prime_call(&json!([1, 1]), &json!([1, 1])));
        assert!(prime_call(&json!(5), &json!([5])));
        assert!(prime_call(&json!("ab"), &json!("ab")));
        assert!(prime_call(&json!({"1": 2}), &json!({"1": 2})));
        assert!(prime_call(&json!({"1": 2}), &json!({" 1": 2})));
        assert!(!prime_call(&json!(0.30000000000000004), &json!(0.3)));
        assert!(!prime_call(&json!([]), &json!([1])));
    }
}
