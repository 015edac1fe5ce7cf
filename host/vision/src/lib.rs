//! `rollbox-vision`: the image side of vision-language rollouts, natively and bit-exact with
//! Hugging Face `transformers` (no wasmtime here; the runtime exposes it to workflows).
//!
//! * [`decode`]: PNG or JPEG bytes (or base64, or a `data:` URL, as AReaL passes images) to
//!   RGB, converted the way `transformers`' `convert_to_rgb` does (Pillow's `convert("RGB")`:
//!   alpha dropped, palettes looked up), with size limits checked before decoding. In two steps
//!   where the memory is accounted: [`Encoded::parse`] reads the header and says what decoding
//!   will hold ([`Encoded::working_bytes`]), [`Encoded::decode`] decodes.
//! * [`resize`]: bicubic resize ported from the two reference kernels: Pillow's (what
//!   `Qwen2VLImageProcessor` runs) and ATen's antialiased uint8 kernel (what
//!   `Qwen2VLImageProcessorFast`, AReaL's default, runs through torchvision), and what a resize
//!   holds ([`resize::working_bytes`]).
//! * [`qwen2vl`]: Qwen2-VL / Qwen2.5-VL preprocessing: `smart_resize`, rescale and normalise
//!   as each backend does it in float32, patchify into `pixel_values [N, 1176]` and
//!   `image_grid_thw`.

pub mod decode;
pub mod qwen2vl;
pub mod resize;

/// Inputs for tests of image limits.
#[doc(hidden)]
pub mod testing;

pub use decode::{Encoded, MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS, MAX_PNG_METADATA_BYTES, Rgb, decode};
pub use qwen2vl::{
    Appended, Backend, Processed, Qwen2VlConfig, process, process_into, smart_resize,
};

/// Why an image could not be processed. Every message names the image property and the limit
/// or the fix.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum VisionError {
    /// The bytes are not an image this crate decodes (PNG, JPEG), or are corrupt.
    #[error("cannot decode the image: {0}")]
    Decode(String),
    /// The image is over a documented limit (pixels, bytes).
    #[error("{0}")]
    TooLarge(String),
    /// The image's shape cannot be processed (zero size, aspect ratio over 200).
    #[error("{0}")]
    Shape(String),
    /// A processor setting is invalid.
    #[error("invalid image-processor setting: {0}")]
    Config(String),
}
