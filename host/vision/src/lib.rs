//! `rollbox-vision`: the image side of vision-language rollouts, natively and bit-exact with
//! Hugging Face `transformers` (no wasmtime here; the runtime exposes it to workflows).
//!
//! * [`decode`]: PNG or JPEG bytes (or base64, or a `data:` URL, as AReaL passes images) to
//!   RGB, converted the way `transformers`' `convert_to_rgb` does (Pillow's `convert("RGB")`:
//!   alpha dropped, palettes looked up), with size limits checked before decoding.
//! * [`resize`]: bicubic resize ported from the two reference kernels: Pillow's (what
//!   `Qwen2VLImageProcessor` runs) and ATen's antialiased uint8 kernel (what
//!   `Qwen2VLImageProcessorFast`, AReaL's default, runs through torchvision).
//! * [`qwen2vl`]: Qwen2-VL / Qwen2.5-VL preprocessing: `smart_resize`, rescale and normalise
//!   as each backend does it in float32, patchify into `pixel_values [N, 1176]` and
//!   `image_grid_thw`.

pub mod decode;
pub mod qwen2vl;
pub mod resize;

pub use decode::{MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS, Rgb, decode};
pub use qwen2vl::{Backend, Processed, Qwen2VlConfig, process, smart_resize};

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
