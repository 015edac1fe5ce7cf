//! safetensors files: a batch written as one file, loadable with
//! `safetensors.torch.load_file`, with string metadata (provenance) in its header.
//!
//! Files are written atomically: to a temporary file in the same directory, synced, then
//! renamed over the target, so a reader (or a run killed mid-write) never sees half a file.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::Path;

use candle_core::{Device, Tensor};
use half::bf16;
use safetensors::{Dtype, SafeTensors, View};

use crate::concat::with_cpu_slice;
use crate::{DType, HostTensor, TensorData, TensorError};

impl DType {
    /// The safetensors dtype (`Bool` is `BOOL`, one byte per element).
    pub fn safetensors(self) -> Dtype {
        match self {
            DType::I32 => Dtype::I32,
            DType::I64 => Dtype::I64,
            DType::F32 => Dtype::F32,
            DType::BF16 => Dtype::BF16,
            DType::Bool => Dtype::BOOL,
            DType::U8 => Dtype::U8,
        }
    }

    fn from_safetensors(dtype: Dtype) -> Option<DType> {
        Some(match dtype {
            Dtype::I32 => DType::I32,
            Dtype::I64 => DType::I64,
            Dtype::F32 => DType::F32,
            Dtype::BF16 => DType::BF16,
            Dtype::BOOL => DType::Bool,
            Dtype::U8 => DType::U8,
            _ => return None,
        })
    }
}

/// One tensor's little-endian bytes, ready for serialisation.
struct Bytes {
    dtype: Dtype,
    shape: Vec<usize>,
    bytes: Vec<u8>,
}

impl View for &Bytes {
    fn dtype(&self) -> Dtype {
        self.dtype
    }
    fn shape(&self) -> &[usize] {
        &self.shape
    }
    fn data(&self) -> Cow<'_, [u8]> {
        Cow::Borrowed(&self.bytes)
    }
    fn data_len(&self) -> usize {
        self.bytes.len()
    }
}

fn le_bytes(t: &HostTensor) -> Result<Vec<u8>, TensorError> {
    fn cast<T: candle_core::WithDType + bytemuck::Pod>(t: &Tensor) -> Option<Vec<u8>> {
        with_cpu_slice(t, |s: &[T]| bytemuck::cast_slice::<T, u8>(s).to_vec())
    }
    let cpu = t.to_device(&Device::Cpu)?;
    let c = cpu
        .as_candle()
        .contiguous()
        .map_err(|e| TensorError::device("write_safetensors", e))?;
    let bytes = match t.dtype() {
        DType::I32 => cast::<i32>(&c),
        DType::I64 => cast::<i64>(&c),
        DType::F32 => cast::<f32>(&c),
        DType::BF16 => cast::<bf16>(&c),
        DType::Bool | DType::U8 => cast::<u8>(&c),
    };
    bytes.ok_or_else(|| TensorError::Invalid {
        op: "write_safetensors",
        message: "tensor data is not readable on the CPU".into(),
    })
}

/// Serialise tensors and metadata to safetensors bytes.
pub fn to_safetensors_bytes(
    tensors: &[(String, HostTensor)],
    metadata: &BTreeMap<String, String>,
) -> Result<Vec<u8>, TensorError> {
    let views = tensors
        .iter()
        .map(|(name, t)| {
            crate::check_key_name(name)?;
            Ok((
                name.as_str(),
                Bytes {
                    dtype: t.dtype().safetensors(),
                    shape: t.shape().to_vec(),
                    bytes: le_bytes(t)?,
                },
            ))
        })
        .collect::<Result<Vec<_>, TensorError>>()?;
    let info: HashMap<String, String> = metadata.clone().into_iter().collect();
    safetensors::serialize(
        views.iter().map(|(n, b)| (*n, b)),
        (!info.is_empty()).then_some(info),
    )
    .map_err(|e| match e {
        // Readers refuse a header over the format's cap, and so does the writer: a typed
        // size error, so the rollout controller splits the batch.
        safetensors::SafeTensorError::HeaderTooLarge => {
            // The writer does not say by how much; the metadata is nearly all of a header.
            let meta_bytes: usize = metadata.iter().map(|(k, v)| k.len() + v.len()).sum();
            TensorError::TooLarge {
                op: "write_safetensors (header)",
                bytes: (meta_bytes as u128).max(MAX_SAFETENSORS_HEADER_BYTES as u128 + 1),
                limit: MAX_SAFETENSORS_HEADER_BYTES,
                shape: format!("{} tensors and {meta_bytes} metadata bytes", tensors.len()),
            }
        }
        other => TensorError::Invalid {
            op: "write_safetensors",
            message: other.to_string(),
        },
    })
}

/// The largest safetensors header (JSON: tensor names, shapes, offsets and metadata) readers
/// and the `safetensors` writer accept, bytes (the format's cap).
pub const MAX_SAFETENSORS_HEADER_BYTES: usize = 100_000_000;

/// Write tensors and metadata to `path` atomically (temp file + fsync + rename).
pub fn write_safetensors(
    path: &Path,
    tensors: &[(String, HostTensor)],
    metadata: &BTreeMap<String, String>,
) -> Result<(), TensorError> {
    let bytes = to_safetensors_bytes(tensors, metadata)?;
    write_atomic(path, &bytes).map_err(|e| TensorError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    })
}

/// Write `bytes` to `path` via a temporary sibling file, fsync, then rename.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, |f| f.write_all(bytes))
}

/// Write `path` through `fill` (buffered) via a temporary sibling file, fsync, then rename: a
/// file too large to build in memory first is still replaced whole or not at all. The
/// temporary file is created by [`create_temp_beside`], so nothing is written through a link
/// another user planted in the directory.
pub fn write_atomic_with(
    path: &Path,
    fill: impl FnOnce(&mut dyn Write) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let (file, tmp) = create_temp_beside(path, None)?;
    let written = (|| {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, file);
        fill(&mut w)?;
        w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&tmp);
        return Err(e);
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty())
        && let Ok(d) = std::fs::File::open(dir)
    {
        // Persist the rename itself; not every filesystem supports syncing a directory.
        let _ = d.sync_all();
    }
    Ok(())
}

/// A new file beside `path` under an unpredictable name (`.NAME.tmp-RANDOM`), created with
/// `O_CREAT | O_EXCL | O_NOFOLLOW` (and `mode`, else the default 0666 less the umask): it is
/// never an existing file or a link someone planted, in a directory others can write too.
/// Rename it over `path` when complete; the rename replaces a link at `path` rather than
/// writing through it.
pub fn create_temp_beside(
    path: &Path,
    mode: Option<u32>,
) -> std::io::Result<(std::fs::File, std::path::PathBuf)> {
    use std::io::Read as _;
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut random = [0u8; 8];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut random)?;
    let tmp = dir.join(format!(".{name}.tmp-{:016x}", u64::from_le_bytes(random)));
    let mut options = std::fs::OpenOptions::new();
    options.write(true).read(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.custom_flags(libc::O_NOFOLLOW);
        if let Some(mode) = mode {
            options.mode(mode);
        }
    }
    let _ = mode;
    Ok((options.open(&tmp)?, tmp))
}

/// A safetensors file read back: tensors in file order, and the metadata.
#[derive(Debug, Clone, PartialEq)]
pub struct SafetensorsFile {
    /// Tensors, in the order they are stored.
    pub tensors: Vec<(String, HostTensor)>,
    /// The header's `__metadata__`.
    pub metadata: BTreeMap<String, String>,
}

impl SafetensorsFile {
    /// The tensor named `name`.
    pub fn get(&self, name: &str) -> Option<&HostTensor> {
        self.tensors.iter().find(|(k, _)| k == name).map(|(_, t)| t)
    }
}

/// Parse safetensors bytes onto `device`.
pub fn from_safetensors_bytes(
    bytes: &[u8],
    device: &Device,
) -> Result<SafetensorsFile, TensorError> {
    let bad = |message: String| TensorError::Invalid {
        op: "read_safetensors",
        message,
    };
    let (_, meta) = SafeTensors::read_metadata(bytes).map_err(|e| bad(e.to_string()))?;
    let metadata: BTreeMap<String, String> = meta
        .metadata()
        .clone()
        .unwrap_or_default()
        .into_iter()
        .collect();
    let st = SafeTensors::deserialize(bytes).map_err(|e| bad(e.to_string()))?;
    let mut entries: Vec<(String, safetensors::tensor::TensorView<'_>)> = st.tensors();
    entries.sort_by_key(|(_, v)| v.data().as_ptr() as usize);
    let mut tensors = Vec::with_capacity(entries.len());
    for (name, view) in entries {
        let dtype = DType::from_safetensors(view.dtype())
            .ok_or_else(|| bad(format!("`{name}` has unsupported dtype {:?}", view.dtype())))?;
        let raw = view.data();
        let data = match dtype {
            DType::I32 => TensorData::I32(bytemuck::pod_collect_to_vec(raw)),
            DType::I64 => TensorData::I64(bytemuck::pod_collect_to_vec(raw)),
            DType::F32 => TensorData::F32(bytemuck::pod_collect_to_vec(raw)),
            DType::BF16 => TensorData::BF16(bytemuck::pod_collect_to_vec(raw)),
            DType::Bool => TensorData::Bool(raw.iter().map(|&b| b != 0).collect()),
            DType::U8 => TensorData::U8(raw.to_vec()),
        };
        tensors.push((
            name,
            HostTensor::new_on(data, view.shape().to_vec(), device)?,
        ));
    }
    Ok(SafetensorsFile { tensors, metadata })
}

/// Read a safetensors file onto `device`.
pub fn read_safetensors(path: &Path, device: &Device) -> Result<SafetensorsFile, TensorError> {
    let bytes = std::fs::read(path).map_err(|e| TensorError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    })?;
    from_safetensors_bytes(&bytes, device)
}

/// The header metadata (`__metadata__`) of a safetensors file, without reading its tensors:
/// the first 8 bytes give the header's length (at most [`MAX_SAFETENSORS_HEADER_BYTES`]), then
/// only the header is read.
pub fn read_safetensors_metadata(path: &Path) -> Result<BTreeMap<String, String>, TensorError> {
    use std::io::Read;
    let io = |e: std::io::Error| TensorError::Io {
        path: path.display().to_string(),
        message: e.to_string(),
    };
    let bad = |message: String| TensorError::Invalid {
        op: "read_safetensors",
        message: format!("{}: {message}", path.display()),
    };
    let mut f = std::fs::File::open(path).map_err(io)?;
    let mut len = [0u8; 8];
    f.read_exact(&mut len).map_err(io)?;
    let n = u64::from_le_bytes(len);
    if n > MAX_SAFETENSORS_HEADER_BYTES as u64 {
        return Err(bad(format!(
            "a header of {n} bytes is over the format's cap"
        )));
    }
    let mut header = vec![0u8; n as usize];
    f.read_exact(&mut header).map_err(io)?;
    let json: serde_json::Value = serde_json::from_slice(&header)
        .map_err(|e| bad(format!("the header is not JSON ({e})")))?;
    Ok(json
        .get("__metadata__")
        .and_then(|m| m.as_object())
        .map(|m| {
            m.iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap_or_default().to_string()))
                .collect()
        })
        .unwrap_or_default())
}

#[cfg(test)]
mod tests;
