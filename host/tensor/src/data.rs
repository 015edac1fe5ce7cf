//! Typed tensors on a candle device: dtype, shape, and conversion to and from row-major data.

use std::fmt;

use candle_core::{Device, Tensor};
use half::bf16;

use crate::TensorError;

/// Element type of a host tensor.
///
/// `Bool` is stored as candle `u8` (0/1), which candle lacks a bool type for; the logical dtype
/// travels with the tensor so safetensors output still says `BOOL`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DType {
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 32-bit float.
    F32,
    /// bfloat16.
    BF16,
    /// Boolean (one byte each, 0 or 1).
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

    /// The candle storage type.
    pub fn candle(self) -> candle_core::DType {
        match self {
            DType::I32 => candle_core::DType::I32,
            DType::I64 => candle_core::DType::I64,
            DType::F32 => candle_core::DType::F32,
            DType::BF16 => candle_core::DType::BF16,
            DType::Bool | DType::U8 => candle_core::DType::U8,
        }
    }
}

impl fmt::Display for DType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Row-major element data, as it crosses the guest boundary.
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

impl TensorData {
    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            TensorData::I32(v) => v.len(),
            TensorData::I64(v) => v.len(),
            TensorData::F32(v) => v.len(),
            TensorData::BF16(v) => v.len(),
            TensorData::Bool(v) => v.len(),
            TensorData::U8(v) => v.len(),
        }
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
}

/// A tensor owned by the host: a candle tensor plus its logical dtype.
///
/// Cloning is cheap (candle tensors share their storage).
#[derive(Debug, Clone)]
pub struct HostTensor {
    inner: Tensor,
    dtype: DType,
}

impl PartialEq for HostTensor {
    /// Same dtype, same shape and the same elements (bitwise for floats, so NaN == NaN).
    fn eq(&self, other: &Self) -> bool {
        if self.dtype != other.dtype || self.shape() != other.shape() {
            return false;
        }
        match (self.data(), other.data()) {
            (Ok(TensorData::F32(a)), Ok(TensorData::F32(b))) => {
                a.iter().zip(&b).all(|(x, y)| x.to_bits() == y.to_bits())
            }
            (Ok(a), Ok(b)) => a == b,
            _ => false,
        }
    }
}

impl HostTensor {
    /// A tensor on the CPU from data and shape; the shape's element count must equal the data
    /// length.
    pub fn new(data: TensorData, shape: Vec<usize>) -> Result<Self, TensorError> {
        Self::new_on(data, shape, &Device::Cpu)
    }

    /// A tensor on `device` from data and shape.
    pub fn new_on(
        data: TensorData,
        shape: Vec<usize>,
        device: &Device,
    ) -> Result<Self, TensorError> {
        check_shape("create", &shape)?;
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
        let dtype = data.dtype();
        let inner = match data {
            TensorData::I32(v) => Tensor::from_vec(v, shape, device),
            TensorData::I64(v) => Tensor::from_vec(v, shape, device),
            TensorData::F32(v) => Tensor::from_vec(v, shape, device),
            TensorData::BF16(v) => {
                let v: Vec<bf16> = v.into_iter().map(bf16::from_bits).collect();
                Tensor::from_vec(v, shape, device)
            }
            TensorData::Bool(v) => {
                let v: Vec<u8> = v.into_iter().map(u8::from).collect();
                Tensor::from_vec(v, shape, device)
            }
            TensorData::U8(v) => Tensor::from_vec(v, shape, device),
        }
        .map_err(|e| TensorError::device("create", e))?;
        Ok(HostTensor { inner, dtype })
    }

    /// Wrap a candle tensor. `dtype` must agree with its storage type (`Bool` with `u8`).
    pub fn from_candle(inner: Tensor, dtype: DType) -> Result<Self, TensorError> {
        if inner.dtype() != dtype.candle() {
            return Err(TensorError::Invalid {
                op: "from_candle",
                message: format!(
                    "a candle {:?} tensor cannot hold {dtype} elements (expected {:?})",
                    inner.dtype(),
                    dtype.candle()
                ),
            });
        }
        Ok(HostTensor { inner, dtype })
    }

    /// The candle tensor (`Bool` tensors are `u8` 0/1).
    pub fn as_candle(&self) -> &Tensor {
        &self.inner
    }

    /// The device the data lives on.
    pub fn device(&self) -> &Device {
        self.inner.device()
    }

    /// A copy on `device` (the same tensor when it is already there).
    pub fn to_device(&self, device: &Device) -> Result<HostTensor, TensorError> {
        if self.device().same_device(device) {
            return Ok(self.clone());
        }
        let inner = self
            .inner
            .to_device(device)
            .map_err(|e| TensorError::device("to_device", e))?;
        Ok(HostTensor {
            inner,
            dtype: self.dtype,
        })
    }

    /// The shape.
    pub fn shape(&self) -> &[usize] {
        self.inner.dims()
    }

    /// Number of dimensions.
    pub fn rank(&self) -> usize {
        self.inner.rank()
    }

    /// Number of elements.
    pub fn elem_count(&self) -> usize {
        self.inner.elem_count()
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The data, row-major, copied to host memory.
    pub fn data(&self) -> Result<TensorData, TensorError> {
        let flat = self
            .inner
            .flatten_all()
            .map_err(|e| TensorError::device("data", e))?;
        let err = |e| TensorError::device("data", e);
        Ok(match self.dtype {
            DType::I32 => TensorData::I32(flat.to_vec1().map_err(err)?),
            DType::I64 => TensorData::I64(flat.to_vec1().map_err(err)?),
            DType::F32 => TensorData::F32(flat.to_vec1().map_err(err)?),
            DType::BF16 => TensorData::BF16(
                flat.to_vec1::<bf16>()
                    .map_err(err)?
                    .into_iter()
                    .map(bf16::to_bits)
                    .collect(),
            ),
            DType::Bool => TensorData::Bool(
                flat.to_vec1::<u8>()
                    .map_err(err)?
                    .into_iter()
                    .map(|b| b != 0)
                    .collect(),
            ),
            DType::U8 => TensorData::U8(flat.to_vec1().map_err(err)?),
        })
    }

    /// Size of the data in bytes.
    pub fn size_in_bytes(&self) -> usize {
        self.elem_count() * self.dtype.size_in_bytes()
    }

    /// A tensor with a dimension of size 1 inserted at `dim` (`0..=rank`), sharing the data.
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
        if self.rank() >= MAX_RANK {
            return Err(TensorError::Invalid {
                op: "unsqueeze",
                message: format!(
                    "a {}D tensor cannot gain a dimension: at most {MAX_RANK} dimensions",
                    self.rank()
                ),
            });
        }
        let inner = self
            .inner
            .unsqueeze(dim)
            .map_err(|e| TensorError::device("unsqueeze", e))?;
        Ok(HostTensor {
            inner,
            dtype: self.dtype,
        })
    }
}

/// Product of the dims, `None` on overflow.
pub(crate) fn element_count(shape: &[usize]) -> Option<usize> {
    shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d))
}

/// Most dimensions a tensor may have (torch allows 64; trajectories use 1-3). Bounds the
/// per-dimension work (and recursion) of every operation on a guest's shape.
pub const MAX_RANK: usize = 16;

/// Largest product of a shape's dimensions, counting a 0 as 1 (2^40). A tensor with no elements
/// can still name huge dimensions (`[0, 2^32-1, 2^32-1]`), which padding would then try to
/// fill; this bound keeps every stride and every padded size within checked `u128`/`usize`
/// arithmetic, and the byte budgets of [`crate::concat_within`] decide what is allocated.
pub const MAX_DIM_PRODUCT: u128 = 1 << 40;

/// Refuse a shape with more than [`MAX_RANK`] dimensions or dimensions whose product (zeros
/// counted as 1) exceeds [`MAX_DIM_PRODUCT`].
pub(crate) fn check_shape(op: &'static str, shape: &[usize]) -> Result<(), TensorError> {
    if shape.len() > MAX_RANK {
        return Err(TensorError::Invalid {
            op,
            message: format!(
                "a shape of {} dimensions; at most {MAX_RANK} are allowed",
                shape.len()
            ),
        });
    }
    let mut product: u128 = 1;
    for &d in shape {
        product = product.saturating_mul(d.max(1) as u128);
    }
    if product > MAX_DIM_PRODUCT {
        return Err(TensorError::Invalid {
            op,
            message: format!(
                "shape {shape:?}: the product of its dimensions (zeros counted as 1) is over {MAX_DIM_PRODUCT}"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
