//! Host tensors for rollbox: typed tensors on a candle [`Device`](candle_core::Device), the few
//! operations workflows need, AReaL's `concat_padded_tensors` semantics, validation of the
//! standard trajectory keys, and safetensors I/O.
//!
//! Tensors built by guests through the `tensor` WIT interface live here, on the host; a guest
//! holds only handles. Storage is candle: the CPU by default; with the `cuda` feature
//! [`default_device`] is GPU 0 when present. `bool` is stored as candle `u8` and written to
//! safetensors as `BOOL`. This crate has no wasmtime dependency.
//!
//! ```
//! use rollbox_tensor::{concat_padded, HostTensor, TensorData};
//! let a = HostTensor::new(TensorData::I32(vec![1, 2, 3]), vec![1, 3]).expect("shape matches");
//! let b = HostTensor::new(TensorData::I32(vec![4]), vec![1, 1]).expect("shape matches");
//! let out = concat_padded(&[vec![("input_ids".into(), &a)], vec![("input_ids".into(), &b)]], 0.0)
//!     .expect("same keys");
//! assert_eq!(out[0].1.shape(), &[2, 3]);
//! assert_eq!(out[0].1.data().expect("on the host"), TensorData::I32(vec![1, 2, 3, 4, 0, 0]));
//! ```

mod concat;
mod data;
mod device;
mod io;
mod stream;
mod validate;

pub use candle_core::Device;
pub use concat::{concat, concat_padded, concat_padded_within, concat_within};
pub use data::{DType, HostTensor, MAX_DIM_PRODUCT, MAX_RANK, TensorData};
pub use device::{default_device, test_devices};
pub use io::{
    MAX_SAFETENSORS_HEADER_BYTES, SafetensorsFile, create_temp_beside, from_safetensors_bytes,
    read_safetensors, read_safetensors_metadata, to_safetensors_bytes, write_atomic,
    write_atomic_with, write_safetensors,
};
pub use stream::SafetensorsParts;
pub use validate::{
    MAX_KEY_BYTES, MAX_KEYS, PER_ROW_KEYS, PER_TOKEN_KEYS, check_key_name, is_multi_modal_key,
    validate_trajectory,
};

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
    /// A standard trajectory key has the wrong dtype or shape.
    #[error("trajectory key `{key}`: expected {expected}, got {got}; {fix}")]
    Trajectory {
        /// The key.
        key: String,
        /// Expected dtype and shape.
        expected: String,
        /// Actual dtype and shape.
        got: String,
        /// How to fix it.
        fix: String,
    },
    /// The tensor backend (candle device) failed.
    #[error("{op}: device error: {message}")]
    Device {
        /// Operation.
        op: &'static str,
        /// candle's message.
        message: String,
    },
    /// Reading or writing a file failed.
    #[error("{path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// What failed.
        message: String,
    },
    /// The result would be larger than the caller allows; nothing was allocated.
    #[error(
        "{op}: the result would take {bytes} bytes (shape {shape}), over the {limit} bytes allowed"
    )]
    TooLarge {
        /// Operation.
        op: &'static str,
        /// Bytes the result would take.
        bytes: u128,
        /// The allowance, bytes.
        limit: usize,
        /// The result's shape (or shapes), as text.
        shape: String,
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

impl TensorError {
    pub(crate) fn device(op: &'static str, e: candle_core::Error) -> TensorError {
        TensorError::Device {
            op,
            message: e.to_string(),
        }
    }
}
