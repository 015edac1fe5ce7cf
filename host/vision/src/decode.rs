//! Decoding: bytes (raw, base64 or a `data:` URL) to 8-bit RGB, converted as `transformers`'
//! `convert_to_rgb` converts a PIL image (Pillow's `convert("RGB")`).

use base64::Engine as _;

use crate::VisionError;

/// Pixels (width × height) of an image accepted for decoding: 50 megapixels (150 MB of RGB).
/// A larger image is refused from its header, before any pixel is decoded.
pub const MAX_IMAGE_PIXELS: u64 = 50_000_000;

/// Encoded bytes accepted (after base64 decoding): 64 MiB.
pub const MAX_IMAGE_BYTES: usize = 64 << 20;

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

/// The raw bytes of `input`: itself, or the payload of a `data:...;base64,` URL, or base64
/// text (what AReaL and OpenAI-style servers pass).
fn raw_bytes(input: &[u8]) -> Result<std::borrow::Cow<'_, [u8]>, VisionError> {
    const PNG: &[u8] = b"\x89PNG";
    const JPEG: &[u8] = b"\xff\xd8\xff";
    if input.starts_with(PNG) || input.starts_with(JPEG) {
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
            "the image is over {MAX_IMAGE_BYTES} bytes encoded"
        )));
    }
    base64::engine::general_purpose::STANDARD
        .decode(b64.as_bytes())
        .map(Into::into)
        .map_err(|e| VisionError::Decode(format!("not PNG or JPEG bytes, and not base64 ({e})")))
}

/// Decode PNG or JPEG bytes (raw, base64 or a `data:` URL) to RGB.
pub fn decode(input: &[u8]) -> Result<Rgb, VisionError> {
    let bytes = raw_bytes(input)?;
    if bytes.len() > MAX_IMAGE_BYTES {
        return Err(VisionError::TooLarge(format!(
            "the image is {} bytes; at most {MAX_IMAGE_BYTES}",
            bytes.len()
        )));
    }
    let reader = image::ImageReader::new(std::io::Cursor::new(&bytes[..]))
        .with_guessed_format()
        .map_err(|e| VisionError::Decode(e.to_string()))?;
    if reader.format().is_none() {
        return Err(VisionError::Decode("not a PNG or JPEG image".into()));
    }
    let (w, h) = reader
        .into_dimensions()
        .map_err(|e| VisionError::Decode(e.to_string()))?;
    check_size(u64::from(w), u64::from(h))?;
    let mut reader = image::ImageReader::new(std::io::Cursor::new(&bytes[..]))
        .with_guessed_format()
        .map_err(|e| VisionError::Decode(e.to_string()))?;
    let mut limits = image::Limits::default();
    limits.max_image_width = Some(w);
    limits.max_image_height = Some(h);
    limits.max_alloc = Some(MAX_IMAGE_PIXELS * 8 + (16 << 20));
    reader.limits(limits);
    let img = reader
        .decode()
        .map_err(|e| VisionError::Decode(e.to_string()))?;
    Ok(to_rgb(img))
}

fn check_size(w: u64, h: u64) -> Result<(), VisionError> {
    if w == 0 || h == 0 {
        return Err(VisionError::Shape(format!("the image is {w}x{h}: empty")));
    }
    if w * h > MAX_IMAGE_PIXELS {
        return Err(VisionError::TooLarge(format!(
            "the image is {w}x{h} = {} pixels; at most {MAX_IMAGE_PIXELS} (resize it before the rollout)",
            w * h
        )));
    }
    Ok(())
}

/// `convert_to_rgb` (transformers 5.3): Pillow's `convert("RGB")`: gray replicated, alpha
/// dropped (not composited), palettes looked up (arriving expanded from the decoder).
fn to_rgb(img: image::DynamicImage) -> Rgb {
    use image::DynamicImage as D;
    let (w, h) = (img.width() as usize, img.height() as usize);
    let data = match img {
        D::ImageRgb8(b) => b.into_raw(),
        D::ImageLuma8(b) => b.into_raw().iter().flat_map(|&l| [l, l, l]).collect(),
        D::ImageLumaA8(b) => b
            .into_raw()
            .chunks_exact(2)
            .flat_map(|p| [p[0], p[0], p[0]])
            .collect(),
        D::ImageRgba8(b) => b
            .into_raw()
            .chunks_exact(4)
            .flat_map(|p| [p[0], p[1], p[2]])
            .collect(),
        // 16-bit and float images: Pillow reads 16-bit PNGs as `I;16` and converts by
        // truncating to 8 bits; `image` rounds. Documented as not bit-exact.
        other => other.to_rgb8().into_raw(),
    };
    Rgb {
        width: w,
        height: h,
        data,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_huge_image_is_refused_from_its_header() {
        let e = decode(&crate::testing::png_header(10_000, 10_000)).expect_err("refused");
        assert!(
            matches!(&e, VisionError::TooLarge(m) if m.contains("10000x10000")),
            "{e}"
        );
        // Under the limit, the same header is read and the missing pixels are the error.
        let e = decode(&crate::testing::png_header(100, 100)).expect_err("no pixel data");
        assert!(matches!(e, VisionError::Decode(_)), "{e}");
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        assert!(matches!(decode(b""), Err(VisionError::Decode(_))));
        assert!(matches!(
            decode(b"\x89PNG\r\n\x1a\ngarbage"),
            Err(VisionError::Decode(_))
        ));
        assert!(
            matches!(decode(b"data:image/png,xyz"), Err(VisionError::Decode(m)) if m.contains("base64"))
        );
        assert!(matches!(
            decode(&[0xff, 0xfe, 0x00]),
            Err(VisionError::Decode(_))
        ));
        assert!(
            matches!(check_size(10_000, 10_000), Err(VisionError::TooLarge(m)) if m.contains("100000000 pixels"))
        );
        assert!(matches!(check_size(0, 5), Err(VisionError::Shape(_))));
    }
}
