//! Parquet's Thrift metadata walked within bounds, before the `parquet` crate parses it: the
//! footer (`FileMetaData`: schema, row groups, column chunks) and page headers, with a Thrift
//! compact reader of its own whose every count is checked against the bytes left and whose
//! nesting is bounded. What [`super::parquet::CheckedParquet`] checks a file with.

/// The most schema elements (columns and groups).
pub const MAX_PARQUET_COLUMNS: usize = 10_000;
/// The deepest schema nesting.
pub const MAX_PARQUET_DEPTH: usize = 64;
/// The most row groups.
pub const MAX_PARQUET_ROW_GROUPS: usize = 1 << 16;
/// The largest page, compressed or inflated.
pub const MAX_PARQUET_PAGE_BYTES: usize = 64 << 20;

/// The largest page header.
pub(super) const MAX_PAGE_HEADER_BYTES: usize = 1 << 20;
/// The deepest Thrift structure walked (the footer's own structs nest about 5 deep).
const MAX_THRIFT_DEPTH: u32 = 32;
/// The most values a data page may claim.
const MAX_PAGE_VALUES: i64 = 1 << 24;

/// A column chunk: where its pages lie and how they are compressed.
#[derive(Debug, Clone, Copy)]
pub(super) struct ChunkSpan {
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) codec: i32,
}

/// What a page header says.
#[derive(Debug, Default)]
pub(super) struct Page {
    pub(super) header_len: usize,
    pub(super) compressed: usize,
    pub(super) uncompressed: usize,
    /// A v2 data page's level bytes, stored before the (compressed) values.
    pub(super) levels: usize,
    /// Whether the values are compressed (a v2 data page may say no).
    pub(super) is_compressed: bool,
}

/// Why a page header is refused.
pub(super) enum PageError {
    /// The header runs past the bytes read.
    Short,
    Bad(String),
}

impl std::fmt::Display for PageError {
    fn fmt(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        match self {
            PageError::Short => write!(
                f,
                "its header runs past its column chunk or over {} KiB",
                MAX_PAGE_HEADER_BYTES >> 10
            ),
            PageError::Bad(e) => f.write_str(e),
        }
    }
}

impl From<String> for PageError {
    fn from(e: String) -> Self {
        if e == ENDS_EARLY {
            PageError::Short
        } else {
            PageError::Bad(e)
        }
    }
}

pub(super) fn parse_page_header(bytes: &[u8]) -> Result<Page, PageError> {
    let mut t = Thrift { buf: bytes, pos: 0 };
    let mut page = Page {
        is_compressed: true,
        ..Page::default()
    };
    let (mut compressed, mut uncompressed) = (None, None);
    let mut last = 0i16;
    while let Some((id, ty)) = t.field(&mut last)? {
        match (id, ty) {
            (2, 5) => uncompressed = Some(t.i32()?),
            (3, 5) => compressed = Some(t.i32()?),
            // Data page (v1): num_values first.
            (5, 12) => check_values(t.struct_i32_field(1, 0)?, "a data page")?,
            // Dictionary page: num_values first.
            (7, 12) => check_dictionary(&mut t, uncompressed.unwrap_or(0))?,
            (8, 12) => {
                let mut last = 0i16;
                let (mut def, mut rep) = (0i32, 0i32);
                while let Some((id, ty)) = t.field(&mut last)? {
                    match (id, ty) {
                        (1, 5) => check_values(i64::from(t.i32()?), "a data page")?,
                        (5, 5) => def = t.i32()?,
                        (6, 5) => rep = t.i32()?,
                        (7, 1) => page.is_compressed = true,
                        (7, 2) => page.is_compressed = false,
                        _ => t.skip(ty, 1)?,
                    }
                }
                page.levels = size(i64::from(def) + i64::from(rep), "its level bytes")?;
            }
            _ => t.skip(ty, 0)?,
        }
    }
    page.header_len = t.pos;
    page.compressed = size(
        i64::from(compressed.ok_or_else(|| "no compressed size".to_string())?),
        "its size",
    )?;
    page.uncompressed = size(
        i64::from(uncompressed.ok_or_else(|| "no uncompressed size".to_string())?),
        "its inflated size",
    )?;
    if page.levels > page.compressed.min(page.uncompressed) {
        return Err(PageError::Bad("its level bytes exceed the page".into()));
    }
    Ok(page)
}

/// A page size from a header: not negative, at most [`MAX_PARQUET_PAGE_BYTES`].
fn size(n: i64, what: &str) -> Result<usize, String> {
    usize::try_from(n)
        .ok()
        .filter(|&n| n <= MAX_PARQUET_PAGE_BYTES)
        .ok_or_else(|| {
            format!(
                "{what} is {n} bytes; a page may be 0 to {} MiB",
                MAX_PARQUET_PAGE_BYTES >> 20
            )
        })
}

fn check_values(n: i64, what: &str) -> Result<(), String> {
    if (0..=MAX_PAGE_VALUES).contains(&n) {
        Ok(())
    } else {
        Err(format!(
            "{what} claims {n} values; at most {MAX_PAGE_VALUES}"
        ))
    }
}

/// A dictionary page's value count: every value takes at least a bit of the page.
fn check_dictionary(t: &mut Thrift, uncompressed: i32) -> Result<(), String> {
    let n = t.struct_i32_field(1, 1)?;
    let most = i64::from(uncompressed.max(0)) * 8 + 8;
    if (0..=most).contains(&n) {
        Ok(())
    } else {
        Err(format!(
            "a dictionary page claims {n} values in {uncompressed} bytes"
        ))
    }
}

/// Walk a footer (Thrift compact `FileMetaData`) and return its column chunks, sorted.
pub(super) fn check_footer(meta: &[u8], data_end: u64) -> Result<Vec<ChunkSpan>, String> {
    let mut t = Thrift { buf: meta, pos: 0 };
    let mut chunks = Vec::new();
    let mut schema = false;
    let mut last = 0i16;
    while let Some((id, ty)) = t.field(&mut last)? {
        match (id, ty) {
            (2, 9) => {
                check_schema(&mut t)?;
                schema = true;
            }
            (4, 9) => {
                let (elem, n) = t.list()?;
                if elem != 12 || n > MAX_PARQUET_ROW_GROUPS {
                    return Err(format!("{n} row groups; at most {MAX_PARQUET_ROW_GROUPS}"));
                }
                for g in 0..n {
                    check_row_group(&mut t, g, &mut chunks)?;
                }
            }
            _ => t.skip(ty, 0)?,
        }
    }
    if !schema {
        return Err("it has no schema".into());
    }
    chunks.sort_by_key(|c| c.start);
    for c in &chunks {
        if c.start < 4 || c.end > data_end {
            return Err(format!(
                "a column chunk at bytes {}..{} lies outside the data",
                c.start, c.end
            ));
        }
    }
    if chunks.windows(2).any(|w| w[0].end > w[1].start) {
        return Err("two column chunks overlap".into());
    }
    Ok(chunks)
}

/// The schema: a flat list of elements, each group followed by its children.
fn check_schema(t: &mut Thrift) -> Result<(), String> {
    let (elem, n) = t.list()?;
    if elem != 12 || n == 0 || n > MAX_PARQUET_COLUMNS {
        return Err(format!(
            "a schema of {n} elements; it may have 1 to {MAX_PARQUET_COLUMNS}"
        ));
    }
    // Children still to come for each open group, innermost last.
    let mut open: Vec<usize> = Vec::new();
    for i in 0..n {
        if i > 0 {
            match open.last_mut() {
                Some(left) => *left -= 1,
                None => return Err(format!("schema element {i} belongs to no group")),
            }
        }
        let children = t.struct_i32_field(5, 0)?;
        let children = usize::try_from(children)
            .map_err(|_| format!("schema element {i} has {children} children"))?;
        if children > n - i - 1 {
            return Err(format!(
                "schema element {i} claims {children} children; the schema has {} more elements",
                n - i - 1
            ));
        }
        if children > 0 || i == 0 {
            open.push(children);
            if open.len() > MAX_PARQUET_DEPTH {
                return Err(format!("the schema nests over {MAX_PARQUET_DEPTH} deep"));
            }
        }
        while open.last() == Some(&0) {
            open.pop();
        }
    }
    Ok(())
}

fn check_row_group(t: &mut Thrift, g: usize, chunks: &mut Vec<ChunkSpan>) -> Result<(), String> {
    let mut last = 0i16;
    while let Some((id, ty)) = t.field(&mut last)? {
        if (id, ty) != (1, 9) {
            t.skip(ty, 1)?;
            continue;
        }
        let (elem, n) = t.list()?;
        if elem != 12 || n > MAX_PARQUET_COLUMNS {
            return Err(format!("row group {g} has {n} column chunks"));
        }
        for _ in 0..n {
            // ColumnChunk: its metadata is field 3.
            let mut last = 0i16;
            while let Some((id, ty)) = t.field(&mut last)? {
                if (id, ty) == (3, 12) {
                    chunks.push(check_column_meta(t, g)?);
                } else {
                    t.skip(ty, 2)?;
                }
            }
        }
    }
    Ok(())
}

fn check_column_meta(t: &mut Thrift, g: usize) -> Result<ChunkSpan, String> {
    let (mut codec, mut size, mut data, mut dict) = (0i32, None, None, None);
    let mut last = 0i16;
    while let Some((id, ty)) = t.field(&mut last)? {
        match (id, ty) {
            (4, 5) => codec = t.i32()?,
            (7, 6) => size = Some(t.int()?),
            (9, 6) => data = Some(t.int()?),
            (11, 6) => dict = Some(t.int()?),
            _ => t.skip(ty, 3)?,
        }
    }
    let bad =
        || format!("a column chunk of row group {g} has a negative or missing offset or size");
    let start = dict.or(data).ok_or_else(bad)?;
    let size = size.ok_or_else(bad)?;
    let (start, size) = (
        u64::try_from(start).map_err(|_| bad())?,
        u64::try_from(size).map_err(|_| bad())?,
    );
    Ok(ChunkSpan {
        start,
        end: start.checked_add(size).ok_or_else(bad)?,
        codec,
    })
}

/// Thrift's compact protocol over bytes in memory; every count is checked against the bytes
/// left, so nothing is sized by a claim the bytes cannot back.
struct Thrift<'a> {
    buf: &'a [u8],
    pos: usize,
}

const ENDS_EARLY: &str = "the metadata ends early";

impl Thrift<'_> {
    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn byte(&mut self) -> Result<u8, String> {
        let b = *self.buf.get(self.pos).ok_or(ENDS_EARLY)?;
        self.pos += 1;
        Ok(b)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err("a number runs past 10 bytes".into())
    }

    /// A zigzag integer (i16, i32 and i64 alike).
    fn int(&mut self) -> Result<i64, String> {
        let v = self.varint()?;
        Ok((v >> 1) as i64 ^ -((v & 1) as i64))
    }

    fn i32(&mut self) -> Result<i32, String> {
        let v = self.int()?;
        i32::try_from(v).map_err(|_| format!("{v} does not fit an i32"))
    }

    fn advance(&mut self, n: u64) -> Result<(), String> {
        if n > self.left() as u64 {
            return Err(ENDS_EARLY.into());
        }
        self.pos += n as usize;
        Ok(())
    }

    /// A field's id and type; `None` at the struct's end.
    fn field(&mut self, last: &mut i16) -> Result<Option<(i16, u8)>, String> {
        let b = self.byte()?;
        if b == 0 {
            return Ok(None);
        }
        let delta = i16::from(b >> 4);
        let id = if delta == 0 {
            let v = self.int()?;
            i16::try_from(v).map_err(|_| format!("field id {v}"))?
        } else {
            last.checked_add(delta).ok_or("field id overflows")?
        };
        *last = id;
        Ok(Some((id, b & 0x0f)))
    }

    /// A list's element type and length (each element takes at least a byte).
    fn list(&mut self) -> Result<(u8, usize), String> {
        let b = self.byte()?;
        let n = match b >> 4 {
            15 => self.varint()?,
            n => u64::from(n),
        };
        if n > self.left() as u64 {
            return Err(format!(
                "a list claims {n} elements in {} bytes",
                self.left()
            ));
        }
        Ok((b & 0x0f, n as usize))
    }

    /// Field `want` (an i32) of the struct that starts here, skipping the rest of it;
    /// `default` when absent.
    fn struct_i32_field(&mut self, want: i16, default: i32) -> Result<i64, String> {
        let mut found = i64::from(default);
        let mut last = 0i16;
        while let Some((id, ty)) = self.field(&mut last)? {
            if id == want && ty == 5 {
                found = i64::from(self.i32()?);
            } else {
                self.skip(ty, 1)?;
            }
        }
        Ok(found)
    }

    /// Skip a field's value of type `ty`.
    fn skip(&mut self, ty: u8, depth: u32) -> Result<(), String> {
        if depth > MAX_THRIFT_DEPTH {
            return Err(format!("structures nest over {MAX_THRIFT_DEPTH} deep"));
        }
        match ty {
            // A struct field's boolean is in its type.
            1 | 2 => Ok(()),
            3 => self.byte().map(drop),
            4..=6 => self.varint().map(drop),
            7 => self.advance(8),
            8 => {
                let n = self.varint()?;
                self.advance(n)
            }
            9 | 10 => {
                let (elem, n) = self.list()?;
                for _ in 0..n {
                    match elem {
                        // A list's booleans take a byte each.
                        1 | 2 => self.advance(1)?,
                        _ => self.skip(elem, depth + 1)?,
                    }
                }
                Ok(())
            }
            11 => {
                let n = self.varint()?;
                if n == 0 {
                    return Ok(());
                }
                if n > self.left() as u64 {
                    return Err(format!("a map claims {n} entries in {} bytes", self.left()));
                }
                let kinds = self.byte()?;
                for _ in 0..n {
                    for kind in [kinds >> 4, kinds & 0x0f] {
                        match kind {
                            1 | 2 => self.advance(1)?,
                            _ => self.skip(kind, depth + 1)?,
                        }
                    }
                }
                Ok(())
            }
            12 => {
                let mut last = 0i16;
                while let Some((_, ty)) = self.field(&mut last)? {
                    self.skip(ty, depth + 1)?;
                }
                Ok(())
            }
            other => Err(format!("unknown Thrift type {other}")),
        }
    }
}

/// The footer of a file, for tests: the metadata length is checked and the rest walked.
#[cfg(test)]
fn check_footer_bytes(file: &[u8]) -> Result<usize, String> {
    let n = file.len();
    let meta_len = u32::from_le_bytes(file[n - 8..n - 4].try_into().expect("4")) as usize;
    check_footer(&file[n - 8 - meta_len..n - 8], (n - 8 - meta_len) as u64).map(|c| c.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Thrift compact writing, enough for schemas.
    fn varint(out: &mut Vec<u8>, mut v: u64) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }
    fn zigzag(v: i64) -> u64 {
        ((v << 1) ^ (v >> 63)) as u64
    }
    fn list_header(out: &mut Vec<u8>, elem: u8, n: usize) {
        if n < 15 {
            out.push(((n as u8) << 4) | elem);
        } else {
            out.push(0xf0 | elem);
            varint(out, n as u64);
        }
    }
    /// A footer with `children[i]` children for schema element `i`.
    fn footer(children: &[i64]) -> Vec<u8> {
        let mut m = vec![0x15];
        varint(&mut m, zigzag(1)); // 1: version
        m.push(0x19); // 2: schema list
        list_header(&mut m, 12, children.len());
        for &c in children {
            m.push(0x48); // 4: name
            m.push(1);
            m.push(b'x');
            m.push(0x15); // 5: num_children
            varint(&mut m, zigzag(c));
            m.push(0);
        }
        m.push(0x16); // 3: num_rows
        varint(&mut m, 0);
        m.push(0x19); // 4: row groups
        list_header(&mut m, 12, 0);
        m.push(0);
        let mut file = b"PAR1".to_vec();
        let len = m.len() as u32;
        file.extend(m);
        file.extend(len.to_le_bytes());
        file.extend(b"PAR1");
        file
    }

    #[test]
    fn schemas_too_deep_or_claiming_too_many_children_are_refused() {
        assert_eq!(check_footer_bytes(&footer(&[2, 0, 1, 0])), Ok(0));
        let deep: Vec<i64> = (0..10_000).map(|i| i64::from(i < 9_999)).collect();
        let e = check_footer_bytes(&footer(&deep)).expect_err("deep");
        assert!(e.contains("nests over 64"), "{e}");
        let e = check_footer_bytes(&footer(&[2_000_000_000, 0])).expect_err("children");
        assert!(e.contains("claims 2000000000 children"), "{e}");
        let e = check_footer_bytes(&footer(&[1, 0, 0])).expect_err("orphan");
        assert!(e.contains("belongs to no group"), "{e}");
        let e = check_footer_bytes(&footer(&[-1, 0])).expect_err("negative");
        assert!(e.contains("-1 children"), "{e}");
    }
}
