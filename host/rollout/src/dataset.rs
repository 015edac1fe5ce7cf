//! JSONL datasets: one JSON object per line, the workflow's `data`.

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
    let mut rows = Vec::new();
    let mut bad = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let error = match serde_json::from_str::<serde_json::Value>(line) {
            Ok(v) if v.is_object() => {
                rows.push(Row {
                    index: i,
                    data: JsonText::from(&v),
                });
                continue;
            }
            Ok(_) => "not a JSON object".to_string(),
            Err(e) => format!("invalid JSON: {e}"),
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
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow::anyhow!("reading the dataset {}: {e}", path.display()))?;
    parse_rows(&text, on_bad, &path.display().to_string())
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
