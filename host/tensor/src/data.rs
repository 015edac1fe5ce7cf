//! Typed tensor storage: dtype, shape and row-major data.

use std::fmt;

use crate::TensorError;

/// Element type of a host tensor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 32-bit float.
    F32,
    /// bfloat16 (stored as raw bits).
    BF16,
    /// Boolean (one byte each).
    Bool,
    /// Unsigned byte.
    U8,
}

impl DType {
    /// Bytes per element.
    pub fn size_in_bytes(self) -> usize {
        match self {
            DType::I32 | DType::F32 => 4,
            DType::I64 => 8,
            DType::BF16 => 2,
            DType::Bool | DType::U8 => 1,
        }
    }

    /// The lowercase name used in messages and summaries (`i32`, `bool`, ...).
    pub fn name(self) -> &'static str {
        match self {
            DType::I32 => "i32",
            DType::I64 => "i64",
            DType::F32 => "f32",
            DType::BF16 => "bf16",
            DType::Bool => "bool",
            DType::U8 => "u8",
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Row-major element data.
#[derive(Debug, Clone, PartialEq)]
pub enum TensorData {
    /// i32 elements.
    I32(Vec<i32>),
    /// i64 elements.
    I64(Vec<i64>),
    /// f32 elements.
    F32(Vec<f32>),
    /// bf16 elements as raw bits.
    BF16(Vec<u16>),
    /// bool elements.
    Bool(Vec<bool>),
    /// u8 elements.
    U8(Vec<u8>),
}

/// Applies `$body` to the inner vector of a `TensorData`, whatever its type.
macro_rules! with_vec {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            TensorData::I32($v) => $body,
            TensorData::I64($v) => $body,
            TensorData::F32($v) => $body,
            TensorData::BF16($v) => $body,
            TensorData::Bool($v) => $body,
            TensorData::U8($v) => $body,
        }
    };
}

impl TensorData {
    /// Number of elements.
    pub fn len(&self) -> usize {
        with_vec!(self, v => v.len())
    }

    /// True when there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            TensorData::I32(_) => DType::I32,
            TensorData::I64(_) => DType::I64,
            TensorData::F32(_) => DType::F32,
            TensorData::BF16(_) => DType::BF16,
            TensorData::Bool(_) => DType::Bool,
            TensorData::U8(_) => DType::U8,
        }
    }

    /// An empty vector of `dtype` with room for `capacity` elements.
    pub fn with_capacity(dtype: DType, capacity: usize) -> TensorData {
        match dtype {
            DType::I32 => TensorData::I32(Vec::with_capacity(capacity)),
            DType::I64 => TensorData::I64(Vec::with_capacity(capacity)),
            DType::F32 => TensorData::F32(Vec::with_capacity(capacity)),
            DType::BF16 => TensorData::BF16(Vec::with_capacity(capacity)),
            DType::Bool => TensorData::Bool(Vec::with_capacity(capacity)),
            DType::U8 => TensorData::U8(Vec::with_capacity(capacity)),
        }
    }
}

/// A tensor owned by the host.
#[derive(Debug, Clone, PartialEq)]
pub struct HostTensor {
    shape: Vec<usize>,
    data: TensorData,
}

impl HostTensor {
    /// A tensor from data and shape; the shape's element count must equal the data length.
    pub fn new(data: TensorData, shape: Vec<usize>) -> Result<Self, TensorError> {
        let expected = element_count(&shape).ok_or_else(|| TensorError::Invalid {
            op: "create",
            message: format!("shape {shape:?} overflows the element count"),
        })?;
        if expected != data.len() {
            return Err(TensorError::ShapeMismatch {
                op: "create",
                shape,
                expected,
                got: data.len(),
            });
        }
        Ok(HostTensor { shape, data })
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    /// The data, row-major.
    pub fn data(&self) -> &TensorData {
        &self.data
    }

    /// Consume the tensor, returning its data.
    pub fn into_data(self) -> TensorData {
        self.data
    }

    /// Size of the data in bytes.
    pub fn size_in_bytes(&self) -> usize {
        self.data.len() * self.dtype().size_in_bytes()
    }

    /// A copy with a dimension of size 1 inserted at `dim` (`0..=rank`).
    pub fn unsqueeze(&self, dim: usize) -> Result<HostTensor, TensorError> {
        if dim > self.rank() {
            return Err(TensorError::Invalid {
                op: "unsqueeze",
                message: format!(
                    "dim {dim} is out of range for a {}D tensor (0..={})",
                    self.rank(),
                    self.rank()
                ),
            });
        }
        let mut shape = self.shape.clone();
        shape.insert(dim, 1);
        Ok(HostTensor {
            shape,
            data: self.data.clone(),
        })
    }
}

/// Product of the dims, `None` on overflow.
pub(crate) fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_must_match_data() {
        let err = HostTensor::new(TensorData::F32(vec![1.0; 5]), vec![2, 3]).expect_err("mismatch");
        assert_eq!(
            err.to_string(),
            "create: shape [2, 3] holds 6 elements but the data has 5"
        );
        let scalar = HostTensor::new(TensorData::F32(vec![1.0]), vec![]).expect("scalar");
        assert_eq!(scalar.rank(), 0);
        let huge =
            HostTensor::new(TensorData::U8(vec![]), vec![usize::MAX, 2]).expect_err("overflow");
        assert!(huge.to_string().contains("overflows"));
    }

    #[test]
    fn unsqueeze_inserts_a_unit_dim() {
        let t = HostTensor::new(TensorData::I32(vec![1, 2, 3]), vec![3]).expect("ok");
        assert_eq!(t.unsqueeze(0).expect("dim 0").shape(), &[1, 3]);
        assert_eq!(t.unsqueeze(1).expect("dim 1").shape(), &[3, 1]);
        assert!(t.unsqueeze(2).is_err());
        assert_eq!(t.size_in_bytes(), 12);
    }
}
