//! JSON rows, parsed within a budget, and JSON arrays read an element at a time.
//!
//! A row's text is bounded by [`super::MAX_ROW_BYTES`], but text is not memory: 16 MiB of
//! `0,` is 8 million values, several hundred megabytes once parsed. [`parse_row`] builds the
//! row's value while counting what it takes and stops at [`MAX_ROW_PARSED_BYTES`]. A JSON array
//! is never read whole: [`ArrayElements`] scans it (strings, escapes and brackets, no
//! recursion) and hands out one element's text at a time.

use std::cell::Cell;
use std::io::BufRead;

use rollbox_runtime::JsonText;
use serde::de::{DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::MAX_ROW_BYTES;

/// The most memory one row's parsed value may take, as counted by [`parse_row`] (each value's
/// `serde_json::Value`, each object entry and key, each string's bytes): 8× the text cap. A row
/// past it is a bad row, whatever its text length.
pub const MAX_ROW_PARSED_BYTES: usize = 8 * MAX_ROW_BYTES;

/// What one object entry costs beyond its key's bytes and its value (the map's slot, hash and
/// index).
const ENTRY_BYTES: usize = std::mem::size_of::<String>() + 16;

/// One row's text as a JSON object, parsed within [`MAX_ROW_PARSED_BYTES`] (and serde_json's
/// nesting limit of 128); the error says what is wrong, for a [`super::BadRow`].
pub fn parse_row(text: &str) -> Result<JsonText, String> {
    let (value, _) = parse_value(text, MAX_ROW_PARSED_BYTES)?;
    if !value.is_object() {
        return Err("not a JSON object".to_string());
    }
    Ok(JsonText::from(&value))
}

/// Any JSON value's text parsed within `budget` bytes of parsed memory (as [`parse_row`]
/// counts it) and serde_json's nesting limit of 128: the value and the bytes it was charged.
/// Every JSON value a server request carries into a call (a `/v1/rewards` row, an answer, a
/// `/get_reward` label) is parsed this way, never straight into a `Value`: 60 MB of `{},`
/// is gigabytes as `Value`s (issue 52).
pub fn parse_value(text: &str, budget: usize) -> Result<(Value, usize), String> {
    let left = Cell::new(budget);
    let mut de = serde_json::Deserializer::from_str(text);
    let value = Budgeted(&left)
        .deserialize(&mut de)
        .and_then(|v| de.end().map(|()| v))
        .map_err(|e| {
            if left.get() == 0 {
                format!(
                    "the value takes over {} MiB once parsed (too many values for its size); split it or store the bulk as a string",
                    budget >> 20
                )
            } else {
                format!("invalid JSON: {e}")
            }
        })?;
    Ok((value, budget - left.get()))
}

/// A `serde_json::Value` deserialized while charging what it takes to a budget; past the
/// budget, an error (and the budget left at 0, which is how [`parse_row`] tells it apart).
struct Budgeted<'b>(&'b Cell<usize>);

impl Budgeted<'_> {
    fn charge<E: serde::de::Error>(&self, bytes: usize) -> Result<(), E> {
        match self.0.get().checked_sub(bytes) {
            Some(left) => {
                self.0.set(left);
                Ok(())
            }
            None => {
                self.0.set(0);
                Err(E::custom("over the parsed-size budget"))
            }
        }
    }

    fn scalar<E: serde::de::Error>(&self, v: Value) -> Result<Value, E> {
        self.charge(std::mem::size_of::<Value>())?;
        Ok(v)
    }
}

impl<'de> DeserializeSeed<'de> for Budgeted<'_> {
    type Value = Value;
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Budgeted<'_> {
    type Value = Value;

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E: serde::de::Error>(self, v: bool) -> Result<Value, E> {
        self.scalar(Value::Bool(v))
    }
    fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<Value, E> {
        self.scalar(Value::from(v))
    }
    fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<Value, E> {
        self.scalar(Value::from(v))
    }
    fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<Value, E> {
        // As serde_json's own `Value`: JSON text has no NaN or infinity.
        self.scalar(serde_json::Number::from_f64(v).map_or(Value::Null, Value::Number))
    }
    fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Value, E> {
        self.charge::<E>(v.len())?;
        self.scalar(Value::String(v.to_owned()))
    }
    fn visit_string<E: serde::de::Error>(self, v: String) -> Result<Value, E> {
        self.charge::<E>(v.len())?;
        self.scalar(Value::String(v))
    }
    fn visit_unit<E: serde::de::Error>(self) -> Result<Value, E> {
        self.scalar(Value::Null)
    }
    fn visit_none<E: serde::de::Error>(self) -> Result<Value, E> {
        self.scalar(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        self.charge::<A::Error>(std::mem::size_of::<Value>())?;
        let mut items = Vec::new();
        while let Some(item) = seq.next_element_seed(Budgeted(self.0))? {
            items.push(item);
        }
        Ok(Value::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        self.charge::<A::Error>(std::mem::size_of::<Value>())?;
        let mut object = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            self.charge::<A::Error>(ENTRY_BYTES + key.len())?;
            let value = map.next_value_seed(Budgeted(self.0))?;
            object.insert(key, value);
        }
        Ok(Value::Object(object))
    }
}

/// A JSON array's elements from a reader, one element's text at a time (at most
/// [`MAX_ROW_BYTES`] of it held; a longer element is read through and reported by length).
/// Only the array's structure is checked here (brackets, strings, commas, nothing after the
/// closing bracket); each element is parsed on its own as a row.
pub(super) struct ArrayElements<R> {
    reader: R,
    state: State,
    /// Whether element bytes are kept (`false`: a pass that only checks the structure and
    /// counts elements).
    keep: bool,
    /// The current element's bytes (up to [`MAX_ROW_BYTES`] + 1).
    pub(super) buf: Vec<u8>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum State {
    /// Before the opening `[`.
    Start,
    /// Between elements.
    Elements,
    /// After the closing `]`.
    Done,
}

/// Why a file is not one JSON array (then it is read as JSONL).
#[derive(Debug)]
pub(super) enum NotArray {
    Io(std::io::Error),
    Structure(&'static str),
}

impl From<std::io::Error> for NotArray {
    fn from(e: std::io::Error) -> Self {
        NotArray::Io(e)
    }
}

impl<R: BufRead> ArrayElements<R> {
    pub(super) fn new(reader: R, keep: bool) -> Self {
        ArrayElements {
            reader,
            state: State::Start,
            keep,
            buf: Vec::new(),
        }
    }

    /// The next element's full length (its bytes, up to the cap, in `buf`); `None` after the
    /// closing bracket and trailing white space.
    pub(super) fn next_element(&mut self) -> Result<Option<usize>, NotArray> {
        self.buf.clear();
        if self.state == State::Start {
            if self.skip_space()? != Some(b'[') {
                return Err(NotArray::Structure("it does not start with `[`"));
            }
            self.reader.consume(1);
            if self.skip_space()? == Some(b']') {
                self.reader.consume(1);
                return self.finish();
            }
            self.state = State::Elements;
        }
        if self.state == State::Done {
            return Ok(None);
        }
        match self.skip_space()? {
            None => return Err(NotArray::Structure("it ends inside the array")),
            Some(b',' | b']') => return Err(NotArray::Structure("an element is missing")),
            Some(_) => {}
        }
        let (mut len, mut depth, mut in_string, mut escaped) = (0usize, 0usize, false, false);
        loop {
            let chunk = match self.reader.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e.into()),
            };
            if chunk.is_empty() {
                return Err(NotArray::Structure("it ends inside the array"));
            }
            let mut end = None;
            for (i, &b) in chunk.iter().enumerate() {
                if in_string {
                    match (escaped, b) {
                        (true, _) => escaped = false,
                        (false, b'\\') => escaped = true,
                        (false, b'"') => in_string = false,
                        _ => {}
                    }
                    continue;
                }
                match b {
                    b'"' => in_string = true,
                    b'[' | b'{' => depth += 1,
                    b']' | b'}' if depth > 0 => depth -= 1,
                    b',' | b']' if depth == 0 => {
                        end = Some((i, b == b']'));
                        break;
                    }
                    b'}' => return Err(NotArray::Structure("a `}` closes nothing")),
                    _ => {}
                }
            }
            let part = end.map_or(chunk.len(), |(i, _)| i);
            if self.keep {
                let room = (MAX_ROW_BYTES + 1).saturating_sub(self.buf.len());
                self.buf.extend_from_slice(&chunk[..part.min(room)]);
            }
            len += part;
            match end {
                None => self.reader.consume(part),
                Some((_, closing)) => {
                    self.reader.consume(part + 1);
                    if closing {
                        self.finish()?;
                    }
                    return Ok(Some(len));
                }
            }
        }
    }

    /// After the closing bracket: only white space may follow.
    fn finish(&mut self) -> Result<Option<usize>, NotArray> {
        self.state = State::Done;
        match self.skip_space()? {
            None => Ok(None),
            Some(_) => Err(NotArray::Structure("something follows the array")),
        }
    }

    /// The next byte that is not JSON white space, left unread.
    fn skip_space(&mut self) -> std::io::Result<Option<u8>> {
        loop {
            let buf = match self.reader.fill_buf() {
                Ok(b) => b,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buf.is_empty() {
                return Ok(None);
            }
            if let Some(i) = buf.iter().position(|b| !b.is_ascii_whitespace()) {
                let b = buf[i];
                self.reader.consume(i);
                return Ok(Some(b));
            }
            let n = buf.len();
            self.reader.consume(n);
        }
    }
}

/// The number of elements when `reader` holds exactly one JSON array (its structure only);
/// else why not.
pub(super) fn count_elements(reader: impl BufRead) -> Result<usize, NotArray> {
    let mut elements = ArrayElements::new(reader, false);
    let mut n = 0usize;
    while elements.next_element()?.is_some() {
        n += 1;
    }
    Ok(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn elements(text: &str) -> Result<Vec<String>, String> {
        let mut a = ArrayElements::new(text.as_bytes(), true);
        let mut out = Vec::new();
        loop {
            match a.next_element() {
                Ok(Some(_)) => out.push(String::from_utf8(a.buf.clone()).expect("utf8")),
                Ok(None) => return Ok(out),
                Err(NotArray::Structure(s)) => return Err(s.to_string()),
                Err(NotArray::Io(e)) => return Err(e.to_string()),
            }
        }
    }

    #[test]
    fn arrays_split_into_elements_by_structure_alone() {
        assert_eq!(elements(" [ ] \n").expect("empty"), Vec::<String>::new());
        assert_eq!(
            elements(r#"[{"a": "x,]}\"[" }, [1, [2]] ,3]"#).expect("split"),
            [r#"{"a": "x,]}\"[" }"#, "[1, [2]] ", "3"]
        );
        for (bad, why) in [
            ("{}", "does not start"),
            ("[1, 2", "ends inside"),
            ("[1,]", "missing"),
            ("[,1]", "missing"),
            ("[1] [2]", "follows"),
            ("[1}]", "closes nothing"),
        ] {
            let e = elements(bad).expect_err(bad);
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert_eq!(count_elements(&b"[1,2,3]"[..]).expect("count"), 3);
    }

    #[test]
    fn rows_are_parsed_within_their_budget() {
        assert_eq!(
            parse_row(r#"{"q": 1.0e3, "q": "again"}"#)
                .expect("row")
                .as_str(),
            r#"{"q":"again"}"#
        );
        assert_eq!(parse_row("[1]").expect_err("array"), "not a JSON object");
        assert!(parse_row("{").expect_err("bad").starts_with("invalid JSON"));
        // 8 million small values in 16 MiB of text: refused by what they take parsed.
        let many = format!("{{\"xs\": [{}0]}}", "0,".repeat(8 << 20));
        let e = parse_row(&many).expect_err("too many values");
        assert!(e.contains("once parsed"), "{e}");
        // A large string is one value: its bytes count, once.
        let big = format!("{{\"s\": \"{}\"}}", "x".repeat(MAX_ROW_BYTES - 16));
        assert_eq!(
            parse_row(&big).expect("string").as_str().len(),
            big.len() - 1
        );
        // Nesting past serde_json's limit is invalid JSON, not a stack overflow.
        let deep = format!("{{\"a\": {}{}}}", "[".repeat(100_000), "]".repeat(100_000));
        assert!(parse_row(&deep).expect_err("deep").contains("recursion"));
    }
}
