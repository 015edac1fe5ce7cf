//! Host tensors for rollbox: typed row-major storage, the few operations workflows need, and
//! AReaL's `concat_padded_tensors` semantics.
//!
//! Tensors built by guests through the `tensor` WIT interface live here, on the host; a guest
//! holds only handles. This crate has no wasmtime dependency and does no I/O.
//!
//! ```
//! use rollbox_tensor::{concat_padded, HostTensor, TensorData};
//! let a = HostTensor::new(TensorData::I32(vec![1, 2, 3]), vec![1, 3]).expect("shape matches");
//! let b = HostTensor::new(TensorData::I32(vec![4]), vec![1, 1]).expect("shape matches");
//! let out = concat_padded(&[vec![("input_ids".into(), &a)], vec![("input_ids".into(), &b)]], 0.0)
//!     .expect("same keys");
//! assert_eq!(out[0].1.shape(), &[2, 3]);
//! assert_eq!(out[0].1.data(), &TensorData::I32(vec![1, 2, 3, 4, 0, 0]));
//! ```

mod concat;
mod data;

pub use concat::{concat, concat_padded};
pub use data::{DType, HostTensor, TensorData};

/// Errors of tensor construction and assembly. Each names the operation and the values
/// involved, so a guest-visible message says what to fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TensorError {
    /// The shape's element count does not match the data length.
    #[error("{op}: shape {shape:?} holds {expected} elements but the data has {got}")]
    ShapeMismatch {
        /// Operation.
        op: &'static str,
        /// The requested shape.
        shape: Vec<usize>,
        /// Elements the shape holds.
        expected: usize,
        /// Elements given.
        got: usize,
    },
    /// Tensors that must share a dtype do not.
    #[error("{op}: dtype mismatch for `{key}`: expected {expected}, got {got}")]
    DTypeMismatch {
        /// Operation.
        op: &'static str,
        /// Key (or position) of the offending tensor.
        key: String,
        /// Expected dtype.
        expected: DType,
        /// Actual dtype.
        got: DType,
    },
    /// Tensors that must share a rank do not.
    #[error("{op}: dimension mismatch for `{key}`: expected {expected}D tensors, got {got}D")]
    RankMismatch {
        /// Operation.
        op: &'static str,
        /// Key of the offending tensor.
        key: String,
        /// Expected rank.
        expected: usize,
        /// Actual rank.
        got: usize,
    },
    /// Non-concatenated dimensions differ in a plain `concat`.
    #[error(
        "{op}: tensor {index} has shape {got:?}, expected [_, {expected:?}] (only dim 0 may differ)"
    )]
    DimMismatch {
        /// Operation.
        op: &'static str,
        /// Position of the offending tensor.
        index: usize,
        /// Trailing dims of the first tensor.
        expected: Vec<usize>,
        /// Full shape of the offending tensor.
        got: Vec<usize>,
    },
    /// A dict's keys differ from the first dict's keys.
    #[error(
        "concat_padded: dict[{index}] has different keys than dict[0]. Expected {expected:?}, got {got:?}"
    )]
    KeyMismatch {
        /// Index of the offending dict.
        index: usize,
        /// Keys of dict 0, sorted.
        expected: Vec<String>,
        /// Keys of the offending dict, sorted.
        got: Vec<String>,
    },
    /// A key appears twice in one dict.
    #[error("concat_padded: dict[{index}] has the key `{key}` twice")]
    DuplicateKey {
        /// Index of the dict.
        index: usize,
        /// The repeated key.
        key: String,
    },
    /// A scalar (rank-0) tensor cannot be concatenated (torch.cat raises too).
    #[error("{op}: `{key}` is a scalar (shape []); give it shape [1] so it can be concatenated")]
    ScalarConcat {
        /// Operation.
        op: &'static str,
        /// Key of the tensor.
        key: String,
    },
    /// An argument is out of range or empty.
    #[error("{op}: {message}")]
    Invalid {
        /// Operation.
        op: &'static str,
        /// What is wrong.
        message: String,
    },
}
