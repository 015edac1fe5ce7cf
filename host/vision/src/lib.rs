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

/// Inputs for tests of image limits.
#[doc(hidden)]
pub mod testing {
    /// A PNG whose header claims `w` x `h` RGB pixels, with empty pixel data: what an attacker
    /// sends to make a decoder allocate.
    pub fn png_header(w: u32, h: u32) -> Vec<u8> {
        fn crc32(bytes: &[u8]) -> u32 {
            let mut c = !0u32;
            for &b in bytes {
                c ^= u32::from(b);
                for _ in 0..8 {
                    c = if c & 1 == 1 {
                        0xEDB8_8320 ^ (c >> 1)
                    } else {
                        c >> 1
                    };
                }
            }
            !c
        }
        let mut ihdr = b"IHDR".to_vec();
        ihdr.extend(w.to_be_bytes());
        ihdr.extend(h.to_be_bytes());
        ihdr.extend([8, 2, 0, 0, 0]);
        let mut png = b"\x89PNG\r\n\x1a\n".to_vec();
        png.extend(13u32.to_be_bytes());
        png.extend(&ihdr);
        png.extend(crc32(&ihdr).to_be_bytes());
        for chunk in [&b"IDAT"[..], b"IEND"] {
            png.extend(0u32.to_be_bytes());
            png.extend(chunk);
            png.extend(crc32(chunk).to_be_bytes());
        }
        png
    }
}

pub use decode::{MAX_IMAGE_BYTES, MAX_IMAGE_PIXELS, Rgb, decode};
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
