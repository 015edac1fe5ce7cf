//! Files an operator names (`--tokenizer`, `--engine replay:FILE`, `embedded:MODEL.gguf`),
//! opened the way component files are: only a regular file (a directory, device, FIFO or
//! socket is refused at once with a message saying what it is, without blocking on a FIFO or
//! reading `/dev/zero` without end), and read with a size cap where the whole file is read.

use std::fs::File;
use std::io::{self, Read as _};
use std::path::Path;

/// Largest tokenizer, tokenizer-config or chat-template file read, bytes (the largest
/// `tokenizer.json` files in use are ~30 MB). Guards memory against a wrong path.
pub const MAX_TOKENIZER_FILE_BYTES: u64 = 256 << 20;

/// Open `path` for reading if it is a regular file (a symlink to one is followed). The open
/// does not block (`O_NONBLOCK`: a FIFO without a writer would otherwise hang it), and what
/// was opened is checked, not the path, so nothing can be swapped in between.
pub fn open_regular(path: &Path) -> io::Result<File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NONBLOCK);
    }
    let file = options.open(path)?;
    let meta = file.metadata()?;
    if meta.is_dir() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is a directory; name the file",
        ));
    }
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "is not a regular file (a device, FIFO or socket); name a file",
        ));
    }
    Ok(file)
}

/// The whole of the regular file `path`, refused past `max` bytes (whatever its size claims).
pub fn read_capped(path: &Path, max: u64) -> io::Result<Vec<u8>> {
    let file = open_regular(path)?;
    let too_big = || {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("is over the {max} byte limit for this file"),
        )
    };
    let len = file.metadata()?.len();
    if len > max {
        return Err(too_big());
    }
    let mut bytes = Vec::with_capacity(len as usize);
    file.take(max + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max {
        return Err(too_big());
    }
    Ok(bytes)
}

/// [`read_capped`] as UTF-8 text.
pub fn read_capped_text(path: &Path, max: u64) -> io::Result<String> {
    String::from_utf8(read_capped(path, max)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "is not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_fifos_and_directories_are_refused_at_once() {
        let dir = tempfile::tempdir().expect("tmp");
        let e = read_capped(Path::new("/dev/zero"), 1 << 20).expect_err("a device");
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let e = read_capped(dir.path(), 1 << 20).expect_err("a directory");
        assert!(e.to_string().contains("is a directory"), "{e}");
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.display().to_string()).expect("path");
        // SAFETY: a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let e = read_capped(&fifo, 1 << 20).expect_err("a FIFO without a writer");
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let big = dir.path().join("big");
        std::fs::write(&big, vec![b'x'; 100]).expect("write");
        assert!(read_capped(&big, 99).is_err());
        assert_eq!(read_capped(&big, 100).expect("fits").len(), 100);
    }
}
