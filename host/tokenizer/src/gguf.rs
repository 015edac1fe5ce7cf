//! Reading the metadata of a GGUF file (llama.cpp's model format): the key/value section only,
//! never the tensors. Enough to build the tokenizer and read the chat template.

use std::collections::BTreeMap;
use std::io::{BufReader, Read};
use std::path::Path;

use crate::TokenizerError;

/// Entries in one GGUF array accepted. Guards memory against a corrupt or hostile header.
pub const MAX_GGUF_ARRAY_LEN: u64 = 16 << 20;

/// Bytes in one GGUF string accepted.
pub const MAX_GGUF_STRING_BYTES: u64 = 64 << 20;

/// Key/value pairs in a GGUF header accepted.
pub const MAX_GGUF_KEYS: u64 = 1 << 16;

/// One metadata value.
#[derive(Debug, Clone, PartialEq)]
pub enum GgufValue {
    /// Any unsigned integer type.
    Uint(u64),
    /// Any signed integer type.
    Int(i64),
    /// f32 or f64.
    Float(f64),
    /// bool.
    Bool(bool),
    /// string.
    Str(String),
    /// array of values.
    Array(Vec<GgufValue>),
}

impl GgufValue {
    /// The value as u32, if it is an integer that fits.
    pub fn as_u32(&self) -> Option<u32> {
        match self {
            GgufValue::Uint(v) => u32::try_from(*v).ok(),
            GgufValue::Int(v) => u32::try_from(*v).ok(),
            _ => None,
        }
    }

    /// The value as a string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            GgufValue::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// The metadata section of a GGUF file.
#[derive(Debug, Clone, Default)]
pub struct GgufMetadata {
    /// Format version (2 or 3).
    pub version: u32,
    /// Key → value.
    pub entries: BTreeMap<String, GgufValue>,
}

impl GgufMetadata {
    /// The value of `key`.
    pub fn get(&self, key: &str) -> Option<&GgufValue> {
        self.entries.get(key)
    }

    /// Read the metadata of the GGUF file at `path`.
    pub fn read(path: &Path) -> Result<Self, TokenizerError> {
        let file = crate::file::open_regular(path).map_err(|e| TokenizerError::Io {
            path: path.display().to_string(),
            source: e,
        })?;
        let mut r = Reader {
            inner: BufReader::with_capacity(1 << 20, file),
            path,
        };
        let magic = r.u32()?;
        if magic != u32::from_le_bytes(*b"GGUF") {
            return Err(r.bad("not a GGUF file (bad magic)"));
        }
        let version = r.u32()?;
        if !(2..=3).contains(&version) {
            return Err(r.bad(&format!("GGUF version {version} is not supported (2 or 3)")));
        }
        let _tensors = r.u64()?;
        let n_kv = r.u64()?;
        if n_kv > MAX_GGUF_KEYS {
            return Err(r.bad(&format!(
                "{n_kv} metadata keys is more than {MAX_GGUF_KEYS}"
            )));
        }
        let mut entries = BTreeMap::new();
        for _ in 0..n_kv {
            let key = r.string()?;
            let ty = r.u32()?;
            let value = r.value(ty)?;
            entries.insert(key, value);
        }
        Ok(GgufMetadata { version, entries })
    }
}

struct Reader<'a, R> {
    inner: R,
    path: &'a Path,
}

impl<R: Read> Reader<'_, R> {
    fn bad(&self, message: &str) -> TokenizerError {
        TokenizerError::Format {
            path: self.path.display().to_string(),
            message: message.to_string(),
        }
    }

    fn bytes<const N: usize>(&mut self) -> Result<[u8; N], TokenizerError> {
        let mut b = [0u8; N];
        self.inner
            .read_exact(&mut b)
            .map_err(|e| self.bad(&format!("truncated header: {e}")))?;
        Ok(b)
    }

    fn u32(&mut self) -> Result<u32, TokenizerError> {
        Ok(u32::from_le_bytes(self.bytes()?))
    }

    fn u64(&mut self) -> Result<u64, TokenizerError> {
        Ok(u64::from_le_bytes(self.bytes()?))
    }

    fn string(&mut self) -> Result<String, TokenizerError> {
        let len = self.u64()?;
        if len > MAX_GGUF_STRING_BYTES {
            return Err(self.bad(&format!(
                "a string of {len} bytes is longer than {MAX_GGUF_STRING_BYTES}"
            )));
        }
        let mut buf = vec![0u8; len as usize];
        self.inner
            .read_exact(&mut buf)
            .map_err(|e| self.bad(&format!("truncated string: {e}")))?;
        // Token strings of some models are not valid UTF-8 on their own; keep them lossily.
        Ok(String::from_utf8(buf)
            .unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned()))
    }

    fn value(&mut self, ty: u32) -> Result<GgufValue, TokenizerError> {
        Ok(match ty {
            0 => GgufValue::Uint(u64::from(self.bytes::<1>()?[0])),
            1 => GgufValue::Int(i64::from(i8::from_le_bytes(self.bytes()?))),
            2 => GgufValue::Uint(u64::from(u16::from_le_bytes(self.bytes()?))),
            3 => GgufValue::Int(i64::from(i16::from_le_bytes(self.bytes()?))),
            4 => GgufValue::Uint(u64::from(self.u32()?)),
            5 => GgufValue::Int(i64::from(i32::from_le_bytes(self.bytes()?))),
            6 => GgufValue::Float(f64::from(f32::from_le_bytes(self.bytes()?))),
            7 => GgufValue::Bool(self.bytes::<1>()?[0] != 0),
            8 => GgufValue::Str(self.string()?),
            9 => {
                let elem = self.u32()?;
                let n = self.u64()?;
                if n > MAX_GGUF_ARRAY_LEN {
                    return Err(self.bad(&format!(
                        "an array of {n} entries is longer than {MAX_GGUF_ARRAY_LEN}"
                    )));
                }
                if elem == 9 {
                    return Err(self.bad("nested arrays are not supported"));
                }
                let mut v = Vec::with_capacity(n as usize);
                for _ in 0..n {
                    v.push(self.value(elem)?);
                }
                GgufValue::Array(v)
            }
            10 => GgufValue::Uint(self.u64()?),
            11 => GgufValue::Int(i64::from_le_bytes(self.bytes()?)),
            12 => GgufValue::Float(f64::from_le_bytes(self.bytes()?)),
            other => return Err(self.bad(&format!("unknown metadata value type {other}"))),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(kvs: &[(&str, u32, Vec<u8>)]) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(b"GGUF");
        b.extend_from_slice(&3u32.to_le_bytes());
        b.extend_from_slice(&0u64.to_le_bytes());
        b.extend_from_slice(&(kvs.len() as u64).to_le_bytes());
        for (k, ty, v) in kvs {
            b.extend_from_slice(&(k.len() as u64).to_le_bytes());
            b.extend_from_slice(k.as_bytes());
            b.extend_from_slice(&ty.to_le_bytes());
            b.extend_from_slice(v);
        }
        b
    }

    fn gstr(s: &str) -> Vec<u8> {
        let mut v = (s.len() as u64).to_le_bytes().to_vec();
        v.extend_from_slice(s.as_bytes());
        v
    }

    #[test]
    fn reads_scalars_strings_and_arrays() {
        let mut arr = 8u32.to_le_bytes().to_vec();
        arr.extend_from_slice(&2u64.to_le_bytes());
        arr.extend(gstr("a"));
        arr.extend(gstr("bc"));
        let bytes = header(&[
            ("n", 4, 7u32.to_le_bytes().to_vec()),
            ("s", 8, gstr("héllo")),
            ("b", 7, vec![1]),
            ("arr", 9, arr),
        ]);
        let dir = std::env::temp_dir().join(format!("gguf-test-{}", std::process::id()));
        std::fs::write(&dir, &bytes).expect("write");
        let m = GgufMetadata::read(&dir).expect("parse");
        let _ = std::fs::remove_file(&dir);
        assert_eq!(m.get("n").and_then(GgufValue::as_u32), Some(7));
        assert_eq!(m.get("s").and_then(GgufValue::as_str), Some("héllo"));
        assert_eq!(m.get("b"), Some(&GgufValue::Bool(true)));
        assert_eq!(
            m.get("arr"),
            Some(&GgufValue::Array(vec![
                GgufValue::Str("a".into()),
                GgufValue::Str("bc".into())
            ]))
        );
    }

    #[test]
    fn corrupt_headers_are_named() {
        let path = std::env::temp_dir().join(format!("gguf-bad-{}", std::process::id()));
        std::fs::write(&path, b"NOPE\x03\0\0\0").expect("write");
        let err = GgufMetadata::read(&path).expect_err("magic");
        assert!(err.to_string().contains("not a GGUF file"), "{err}");
        let mut b = header(&[]);
        b.truncate(10);
        std::fs::write(&path, &b).expect("write");
        assert!(
            GgufMetadata::read(&path)
                .expect_err("short")
                .to_string()
                .contains("truncated")
        );
        let huge = header(&[("s", 8, (u64::MAX).to_le_bytes().to_vec())]);
        std::fs::write(&path, &huge).expect("write");
        assert!(
            GgufMetadata::read(&path)
                .expect_err("huge")
                .to_string()
                .contains("longer than")
        );
        let _ = std::fs::remove_file(&path);
    }
}
