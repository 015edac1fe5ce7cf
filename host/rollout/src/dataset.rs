//! Datasets, read a row at a time: JSONL (one JSON object per line, the workflow's `data`),
//! a JSON array of objects, or Parquet (verl's RL layout, Hugging Face `datasets` exports;
//! nested columns become JSON objects and lists). A line or element that cannot be a row
//! (invalid JSON or UTF-8, not an object, over [`MAX_ROW_BYTES`]) is a [`BadRow`] with its
//! number and reason.
//!
//! Every format is streamed: memory holds one line, one array element or one Parquet page
//! per column, whatever the file's size. A dataset is untrusted input: each row is parsed
//! within a budget ([`MAX_ROW_PARSED_BYTES`]), a Parquet file's footer and pages are checked
//! before the `parquet` crate reads them ([`parquet`]'s bounds), and nothing in a file ends the
//! process: what cannot be read is a bad row or an error naming the file.

use std::fs::File;
use std::io::{BufRead, BufReader, Read as _};
use std::path::Path;

use rollbox_runtime::JsonText;
use serde::Serialize;

mod json;
mod parquet;
mod parquet_meta;

pub use self::parquet::{MAX_PARQUET_FOOTER_BYTES, MAX_PARQUET_PAGES_PER_ROW_BYTES};
pub use self::parquet_meta::{
    MAX_PARQUET_COLUMNS, MAX_PARQUET_DEPTH, MAX_PARQUET_PAGE_BYTES, MAX_PARQUET_ROW_GROUPS,
};
pub use json::{MAX_ROW_PARSED_BYTES, parse_row, parse_value};

/// One dataset row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// 0-based line number in the file (element number in a JSON array, row number in a
    /// Parquet file); the row's identity in outputs and on resume.
    pub index: usize,
    /// The row's JSON object, as compact text shared by the row's episodes (a parsed value
    /// would take several times the memory for every row waiting its turn).
    pub data: JsonText,
}

/// A line that is not a JSON object.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BadRow {
    /// 1-based line number, as editors show it (element or row number for JSON arrays and
    /// Parquet).
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

/// The longest line read as a row; a longer one is a bad row (a dataset written wrongly, or a
/// file that is not a dataset), reported with its length instead of being read into memory.
pub const MAX_ROW_BYTES: usize = 16 << 20;

/// What a dataset yields: a row, or a line that is not one.
pub type Entry = Result<Row, BadRow>;

/// A dataset being read: [`Dataset::next_entry`] until `None`.
pub struct Dataset {
    source: Source,
    /// The file, for messages.
    name: String,
    rows_hint: Option<usize>,
}

enum Source {
    Entries(std::vec::IntoIter<Entry>),
    Lines(Lines<BufReader<File>>),
    Array(ArrayRows<BufReader<File>>),
    Parquet(Box<ParquetRows>),
}

impl Dataset {
    /// Open a dataset file: Parquet (by its `PAR1` magic), a JSON array (first character `[`
    /// and the whole file one array), else JSONL. With [`OnBadRow::Fatal`] the file is read
    /// once through first and the first bad line is the error, so nothing runs.
    pub fn open(path: &Path, on_bad: OnBadRow) -> anyhow::Result<Dataset> {
        if on_bad == OnBadRow::Skip {
            return Dataset::open_file(path, true);
        }
        // The check pass counts the rows too, so the file is not read a third time for them.
        let mut check = Dataset::open_file(path, false)?;
        let mut rows = 0usize;
        while let Some(entry) = check.next_entry()? {
            match entry {
                Ok(_) => rows += 1,
                Err(bad) => anyhow::bail!(
                    "{}: {}; fix it, or skip bad rows (on_bad_row `skip`)",
                    check.place(bad.line),
                    bad.error
                ),
            }
        }
        let mut dataset = Dataset::open_file(path, false)?;
        dataset.rows_hint = Some(rows);
        Ok(dataset)
    }

    /// `count`: count a JSONL file's lines for [`Dataset::rows_hint`] (one read through).
    fn open_file(path: &Path, count: bool) -> anyhow::Result<Dataset> {
        let name = path.display().to_string();
        let reading = |e: std::io::Error| anyhow::anyhow!("reading the dataset {name}: {e}");
        let mut file = File::open(path).map_err(reading)?;
        let mut head = [0u8; 4];
        let n = read_up_to(&mut file, &mut head).map_err(reading)?;
        if head[..n] == *b"PAR1" {
            let rows = ParquetRows::open(file, &name)?;
            return Ok(Dataset {
                rows_hint: Some(rows.total),
                source: Source::Parquet(Box::new(rows)),
                name,
            });
        }
        let mut reader = BufReader::with_capacity(1 << 16, File::open(path).map_err(reading)?);
        if first_non_space(&mut reader).map_err(reading)? == Some(b'[') {
            // A JSON array, if the whole file is one (checked by a pass that holds nothing);
            // else JSONL whose first line happens to be an array.
            match json::count_elements(reader) {
                Ok(n) => {
                    let reader =
                        BufReader::with_capacity(1 << 16, File::open(path).map_err(reading)?);
                    return Ok(Dataset {
                        source: Source::Array(ArrayRows::new(reader)),
                        name: format!("{name} (JSON array)"),
                        rows_hint: Some(n),
                    });
                }
                Err(json::NotArray::Io(e)) => return Err(reading(e)),
                Err(json::NotArray::Structure(_)) => {}
            }
        }
        let lines = if count {
            Some(count_lines(path).map_err(reading)?)
        } else {
            None
        };
        // Afresh: the peek consumed leading blank lines, which count in line numbers.
        let reader = BufReader::with_capacity(1 << 16, File::open(path).map_err(reading)?);
        Ok(Dataset {
            source: Source::Lines(Lines::new(reader)),
            name,
            rows_hint: lines,
        })
    }

    /// Rows held in memory (`rollbox serve`'s requests, tests).
    pub fn from_entries(entries: Vec<Entry>, name: &str) -> Dataset {
        Dataset {
            rows_hint: Some(entries.len()),
            source: Source::Entries(entries.into_iter()),
            name: name.to_string(),
        }
    }

    /// Rows held in memory, all of them good.
    pub fn from_rows(rows: Vec<Row>) -> Dataset {
        Dataset::from_entries(rows.into_iter().map(Ok).collect(), "rows")
    }

    /// A dataset in memory: a JSON array of objects, or JSONL.
    pub fn from_bytes(bytes: &[u8], name: &str) -> Dataset {
        let mut entries = Vec::new();
        if bytes.trim_ascii_start().starts_with(b"[") && json::count_elements(bytes).is_ok() {
            let mut rows = ArrayRows::new(bytes);
            while let Ok(Some(entry)) = rows.next_entry() {
                entries.push(entry);
            }
            let mut d = Dataset::from_entries(entries, name);
            d.name = format!("{name} (JSON array)");
            return d;
        }
        let mut lines = Lines::new(bytes);
        while let Ok(Some(entry)) = lines.next_entry() {
            entries.push(entry);
        }
        Dataset::from_entries(entries, name)
    }

    /// The number of rows (or lines) in the file, when known before reading it: for the
    /// progress bar.
    pub fn rows_hint(&self) -> Option<usize> {
        self.rows_hint
    }

    /// The next row or bad line; `None` at the end. An error is one that stops reading (the
    /// file cannot be read, a Parquet page is corrupt).
    pub fn next_entry(&mut self) -> anyhow::Result<Option<Entry>> {
        match &mut self.source {
            Source::Entries(it) => Ok(it.next()),
            Source::Lines(lines) => lines
                .next_entry()
                .map_err(|e| anyhow::anyhow!("reading the dataset {}: {e}", self.name)),
            Source::Array(rows) => rows
                .next_entry()
                .map_err(|e| anyhow::anyhow!("reading the dataset {}: {e}", self.name)),
            Source::Parquet(rows) => rows.next_entry(),
        }
    }

    /// Where line (or element, or row) `line` is, for messages: `FILE:LINE`.
    pub fn place(&self, line: usize) -> String {
        match &self.source {
            Source::Parquet(p) => p.place(&self.name, line),
            _ if self.name.ends_with("(JSON array)") => format!("{}: element {line}", self.name),
            _ => format!("{}:{line}", self.name),
        }
    }
}

/// Parse a dataset held in memory into its rows and bad lines ([`Dataset::from_bytes`]);
/// with [`OnBadRow::Fatal`] the first bad line is the error.
pub fn parse_rows(
    text: &str,
    on_bad: OnBadRow,
    source: &str,
) -> anyhow::Result<(Vec<Row>, Vec<BadRow>)> {
    let mut d = Dataset::from_bytes(text.as_bytes(), source);
    let (mut rows, mut bad) = (Vec::new(), Vec::new());
    while let Some(entry) = d.next_entry()? {
        match entry {
            Ok(r) => rows.push(r),
            Err(b) if on_bad == OnBadRow::Fatal => anyhow::bail!(
                "{}: {}; fix it, or skip bad rows (on_bad_row `skip`)",
                d.place(b.line),
                b.error
            ),
            Err(b) => bad.push(b),
        }
    }
    Ok((rows, bad))
}

fn read_up_to(file: &mut File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..])? {
            0 => break,
            k => n += k,
        }
    }
    Ok(n)
}

/// The first byte that is not ASCII white space, left unread in `reader`.
fn first_non_space(reader: &mut impl BufRead) -> std::io::Result<Option<u8>> {
    loop {
        let buf = reader.fill_buf()?;
        if buf.is_empty() {
            return Ok(None);
        }
        if let Some(&b) = buf.iter().find(|b| !b.is_ascii_whitespace()) {
            return Ok(Some(b));
        }
        let n = buf.len();
        reader.consume(n);
    }
}

/// Lines in a file (a last line without `\n` counts), read in blocks.
fn count_lines(path: &Path) -> std::io::Result<usize> {
    let mut f = File::open(path)?;
    let mut buf = vec![0u8; 1 << 20];
    let (mut n, mut last) = (0usize, b'\n');
    loop {
        let k = f.read(&mut buf)?;
        if k == 0 {
            break;
        }
        n += buf[..k].iter().filter(|&&b| b == b'\n').count();
        last = buf[k - 1];
    }
    Ok(n + usize::from(last != b'\n'))
}

/// Row `i` from the text of a JSONL line or array element (`what`) of full length `len`, of
/// which `bytes` holds at most [`MAX_ROW_BYTES`] + 1: over the cap, not UTF-8, or not a JSON
/// object within [`MAX_ROW_PARSED_BYTES`] is a bad row saying which.
fn entry_from_text(i: usize, len: usize, bytes: &[u8], what: &str) -> Entry {
    let text = if len > MAX_ROW_BYTES {
        Err(format!(
            "the {what} is {len} bytes, over the {} MiB limit for a row",
            MAX_ROW_BYTES >> 20
        ))
    } else {
        std::str::from_utf8(bytes).map_err(|e| {
            format!(
                "invalid UTF-8 at byte {} of the {what}; re-encode the file as UTF-8",
                e.valid_up_to()
            )
        })
    };
    match text.and_then(parse_row) {
        Ok(data) => Ok(Row { index: i, data }),
        Err(error) => Err(BadRow { line: i + 1, error }),
    }
}

/// JSONL from a reader, a line at a time: each line is checked on its own, so invalid UTF-8
/// or an over-long line is one bad row (with its line number and the reason), not a failed
/// dataset. An over-long line is skipped through without being held.
struct Lines<R> {
    reader: R,
    /// The 0-based number of the next line.
    next: usize,
    buf: Vec<u8>,
}

impl<R: BufRead> Lines<R> {
    fn new(reader: R) -> Self {
        Lines {
            reader,
            next: 0,
            buf: Vec::new(),
        }
    }

    fn next_entry(&mut self) -> std::io::Result<Option<Entry>> {
        loop {
            let Some(len) = self.read_line()? else {
                return Ok(None);
            };
            let i = self.next;
            self.next += 1;
            let raw = self.buf.strip_suffix(b"\r").unwrap_or(&self.buf);
            if len <= MAX_ROW_BYTES && raw.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            return Ok(Some(entry_from_text(i, len, raw, "line")));
        }
    }

    /// Read the next line (without its `\n`) into `buf`, keeping at most
    /// [`MAX_ROW_BYTES`] + 1 bytes of it; returns its full length, `None` at the end.
    fn read_line(&mut self) -> std::io::Result<Option<usize>> {
        self.buf.clear();
        let (mut len, mut any) = (0usize, false);
        loop {
            let chunk = match self.reader.fill_buf() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if chunk.is_empty() {
                return Ok(any.then_some(len));
            }
            any = true;
            let (part, used, end) = match chunk.iter().position(|&b| b == b'\n') {
                Some(p) => (&chunk[..p], p + 1, true),
                None => (chunk, chunk.len(), false),
            };
            let room = (MAX_ROW_BYTES + 1).saturating_sub(self.buf.len());
            self.buf.extend_from_slice(&part[..part.len().min(room)]);
            len += part.len();
            self.reader.consume(used);
            if end {
                return Ok(Some(len));
            }
        }
    }
}

/// A JSON array's elements as rows, one at a time ([`json::ArrayElements`]); an element that
/// is not a JSON object, or over the caps, is a bad row numbered by its place in the array.
struct ArrayRows<R> {
    elements: json::ArrayElements<R>,
    /// The 0-based number of the next element.
    next: usize,
}

impl<R: BufRead> ArrayRows<R> {
    fn new(reader: R) -> Self {
        ArrayRows {
            elements: json::ArrayElements::new(reader, true),
            next: 0,
        }
    }

    fn next_entry(&mut self) -> std::io::Result<Option<Entry>> {
        let len = match self.elements.next_element() {
            Ok(Some(len)) => len,
            Ok(None) => return Ok(None),
            Err(json::NotArray::Io(e)) => return Err(e),
            // The structure was checked before: the file changed while being read.
            Err(json::NotArray::Structure(why)) => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::InvalidData,
                    format!("the JSON array changed while being read ({why})"),
                ));
            }
        };
        let i = self.next;
        self.next += 1;
        Ok(Some(entry_from_text(i, len, &self.elements.buf, "element")))
    }
}

/// A Parquet file's rows as JSON objects (the `parquet` crate's record reader), a row group at
/// a time.
struct ParquetRows {
    rows: ::parquet::record::reader::RowIter<'static>,
    /// The 0-based number of the next row.
    next: usize,
    total: usize,
    /// The first row of each row group.
    group_starts: Vec<usize>,
    /// Page bytes read for the row being built ([`parquet::CheckedParquet`]), reset per row.
    since_row: std::sync::Arc<std::sync::atomic::AtomicU64>,
}

impl ParquetRows {
    fn open(file: File, name: &str) -> anyhow::Result<ParquetRows> {
        use ::parquet::file::reader::FileReader as _;
        let since_row = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        let checked = parquet::CheckedParquet::open(file, since_row.clone())
            .map_err(|e| anyhow::anyhow!("the Parquet dataset {name}: {e}"))?;
        let reader = ::parquet::file::serialized_reader::SerializedFileReader::new(checked)
            .map_err(|e| anyhow::anyhow!("reading the Parquet dataset {name}: {e}"))?;
        let mut group_starts = Vec::new();
        let mut total = 0usize;
        for g in reader.metadata().row_groups() {
            group_starts.push(total);
            // The footer is the file's word: saturate rather than overflow on a lying one.
            total = total.saturating_add(usize::try_from(g.num_rows()).unwrap_or(0));
        }
        let rows = ::parquet::record::reader::RowIter::from_file_into(Box::new(reader));
        Ok(ParquetRows {
            rows,
            next: 0,
            total,
            group_starts,
            since_row,
        })
    }

    fn next_entry(&mut self) -> anyhow::Result<Option<Entry>> {
        let i = self.next;
        // The `parquet` crate reads only checked bytes, but it is a large parser of untrusted
        // input: a panic in it is this file's error, not the process's end.
        let row = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.rows.next()))
            .map_err(|panic| {
                let why = panic
                    .downcast_ref::<&str>()
                    .map(|s| s.to_string())
                    .or_else(|| panic.downcast_ref::<String>().cloned())
                    .unwrap_or_default();
                anyhow::anyhow!(
                    "row {} (row group {}) cannot be read: the Parquet reader failed ({why})",
                    i + 1,
                    self.group_of(i)
                )
            })?;
        let Some(row) = row else {
            return Ok(None);
        };
        self.since_row
            .store(0, std::sync::atomic::Ordering::Relaxed);
        self.next += 1;
        let row = row.map_err(|e| {
            anyhow::anyhow!(
                "row {} (row group {}) cannot be read: {e}",
                i + 1,
                self.group_of(i)
            )
        })?;
        let data = JsonText::from(&row.to_json_value());
        // The same bound as a JSONL line: a row is not held, or handed to a workflow, past it.
        if data.as_str().len() > MAX_ROW_BYTES {
            return Ok(Some(Err(BadRow {
                line: i + 1,
                error: format!(
                    "the row is {} bytes as JSON, over the {} MiB limit for a row",
                    data.as_str().len(),
                    MAX_ROW_BYTES >> 20
                ),
            })));
        }
        Ok(Some(Ok(Row { index: i, data })))
    }

    fn group_of(&self, row: usize) -> usize {
        self.group_starts
            .partition_point(|&s| s <= row)
            .saturating_sub(1)
    }

    fn place(&self, name: &str, line: usize) -> String {
        format!(
            "{name}: row {line} (row group {})",
            self.group_of(line.saturating_sub(1))
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all(d: &mut Dataset) -> (Vec<Row>, Vec<BadRow>) {
        let (mut rows, mut bad) = (Vec::new(), Vec::new());
        while let Some(e) = d.next_entry().expect("entry") {
            match e {
                Ok(r) => rows.push(r),
                Err(b) => bad.push(b),
            }
        }
        (rows, bad)
    }

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
        bytes.extend(std::iter::repeat_n(b'x', 3 * MAX_ROW_BYTES));
        bytes.extend_from_slice(b"\"}\r\n{\"d\": 4}\r\n");
        let (rows, bad) = all(&mut Dataset::from_bytes(&bytes, "d.jsonl"));
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
            bad[1].error.contains(&format!(
                "{} bytes, over the 16 MiB limit",
                3 * MAX_ROW_BYTES + 10
            )),
            "{}",
            bad[1].error
        );

        // Through a file, streamed: the same rows; the long line is never held whole.
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("d.jsonl");
        std::fs::write(&path, &bytes).expect("write");
        let mut d = Dataset::open(&path, OnBadRow::Skip).expect("open");
        assert_eq!(d.rows_hint(), Some(4));
        let (rows, bad) = all(&mut d);
        assert_eq!((rows.len(), bad.len()), (2, 2));
        let e = Dataset::open(&path, OnBadRow::Fatal)
            .err()
            .expect("fatal")
            .to_string();
        assert!(e.contains("d.jsonl:2: invalid UTF-8"), "{e}");
        // A last line without its newline is a row.
        std::fs::write(&path, b"{\"a\": 1}\n{\"b\": 2}").expect("write");
        let mut d = Dataset::open(&path, OnBadRow::Fatal).expect("open");
        // The check pass counted the rows.
        assert_eq!(d.rows_hint(), Some(2));
        let (rows, bad) = all(&mut d);
        assert_eq!((rows.len(), bad.len(), rows[1].index), (2, 0, 1));
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
        // From a file (leading white space before the `[`).
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("d.json");
        std::fs::write(&path, format!("\n  {text}")).expect("write");
        let (rows, bad) = all(&mut Dataset::open(&path, OnBadRow::Skip).expect("open"));
        assert_eq!((rows.len(), bad.len()), (2, 1));
        let e = Dataset::open(&path, OnBadRow::Fatal)
            .err()
            .expect("fatal")
            .to_string();
        assert!(e.contains("element 2: not a JSON object"), "{e}");
    }
}
