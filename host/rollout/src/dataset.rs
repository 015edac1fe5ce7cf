//! Datasets: JSONL (one JSON object per line, the workflow's `data`) or a JSON array. A line
//! that cannot be a row (invalid JSON or UTF-8, not an object, over [`MAX_ROW_BYTES`]) is a
//! [`BadRow`] with its number and reason.

use std::path::Path;

use rollbox_runtime::JsonText;
use serde::Serialize;

/// One dataset row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// 0-based line number in the file; the row's identity in outputs and on resume.
    pub index: usize,
    /// The row's JSON object, as compact text shared by the row's episodes (a parsed value
    /// would take several times the memory for every row waiting its turn).
    pub data: JsonText,
}

/// A line that is not a JSON object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BadRow {
    /// 1-based line number, as editors show it.
    pub line: usize,
    /// What is wrong.
    pub error: String,
}

/// What to do with a malformed line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnBadRow {
    /// Report it (log line, `stats.json`) and go on.
    #[default]
    Skip,
    /// Stop before running anything.
    Fatal,
}

impl std::str::FromStr for OnBadRow {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "skip" => Ok(OnBadRow::Skip),
            "fatal" => Ok(OnBadRow::Fatal),
            other => Err(format!("`{other}`: use skip or fatal")),
        }
    }
}

/// Parse a dataset: JSONL (blank lines are ignored; every other line must be a JSON object),
/// or a JSON array of objects as `datasets`' `to_json(lines=False)` writes it (a row's index,
/// and a bad row's `line`, are then its element number).
pub fn parse_rows(
    text: &str,
    on_bad: OnBadRow,
    source: &str,
) -> anyhow::Result<(Vec<Row>, Vec<BadRow>)> {
    if text.trim_start().starts_with('[')
        && let Ok(items) = serde_json::from_str::<Vec<&serde_json::value::RawValue>>(text)
    {
        let mut rows = Vec::new();
        let mut bad = Vec::new();
        for (i, item) in items.into_iter().enumerate() {
            match serde_json::from_str::<serde_json::Value>(item.get()) {
                Ok(v) if v.is_object() => rows.push(Row {
                    index: i,
                    data: JsonText::from(&v),
                }),
                _ => {
                    let error = "not a JSON object".to_string();
                    if on_bad == OnBadRow::Fatal {
                        anyhow::bail!(
                            "{source}: element {}: {error}; fix it or pass --on-bad-row skip",
                            i + 1
                        );
                    }
                    tracing::warn!("{source}: element {}: {error}; skipped", i + 1);
                    bad.push(BadRow { line: i + 1, error });
                }
            }
        }
        return Ok((rows, bad));
    }
    parse_lines(text.as_bytes(), on_bad, source)
}

/// The longest line read as a row; a longer one is a bad row (a dataset written wrongly, or a
/// file that is not a dataset), reported with its length instead of being parsed.
pub const MAX_ROW_BYTES: usize = 16 << 20;

/// JSONL from bytes: each line is checked on its own, so invalid UTF-8 or an over-long line
/// is one bad row (with its line number and the reason), not a failed dataset.
fn parse_lines(
    bytes: &[u8],
    on_bad: OnBadRow,
    source: &str,
) -> anyhow::Result<(Vec<Row>, Vec<BadRow>)> {
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    for (i, raw) in bytes.split(|&b| b == b'\n').enumerate() {
        let raw = raw.strip_suffix(b"\r").unwrap_or(raw);
        if raw.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let line = if raw.len() > MAX_ROW_BYTES {
            Err(format!(
                "the line is {} bytes, over the {} MiB limit for a row",
                raw.len(),
                MAX_ROW_BYTES >> 20
            ))
        } else {
            std::str::from_utf8(raw).map_err(|e| {
                format!(
                    "invalid UTF-8 at byte {} of the line; re-encode the file as UTF-8",
                    e.valid_up_to()
                )
            })
        };
        let error = match line.map(serde_json::from_str::<serde_json::Value>) {
            Err(reason) => reason,
            Ok(Ok(v)) if v.is_object() => {
                rows.push(Row {
                    index: i,
                    data: JsonText::from(&v),
                });
                continue;
            }
            Ok(Ok(_)) => "not a JSON object".to_string(),
            Ok(Err(e)) => format!("invalid JSON: {e}"),
        };
        if on_bad == OnBadRow::Fatal {
            anyhow::bail!(
                "{source}:{}: {error}; fix the line or pass --on-bad-row skip",
                i + 1
            );
        }
        tracing::warn!("{source}:{}: {error}; skipped", i + 1);
        bad.push(BadRow { line: i + 1, error });
    }
    Ok((rows, bad))
}

/// Read a JSONL file or a JSON array file.
pub fn read_rows(path: &Path, on_bad: OnBadRow) -> anyhow::Result<(Vec<Row>, Vec<BadRow>)> {
    let bytes = std::fs::read(path)
        .map_err(|e| anyhow::anyhow!("reading the dataset {}: {e}", path.display()))?;
    let source = path.display().to_string();
    match std::str::from_utf8(&bytes) {
        Ok(text) => parse_rows(text, on_bad, &source),
        // Not UTF-8 as a whole: line by line, so only the lines that are not become bad rows.
        Err(_) => parse_lines(&bytes, on_bad, &source),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bad_lines_are_reported_with_their_number_or_fatal() {
        let text = "{\"q\": 1}\n\nnot json\n[1, 2]\n{\"q\": 2}\n";
        let (rows, bad) = parse_rows(text, OnBadRow::Skip, "d.jsonl").expect("skip");
        assert_eq!(rows.iter().map(|r| r.index).collect::<Vec<_>>(), vec![0, 4]);
        assert_eq!(rows[1].data.as_str(), r#"{"q":2}"#);
        assert_eq!(bad.len(), 2);
        assert_eq!(bad[0].line, 3);
        assert!(bad[0].error.starts_with("invalid JSON"), "{}", bad[0].error);
        assert_eq!(bad[1].line, 4);
        assert_eq!(bad[1].error, "not a JSON object");
        let err = parse_rows(text, OnBadRow::Fatal, "d.jsonl").expect_err("fatal");
        assert!(
            err.to_string().starts_with("d.jsonl:3: invalid JSON"),
            "{err}"
        );
    }

    #[test]
    fn invalid_utf8_and_overlong_lines_are_bad_rows_with_reasons() {
        let mut bytes = b"{\"a\": 1}\n{\"b\": \"\xff\xfe\"}\n".to_vec();
        bytes.extend_from_slice(b"{\"c\": \"");
        bytes.extend(std::iter::repeat_n(b'x', MAX_ROW_BYTES));
        bytes.extend_from_slice(b"\"}\r\n{\"d\": 4}\r\n");
        let (rows, bad) = parse_lines(&bytes, OnBadRow::Skip, "d.jsonl").expect("skip");
        assert_eq!(rows.iter().map(|r| r.index).collect::<Vec<_>>(), [0, 3]);
        assert_eq!(rows[1].data.as_str(), r#"{"d":4}"#);
        assert_eq!(bad.len(), 2);
        assert_eq!(bad[0].line, 2);
        assert!(
            bad[0].error.contains("invalid UTF-8 at byte 7"),
            "{}",
            bad[0].error
        );
        assert_eq!(bad[1].line, 3);
        assert!(
            bad[1].error.contains("over the 16 MiB limit"),
            "{}",
            bad[1].error
        );
        let e = parse_lines(&bytes, OnBadRow::Fatal, "d.jsonl")
            .expect_err("fatal")
            .to_string();
        assert!(e.starts_with("d.jsonl:2: invalid UTF-8"), "{e}");

        // Through a file: the same rows, the file read once.
        let dir = std::env::temp_dir().join(format!("rollbox-dataset-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("dir");
        let path = dir.join("d.jsonl");
        std::fs::write(&path, &bytes).expect("write");
        let (rows, bad) = read_rows(&path, OnBadRow::Skip).expect("read");
        assert_eq!((rows.len(), bad.len()), (2, 2));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn json_arrays_are_read_as_rows() {
        let text = "[\n  {\"question\": \"1 + 1?\", \"answer\": \"2\"},\n  3,\n  {\"question\": \"2 + 2?\"}\n]\n";
        let (rows, bad) = parse_rows(text, OnBadRow::Skip, "d.json").expect("array");
        assert_eq!(rows.iter().map(|r| r.index).collect::<Vec<_>>(), vec![0, 2]);
        assert_eq!(rows[1].data.as_str(), r#"{"question":"2 + 2?"}"#);
        assert_eq!((bad.len(), bad[0].line), (1, 2));
        let err = parse_rows(text, OnBadRow::Fatal, "d.json").expect_err("fatal");
        assert!(err.to_string().contains("element 2"), "{err}");
        // A JSONL file whose first line is an array is still JSONL.
        let (rows, bad) =
            parse_rows("[1]\n{\"q\": 1}\n", OnBadRow::Skip, "d.jsonl").expect("jsonl");
        assert_eq!((rows.len(), bad.len()), (1, 1));
    }
}
