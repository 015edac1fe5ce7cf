//! A safetensors file in parts, for an answer sent a tensor at a time ([`SafetensorsParts`]):
//! the same bytes as [`crate::to_safetensors_bytes`] (the `safetensors` crate's header and
//! layout), without ever holding the whole file, nor a second copy of every tensor.
//!
//! [`crate::to_safetensors_bytes`] needs the tensors, a little-endian copy of each and the
//! serialised file at once: three copies of a batch (a 1.5 GiB answer of `rollbox serve` peaked
//! at 5.5 GB, issue 52). Here the header is computed from names, dtypes and shapes alone, and
//! the tensors' bytes are copied out [`PART_BYTES`] at a time when asked for, each tensor
//! dropped once sent: at most the tensors not yet sent and one part are held.

use std::collections::{BTreeMap, HashMap};

use candle_core::{Device, Tensor};
use half::bf16;
use safetensors::tensor::{Metadata, TensorInfo};

use crate::concat::with_cpu_slice;
use crate::{DType, HostTensor, MAX_SAFETENSORS_HEADER_BYTES, TensorError};

/// The most bytes of tensor data in one part.
pub const PART_BYTES: usize = 4 << 20;

/// A safetensors file as its parts: first the header (its 8-byte length and JSON), then the
/// tensors' little-endian bytes in file order, at most [`PART_BYTES`] a part. An iterator of
/// `Result<Vec<u8>, TensorError>`.
pub struct SafetensorsParts {
    header: Option<Vec<u8>>,
    /// The tensors in file order, each taken (and dropped once sent) in turn.
    tensors: std::vec::IntoIter<(String, HostTensor)>,
    /// The tensor being sent (contiguous, on the CPU) and the bytes of it already sent.
    current: Option<(Tensor, DType, usize)>,
    len: u64,
    largest: usize,
}

impl SafetensorsParts {
    /// The parts of the file of `tensors` and `metadata`; refused as [`crate::to_safetensors_bytes`]
    /// refuses (a reserved name, a header over the format's cap).
    pub fn new(
        mut tensors: Vec<(String, HostTensor)>,
        metadata: &BTreeMap<String, String>,
    ) -> Result<Self, TensorError> {
        for (name, _) in &tensors {
            crate::check_key_name(name)?;
        }
        // The `safetensors` writer's order: descending dtype alignment, then name.
        tensors.sort_by(|(a, ta), (b, tb)| {
            tb.dtype()
                .safetensors()
                .cmp(&ta.dtype().safetensors())
                .then(a.cmp(b))
        });
        let mut offset = 0usize;
        let mut largest = 0usize;
        let mut infos = Vec::with_capacity(tensors.len());
        for (name, t) in &tensors {
            let n = t.size_in_bytes();
            largest = largest.max(n.min(PART_BYTES));
            infos.push((
                name.clone(),
                TensorInfo {
                    dtype: t.dtype().safetensors(),
                    shape: t.shape().to_vec(),
                    data_offsets: (offset, offset + n),
                },
            ));
            offset += n;
        }
        let invalid = |e: &dyn std::fmt::Display| TensorError::Invalid {
            op: "write_safetensors",
            message: e.to_string(),
        };
        let info: HashMap<String, String> = metadata.clone().into_iter().collect();
        let header =
            Metadata::new((!info.is_empty()).then_some(info), infos).map_err(|e| invalid(&e))?;
        let mut json = serde_json::to_vec(&header).map_err(|e| invalid(&e))?;
        json.resize(json.len().next_multiple_of(8), b' ');
        if json.len() > MAX_SAFETENSORS_HEADER_BYTES {
            return Err(TensorError::TooLarge {
                op: "write_safetensors (header)",
                bytes: json.len() as u128,
                limit: MAX_SAFETENSORS_HEADER_BYTES,
                shape: format!("{} tensors", tensors.len()),
            });
        }
        let mut head = Vec::with_capacity(8 + json.len());
        head.extend_from_slice(&(json.len() as u64).to_le_bytes());
        head.extend_from_slice(&json);
        Ok(SafetensorsParts {
            len: head.len() as u64 + offset as u64,
            header: Some(head),
            tensors: tensors.into_iter(),
            current: None,
            largest,
        })
    }

    /// The whole file's length, bytes.
    pub fn len(&self) -> u64 {
        self.len
    }

    /// Whether the file is empty (never: it has a header).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What one part past the header holds at most, bytes (at most [`PART_BYTES`]).
    pub fn largest_part(&self) -> usize {
        self.largest
    }
}

impl Iterator for SafetensorsParts {
    type Item = Result<Vec<u8>, TensorError>;

    fn next(&mut self) -> Option<Self::Item> {
        if let Some(h) = self.header.take() {
            return Some(Ok(h));
        }
        loop {
            if let Some((t, dtype, sent)) = &mut self.current {
                let size = t.elem_count() * dtype.size_in_bytes();
                if *sent < size {
                    let end = (*sent + PART_BYTES).min(size);
                    let part = le_range(t, *dtype, *sent..end);
                    *sent = end;
                    return Some(part);
                }
            }
            // The tensor sent is dropped here; the next one made contiguous on the CPU.
            self.current = None;
            let (_, t) = self.tensors.next()?;
            let cpu = match t.to_device(&Device::Cpu) {
                Ok(cpu) => cpu,
                Err(e) => return Some(Err(e)),
            };
            match cpu.as_candle().contiguous() {
                Ok(c) => self.current = Some((c, t.dtype(), 0)),
                Err(e) => return Some(Err(TensorError::device("write_safetensors", e))),
            }
        }
    }
}

/// Bytes `range` of a contiguous CPU tensor's little-endian data.
fn le_range(
    t: &Tensor,
    dtype: DType,
    range: std::ops::Range<usize>,
) -> Result<Vec<u8>, TensorError> {
    fn cast<T: candle_core::WithDType + bytemuck::Pod>(
        t: &Tensor,
        range: std::ops::Range<usize>,
    ) -> Option<Vec<u8>> {
        with_cpu_slice(t, |s: &[T]| {
            bytemuck::cast_slice::<T, u8>(s)
                .get(range)
                .map(<[u8]>::to_vec)
        })
        .flatten()
    }
    let bytes = match dtype {
        DType::I32 => cast::<i32>(t, range),
        DType::I64 => cast::<i64>(t, range),
        DType::F32 => cast::<f32>(t, range),
        DType::BF16 => cast::<bf16>(t, range),
        DType::Bool | DType::U8 => cast::<u8>(t, range),
    };
    bytes.ok_or_else(|| TensorError::Invalid {
        op: "write_safetensors",
        message: "tensor data is not readable on the CPU".into(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{TensorData, from_safetensors_bytes, to_safetensors_bytes};
    use candle_core::Device;

    fn tensors() -> Vec<(String, HostTensor)> {
        vec![
            (
                "input_ids".to_string(),
                HostTensor::new(TensorData::I32(vec![1, 2, 3, 4]), vec![2, 2]).expect("t"),
            ),
            (
                "attention_mask".to_string(),
                HostTensor::new(TensorData::Bool(vec![true, true, true, false]), vec![2, 2])
                    .expect("t"),
            ),
            (
                "logprobs".to_string(),
                HostTensor::new(TensorData::F32(vec![-0.5, -1.25, 0.0, 0.0]), vec![2, 2])
                    .expect("t"),
            ),
            (
                "half".to_string(),
                HostTensor::new(TensorData::BF16(vec![0x3f80, 0x4000]), vec![2]).expect("t"),
            ),
            (
                "ids64".to_string(),
                HostTensor::new(TensorData::I64(vec![-5]), vec![1]).expect("t"),
            ),
        ]
    }

    /// The parts, joined, are the file `to_safetensors_bytes` writes (one metadata key, so
    /// the header's JSON has one order), and read back to the same tensors and metadata.
    #[test]
    fn parts_join_to_the_writers_file() {
        let meta = BTreeMap::from([("trajectories".to_string(), "[{}]".to_string())]);
        let whole = to_safetensors_bytes(&tensors(), &meta).expect("whole");
        let parts = SafetensorsParts::new(tensors(), &meta).expect("parts");
        assert_eq!(parts.len(), whole.len() as u64);
        assert_eq!(parts.largest_part(), 16);
        let joined: Vec<u8> = parts
            .collect::<Result<Vec<_>, _>>()
            .expect("bytes")
            .concat();
        assert_eq!(joined, whole);
        let back = from_safetensors_bytes(&joined, &Device::Cpu).expect("read");
        assert_eq!(back.metadata, meta);
        for (name, t) in &tensors() {
            assert_eq!(back.get(name), Some(t), "{name}");
        }
    }

    /// A tensor past [`PART_BYTES`] goes out in parts of at most that, the same bytes.
    #[test]
    fn a_large_tensor_goes_in_parts() {
        let n = PART_BYTES / 4 * 2 + 3;
        let big = HostTensor::new(
            TensorData::F32((0..n).map(|i| i as f32).collect()),
            vec![1, n],
        )
        .expect("t");
        let tensors = vec![("logprobs".to_string(), big)];
        let whole = to_safetensors_bytes(&tensors, &BTreeMap::new()).expect("whole");
        let parts: Vec<Vec<u8>> = SafetensorsParts::new(tensors, &BTreeMap::new())
            .expect("parts")
            .collect::<Result<_, _>>()
            .expect("bytes");
        assert_eq!(parts.len(), 4, "the header and three parts");
        assert!(parts[1..].iter().all(|p| p.len() <= PART_BYTES));
        assert_eq!(parts.concat(), whole);
    }

    #[test]
    fn what_readers_refuse_is_refused() {
        let t = HostTensor::new(TensorData::I32(vec![1]), vec![1]).expect("t");
        let err = SafetensorsParts::new(vec![("__metadata__".into(), t.clone())], &BTreeMap::new())
            .err()
            .expect("reserved name");
        assert!(err.to_string().contains("safetensors reserves"), "{err}");
        let meta = BTreeMap::from([(
            "trajectories".to_string(),
            "x".repeat(MAX_SAFETENSORS_HEADER_BYTES),
        )]);
        let err = SafetensorsParts::new(vec![("input_ids".into(), t)], &meta)
            .err()
            .expect("header over the cap");
        assert!(matches!(err, TensorError::TooLarge { .. }), "{err}");
    }
}
