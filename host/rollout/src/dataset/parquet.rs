//! Parquet files checked before the `parquet` crate reads them.
//!
//! The crate trusts a file's own word in places that end a process: it builds the schema tree
//! recursively (a schema nested 10,000 deep overflows the stack), sizes vectors by the footer's
//! child counts (2 billion children is an allocation failure) and inflates gzip and LZ4-frame
//! pages to their end whatever size their header declares. So the crate reads through
//! [`CheckedParquet`], which hands it only bytes checked here first:
//!
//! * the footer, read once, walked (Thrift compact, bounded depth) and served from memory: at
//!   most [`MAX_PARQUET_FOOTER_BYTES`], [`MAX_PARQUET_COLUMNS`][cols] schema elements nested
//!   at most [`MAX_PARQUET_DEPTH`][depth] deep, child counts within the schema,
//!   [`MAX_PARQUET_ROW_GROUPS`][groups] row groups, column chunks inside the file and not
//!   overlapping;
//! * each page, read once when the crate asks for it: its header parsed here, its sizes at most
//!   [`MAX_PARQUET_PAGE_BYTES`][page], compressed and inflated, inside its column chunk, and a
//!   gzip or LZ4-frame page inflated (without keeping the output) to check it stops within its
//!   declared size before the crate inflates the same bytes.
//!
//! * the pages one row needs: a record can span pages, and the crate builds a whole row before
//!   rollbox sees it, so the pages inflated since the last row was handed out are at most
//!   [`MAX_PARQUET_PAGES_PER_ROW_BYTES`].
//!
//! The crate gets exactly the bytes that were checked (served from memory, not read again),
//! so a file changed while it is read cannot slip past the checks.
//!
//! [cols]: super::parquet_meta::MAX_PARQUET_COLUMNS
//! [depth]: super::parquet_meta::MAX_PARQUET_DEPTH
//! [groups]: super::parquet_meta::MAX_PARQUET_ROW_GROUPS
//! [page]: super::parquet_meta::MAX_PARQUET_PAGE_BYTES

use std::collections::HashMap;
use std::fs::File;
use std::io::Read as _;
use std::os::unix::fs::FileExt as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use parquet::errors::ParquetError;
use parquet::file::reader::{ChunkReader, Length};

use super::parquet_meta::{
    ChunkSpan, MAX_PAGE_HEADER_BYTES, Page, PageError, check_footer, parse_page_header,
};

/// The largest footer (file metadata) read.
pub const MAX_PARQUET_FOOTER_BYTES: usize = 16 << 20;
/// The most inflated page bytes read for one row (see the module's documentation).
pub const MAX_PARQUET_PAGES_PER_ROW_BYTES: u64 = 1 << 30;

/// Codec numbers in the footer (Parquet's `CompressionCodec`).
const GZIP: i32 = 2;
const LZ4: i32 = 5;
/// An LZ4 frame's magic number, little-endian.
const LZ4_FRAME_MAGIC: [u8; 4] = [0x04, 0x22, 0x4d, 0x18];

/// A Parquet file as the `parquet` crate reads it: the checked footer from memory, each page
/// checked as it is asked for (see the module's documentation).
pub(super) struct CheckedParquet {
    file: File,
    len: u64,
    /// Where the footer (metadata, its length and the closing magic) starts.
    footer_start: u64,
    footer: Bytes,
    /// Sorted by start, not overlapping.
    chunks: Vec<ChunkSpan>,
    /// Pages checked by [`ChunkReader::get_read`] whose data the crate asks for next, by
    /// offset.
    pages: Mutex<HashMap<u64, Bytes>>,
    /// Inflated page bytes read since the last row was handed out (reset by the reader).
    since_row: Arc<AtomicU64>,
}

impl CheckedParquet {
    /// Read and check `file`'s footer; `Err` says what is wrong with it.
    pub(super) fn open(file: File, since_row: Arc<AtomicU64>) -> Result<CheckedParquet, String> {
        let len = file
            .metadata()
            .map_err(|e| format!("cannot read its size: {e}"))?
            .len();
        if len < 12 {
            return Err(format!("{len} bytes is too short for a Parquet file"));
        }
        let mut tail = [0u8; 8];
        file.read_exact_at(&mut tail, len - 8)
            .map_err(|e| format!("cannot read its footer: {e}"))?;
        if tail[4..] != *b"PAR1" {
            return Err("it does not end with `PAR1` (an encrypted or truncated file?)".into());
        }
        let meta_len = u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]));
        if meta_len > MAX_PARQUET_FOOTER_BYTES as u64 {
            return Err(format!(
                "its footer claims {meta_len} bytes, over the {} MiB limit",
                MAX_PARQUET_FOOTER_BYTES >> 20
            ));
        }
        if meta_len + 12 > len {
            return Err(format!(
                "its footer claims {meta_len} bytes, more than the file holds"
            ));
        }
        let footer_start = len - 8 - meta_len;
        let mut footer = vec![0u8; (meta_len + 8) as usize];
        file.read_exact_at(&mut footer, footer_start)
            .map_err(|e| format!("cannot read its footer: {e}"))?;
        let chunks = check_footer(&footer[..meta_len as usize], footer_start)
            .map_err(|e| format!("its footer is refused: {e}"))?;
        Ok(CheckedParquet {
            file,
            len,
            footer_start,
            footer: Bytes::from(footer),
            chunks,
            pages: Mutex::new(HashMap::new()),
            since_row,
        })
    }

    /// The column chunk holding `offset`.
    fn chunk_at(&self, offset: u64) -> Option<ChunkSpan> {
        let i = self.chunks.partition_point(|c| c.start <= offset);
        let c = *self.chunks.get(i.checked_sub(1)?)?;
        (offset < c.end).then_some(c)
    }

    fn read_at(&self, offset: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.file.read_exact_at(&mut buf, offset)?;
        Ok(buf)
    }

    /// The page at `offset`: its header's bytes (returned) and its data (kept for
    /// [`ChunkReader::get_bytes`]), both checked.
    fn check_page(&self, offset: u64) -> Result<Bytes, String> {
        let chunk = self
            .chunk_at(offset)
            .ok_or_else(|| format!("a page at byte {offset} is in no column chunk"))?;
        let room = chunk.end - offset;
        // Most headers are tens of bytes; a header with long statistics gets a second read.
        let reading = |e: std::io::Error| format!("reading the page at byte {offset}: {e}");
        let mut window = self
            .read_at(offset, room.min(64 << 10) as usize)
            .map_err(reading)?;
        let page = match parse_page_header(&window) {
            Err(PageError::Short) if room > window.len() as u64 => {
                window = self
                    .read_at(offset, room.min(MAX_PAGE_HEADER_BYTES as u64) as usize)
                    .map_err(reading)?;
                parse_page_header(&window)
            }
            other => other,
        }
        .map_err(|e| format!("the page at byte {offset}: {e}"))?;
        let data_start = offset + page.header_len as u64;
        if page.compressed as u64 > chunk.end - data_start {
            return Err(format!(
                "the page at byte {offset} claims {} bytes, past the end of its column chunk",
                page.compressed
            ));
        }
        let data = self.read_at(data_start, page.compressed).map_err(reading)?;
        check_inflation(chunk.codec, &page, &data)
            .map_err(|e| format!("the page at byte {offset}: {e}"))?;
        let for_row = self
            .since_row
            .fetch_add(page.uncompressed as u64, Ordering::Relaxed)
            + page.uncompressed as u64;
        if for_row > MAX_PARQUET_PAGES_PER_ROW_BYTES {
            return Err(format!(
                "one row needs over {} MiB of pages; rows that large are refused",
                MAX_PARQUET_PAGES_PER_ROW_BYTES >> 20
            ));
        }
        let mut pages = self.pages.lock().unwrap_or_else(|p| p.into_inner());
        // Pages the crate skips (index pages) are never asked for; do not let them pile up.
        if pages.len() >= 256 {
            pages.clear();
        }
        pages.insert(data_start, Bytes::from(data));
        window.truncate(page.header_len);
        Ok(Bytes::from(window))
    }
}

fn refused(e: impl std::fmt::Display) -> ParquetError {
    ParquetError::General(format!("refused: {e}"))
}

impl Length for CheckedParquet {
    fn len(&self) -> u64 {
        self.len
    }
}

impl ChunkReader for CheckedParquet {
    type T = std::io::Cursor<Bytes>;

    fn get_read(&self, start: u64) -> parquet::errors::Result<Self::T> {
        if start >= self.footer_start {
            let from = (start - self.footer_start).min(self.footer.len() as u64) as usize;
            return Ok(std::io::Cursor::new(self.footer.slice(from..)));
        }
        let header = self.check_page(start).map_err(ParquetError::General)?;
        Ok(std::io::Cursor::new(header))
    }

    fn get_bytes(&self, start: u64, length: usize) -> parquet::errors::Result<Bytes> {
        if start >= self.footer_start {
            let from = (start - self.footer_start) as usize;
            return from
                .checked_add(length)
                .filter(|&end| end <= self.footer.len())
                .map(|end| self.footer.slice(from..end))
                .ok_or_else(|| refused(format!("{length} bytes at {start} are past the file")));
        }
        let mut pages = self.pages.lock().unwrap_or_else(|p| p.into_inner());
        match pages.remove(&start) {
            Some(data) if data.len() == length => Ok(data),
            _ => Err(refused(format!(
                "the reader asked for {length} bytes at {start}, which are not a checked page"
            ))),
        }
    }
}

/// Whether a gzip or LZ4-frame page stops inflating within its declared size (the codecs the
/// `parquet` crate inflates to the end; the others it sizes by the header).
fn check_inflation(codec: i32, page: &Page, data: &[u8]) -> Result<(), String> {
    if !page.is_compressed {
        return Ok(());
    }
    let payload = &data[page.levels.min(data.len())..];
    let declared = (page.uncompressed - page.levels) as u64;
    let inflated = match codec {
        GZIP => std::io::copy(
            &mut flate2::read::MultiGzDecoder::new(payload).take(declared + 1),
            &mut std::io::sink(),
        ),
        LZ4 if payload.starts_with(&LZ4_FRAME_MAGIC) => std::io::copy(
            &mut lz4_flex::frame::FrameDecoder::new(payload).take(declared + 1),
            &mut std::io::sink(),
        ),
        _ => return Ok(()),
    };
    match inflated {
        Ok(n) if n > declared => Err(format!("it inflates past its declared {declared} bytes")),
        Ok(_) => Ok(()),
        Err(e) => Err(format!("it does not inflate: {e}")),
    }
}
