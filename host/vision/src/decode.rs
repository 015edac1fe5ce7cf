//! Decoding: bytes (raw, base64 or a `data:` URL) to 8-bit RGB, converted as `transformers`'
//! `convert_to_rgb` converts a PIL image (Pillow's `convert("RGB")`).
//!
//! In two steps, so that a caller can account for the memory before it is allocated:
//! [`Encoded::parse`] reads the header and refuses an image past [`MAX_IMAGE_PIXELS`] or
//! [`MAX_IMAGE_BYTES`]; [`Encoded::working_bytes`] says, from that header, the most bytes
//! decoding holds at once; [`Encoded::decode`] decodes into one buffer and converts it to RGB
//! in place (a 16-bit image's 6 or 8 bytes per pixel become 3 in the same buffer).

use std::borrow::Cow;
use std::io::Cursor;

use base64::Engine as _;
use image::{ColorType, ImageDecoder as _, ImageFormat};

use crate::VisionError;

/// Pixels (width × height) of an image accepted for decoding: 50 megapixels. Guards against
/// decompression bombs: a 389 KB PNG can claim 50 megapixels of 16-bit RGB (300 MB decoded). A
/// larger image is refused from its header, before any pixel buffer is allocated; up to it,
/// decoding holds [`Encoded::working_bytes`] (about 8 bytes per pixel for 16-bit RGBA, 11 for
/// a progressive colour JPEG), which the runtime reserves from the host's memory budget first.
/// Qwen2-VL's processors shrink anything past `max_pixels` (12.8 megapixels in the released
/// checkpoints' configs), so the cap keeps 48-50 megapixel photos and costs no detail the model
/// sees. Not configurable at run time: a larger image is downscaled before the rollout.
pub const MAX_IMAGE_PIXELS: u64 = 50_000_000;

/// Encoded bytes accepted (after base64 decoding): 64 MiB. Bounds the copies reading a header
/// makes (the base64 payload decoded, the JPEG decoder's copy of its input).
pub const MAX_IMAGE_BYTES: usize = 64 << 20;

/// Bytes the PNG decoder may allocate for an image's metadata (ICC profile, text and EXIF
/// chunks) and its row buffer (`png::Limits::bytes`): guards against a small file whose
/// compressed metadata inflates to gigabytes. An image past it is refused.
pub const MAX_PNG_METADATA_BYTES: usize = 4 << 20;

/// Rows of the image the PNG decoder holds beside the output buffer (its unfiltering window of
/// a few rows, grown by doubling; the previous row; a row of an interlaced pass), generously.
const PNG_ROWS_HELD: usize = 24;

/// The JPEG decoder's per-column row buffers (an MCU row of each component, upsampling and
/// colour conversion scratch), generously.
const JPEG_BYTES_PER_COLUMN: usize = 1024;

/// A decoder's fixed state (inflate window and tables, Huffman tables, quantisation tables).
const DECODER_STATE_BYTES: usize = 1 << 20;

/// An 8-bit RGB image, row-major, 3 bytes per pixel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rgb {
    /// Width in pixels.
    pub width: usize,
    /// Height in pixels.
    pub height: usize,
    /// `height * width * 3` bytes.
    pub data: Vec<u8>,
}

impl Rgb {
    /// An image from its bytes; `data.len()` must be `width * height * 3`.
    pub fn new(width: usize, height: usize, data: Vec<u8>) -> Result<Rgb, VisionError> {
        if width.checked_mul(height).and_then(|n| n.checked_mul(3)) != Some(data.len()) {
            return Err(VisionError::Shape(format!(
                "{} bytes are not a {width}x{height} RGB image",
                data.len()
            )));
        }
        Ok(Rgb {
            width,
            height,
            data,
        })
    }
}

/// Whether `input` is PNG or JPEG bytes (rather than base64 text).
fn is_raw(input: &[u8]) -> bool {
    const PNG: &[u8] = b"\x89PNG";
    const JPEG: &[u8] = b"\xff\xd8\xff";
    input.starts_with(PNG) || input.starts_with(JPEG)
}

/// The raw bytes of `input`: itself, or the payload of a `data:...;base64,` URL, or base64
/// text (what AReaL and OpenAI-style servers pass).
fn raw_bytes(input: &[u8]) -> Result<Cow<'_, [u8]>, VisionError> {
    if is_raw(input) {
        return Ok(input.into());
    }
    let text = std::str::from_utf8(input)
        .map_err(|_| VisionError::Decode("not PNG or JPEG bytes, nor base64 text".into()))?
        .trim();
    let b64 = match text.strip_prefix("data:") {
        Some(rest) => {
            let (meta, payload) = rest.split_once(',').ok_or_else(|| {
                VisionError::Decode("a data URL without `,` before its payload".into())
            })?;
            if !meta.ends_with(";base64") {
                return Err(VisionError::Decode(format!(
                    "a data URL that is not base64 (`data:{meta},`); use `data:image/png;base64,...`"
                )));
            }
            payload
        }
        None => text,
    };
    if b64.len() / 4 * 3 > MAX_IMAGE_BYTES + 3 {
        return Err(VisionError::TooLarge(format!(
            "the image is over {MAX_IMAGE_BYTES} bytes encoded (`MAX_IMAGE_BYTES`)"
        )));
    }
    base64::engine::general_purpose::STANDARD
        .decode(b64.as_bytes())
        .map(Into::into)
        .map_err(|e| VisionError::Decode(format!("not PNG or JPEG bytes, and not base64 ({e})")))
}

/// Decode PNG or JPEG bytes (raw, base64 or a `data:` URL) to RGB: [`Encoded::parse`], then
/// [`Encoded::decode`].
pub fn decode(input: &[u8]) -> Result<Rgb, VisionError> {
    Encoded::parse(input)?.decode()
}

/// An image whose header has been read and checked against the limits, not yet decoded.
pub struct Encoded<'a> {
    decoder: Box<dyn image::ImageDecoder + 'a>,
    format: ImageFormat,
    width: u32,
    height: u32,
    /// The decoder's output pixel format (palettes expanded, bit depth kept).
    color: ColorType,
    /// What reading the header held ([`Encoded::header_bytes`]), held until decoding ends.
    header: usize,
}

impl<'a> Encoded<'a> {
    /// The most bytes [`Encoded::parse`] allocates for `input`, known before it runs: a copy of
    /// base64 input decoded, the decoder's copy of a JPEG and of its metadata segments (or a
    /// PNG's buffered chunks), and the PNG decoder's metadata allowance
    /// ([`MAX_PNG_METADATA_BYTES`]). A caller reserves this before parsing.
    pub fn header_bytes(input: &[u8]) -> usize {
        // Base64 decodes to at most 3/4 of its length; past MAX_IMAGE_BYTES it is refused
        // before it is decoded.
        let encoded = input.len().min(MAX_IMAGE_BYTES + 8);
        let copy = if is_raw(input) { 0 } else { encoded };
        copy + 2 * encoded + MAX_PNG_METADATA_BYTES + DECODER_STATE_BYTES
    }

    /// Read `input`'s header (PNG or JPEG bytes, base64 text or a `data:` URL): refuses, before
    /// any pixel buffer is allocated, an image over [`MAX_IMAGE_BYTES`] encoded, over
    /// [`MAX_IMAGE_PIXELS`], with an empty side, or whose PNG metadata passes
    /// [`MAX_PNG_METADATA_BYTES`].
    pub fn parse(input: &'a [u8]) -> Result<Encoded<'a>, VisionError> {
        let header = Self::header_bytes(input);
        let bytes = raw_bytes(input)?;
        if bytes.len() > MAX_IMAGE_BYTES {
            return Err(VisionError::TooLarge(format!(
                "the image is {} bytes; at most {MAX_IMAGE_BYTES} (`MAX_IMAGE_BYTES`)",
                bytes.len()
            )));
        }
        let mut reader = image::ImageReader::new(Cursor::new(bytes))
            .with_guessed_format()
            .map_err(|e| VisionError::Decode(e.to_string()))?;
        let format = match reader.format() {
            Some(f @ (ImageFormat::Png | ImageFormat::Jpeg)) => f,
            _ => return Err(VisionError::Decode("not a PNG or JPEG image".into())),
        };
        // What the decoder allocates itself while reading the header (PNG metadata); the JPEG
        // decoder takes no allocation limit, and what it holds is counted in `header_bytes`.
        let mut limits = image::Limits::default();
        limits.max_alloc = Some(MAX_PNG_METADATA_BYTES as u64);
        reader.limits(limits);
        let decoder = reader.into_decoder().map_err(decode_error)?;
        let (width, height) = decoder.dimensions();
        check_size(u64::from(width), u64::from(height))?;
        let color = decoder.color_type();
        Ok(Encoded {
            decoder: Box::new(decoder),
            format,
            width,
            height,
            color,
            header,
        })
    }

    /// Width in pixels.
    pub fn width(&self) -> usize {
        self.width as usize
    }

    /// Height in pixels.
    pub fn height(&self) -> usize {
        self.height as usize
    }

    /// The most bytes held at once from [`Encoded::parse`] to the end of [`Encoded::decode`],
    /// from the header alone: [`Encoded::header_bytes`]; one buffer of the larger of the decoded
    /// image in its own pixel format (16-bit RGBA: 8 bytes per pixel) and its RGB (3), converted
    /// in place; the decoder's rows (PNG) or, for a progressive or multi-scan JPEG, every
    /// component's DCT coefficients (2 bytes per sample, padded to whole MCUs) and its rows.
    pub fn working_bytes(&self) -> usize {
        let (w, h) = (self.width(), self.height());
        let bpp = usize::from(self.color.bytes_per_pixel());
        let pixels = w.saturating_mul(h);
        let buffer = pixels.saturating_mul(bpp).max(pixels.saturating_mul(3));
        let decoder = match self.format {
            ImageFormat::Jpeg => {
                // Up to 4 components (CMYK and YCCK come out as RGB).
                let components = match self.color {
                    ColorType::L8 => 1,
                    ColorType::La8 => 2,
                    _ => 4,
                };
                let coefficients = (w + 32)
                    .saturating_mul(h + 32)
                    .saturating_mul(2 * components);
                coefficients.saturating_add((w + 32).saturating_mul(JPEG_BYTES_PER_COLUMN))
            }
            _ => w.saturating_mul(bpp).saturating_add(1) * PNG_ROWS_HELD,
        };
        self.header
            .saturating_add(buffer)
            .saturating_add(decoder)
            .saturating_add(DECODER_STATE_BYTES)
    }

    /// Decode to RGB: one buffer, decoded into and converted in place.
    pub fn decode(self) -> Result<Rgb, VisionError> {
        let Encoded {
            decoder,
            width,
            height,
            color,
            ..
        } = self;
        let (w, h) = (width as usize, height as usize);
        let pixels = w * h;
        let decoded = usize::try_from(decoder.total_bytes()).map_err(|_| {
            VisionError::TooLarge(format!("the image is {w}x{h}: too large to address"))
        })?;
        // Zeroed by the allocator (fresh pages), so untouched bytes cost no memory.
        let mut buf = vec![0u8; decoded.max(pixels * 3)];
        decoder
            .read_image(&mut buf[..decoded])
            .map_err(decode_error)?;
        to_rgb_in_place(&mut buf, color, pixels)?;
        Rgb::new(w, h, buf)
    }
}

/// A decoder's error: over a decoder allocation limit (PNG metadata), or not decodable.
fn decode_error(e: image::ImageError) -> VisionError {
    match e {
        image::ImageError::Limits(l) => VisionError::TooLarge(format!(
            "the image's metadata and rows need more than the decoder's {MAX_PNG_METADATA_BYTES} bytes ({l}; `MAX_PNG_METADATA_BYTES`); strip its metadata (ICC profile, text chunks) before the rollout"
        )),
        other => VisionError::Decode(other.to_string()),
    }
}

fn check_size(w: u64, h: u64) -> Result<(), VisionError> {
    if w == 0 || h == 0 {
        return Err(VisionError::Shape(format!("the image is {w}x{h}: empty")));
    }
    if w * h > MAX_IMAGE_PIXELS {
        return Err(VisionError::TooLarge(format!(
            "the image is {w}x{h} = {} pixels; at most {MAX_IMAGE_PIXELS} (`MAX_IMAGE_PIXELS`: decoding holds up to 11 bytes per pixel); downscale it before the rollout (Qwen2-VL's processor shrinks it to `max_pixels` anyway)",
            w * h
        )));
    }
    Ok(())
}

/// A 16-bit sample (native endian, as decoders return them) to 8 bits, rounded as the `image`
/// crate rounds (`round(v * 255 / 65535)`); Pillow truncates (`v >> 8`).
fn narrow(b: &[u8]) -> u8 {
    ((u32::from(u16::from_ne_bytes([b[0], b[1]])) + 128) / 257) as u8
}

/// `convert_to_rgb` (transformers 5.3), Pillow's `convert("RGB")`, in place on `buf`, whose
/// first `pixels` pixels are in `color` and which holds at least `pixels * 3` bytes: gray
/// replicated, alpha dropped (not composited), palettes looked up (arriving expanded from the
/// decoder). Leaves exactly the RGB bytes.
fn to_rgb_in_place(buf: &mut Vec<u8>, color: ColorType, pixels: usize) -> Result<(), VisionError> {
    match color {
        ColorType::Rgb8 => {}
        ColorType::Rgba8 => narrow_in_place(buf, pixels, 4, |p| [p[0], p[1], p[2]]),
        ColorType::La16 => narrow_in_place(buf, pixels, 4, |p| [narrow(p); 3]),
        ColorType::Rgb16 => narrow_in_place(buf, pixels, 6, |p| {
            [narrow(&p[0..2]), narrow(&p[2..4]), narrow(&p[4..6])]
        }),
        ColorType::Rgba16 => narrow_in_place(buf, pixels, 8, |p| {
            [narrow(&p[0..2]), narrow(&p[2..4]), narrow(&p[4..6])]
        }),
        ColorType::L8 => widen_in_place(buf, pixels, 1, |p| [p[0]; 3]),
        ColorType::La8 => widen_in_place(buf, pixels, 2, |p| [p[0]; 3]),
        ColorType::L16 => widen_in_place(buf, pixels, 2, |p| [narrow(p); 3]),
        other => {
            return Err(VisionError::Decode(format!(
                "unsupported pixel format {other:?}"
            )));
        }
    }
    buf.truncate(pixels * 3);
    buf.shrink_to_fit();
    Ok(())
}

/// Pixels of `from` >= 4 bytes at the start of `buf`, rewritten as RGB from the first on: pixel
/// `i`'s 3 bytes land before pixel `i + 1`'s, which start at `from * (i + 1)`.
fn narrow_in_place(buf: &mut [u8], pixels: usize, from: usize, rgb: impl Fn(&[u8]) -> [u8; 3]) {
    for i in 0..pixels {
        let px = rgb(&buf[i * from..(i + 1) * from]);
        buf[i * 3..i * 3 + 3].copy_from_slice(&px);
    }
}

/// Pixels of `from` <= 2 bytes at the start of `buf`, rewritten as RGB from the last back:
/// pixel `i`'s 3 bytes land at or after its own and after every earlier pixel's
/// (`from * i <= 3 * i`).
fn widen_in_place(buf: &mut [u8], pixels: usize, from: usize, rgb: impl Fn(&[u8]) -> [u8; 3]) {
    for i in (0..pixels).rev() {
        let px = rgb(&buf[i * from..(i + 1) * from]);
        buf[i * 3..i * 3 + 3].copy_from_slice(&px);
    }
}

#[cfg(test)]
mod tests;
