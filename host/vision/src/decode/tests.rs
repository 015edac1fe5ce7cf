use super::*;
use crate::testing::{blank_png, png_header};

#[test]
fn a_huge_image_is_refused_from_its_header() {
    let e = decode(&png_header(10_000, 10_000)).expect_err("refused");
    assert!(
        matches!(&e, VisionError::TooLarge(m) if m.contains("10000x10000") && m.contains("`MAX_IMAGE_PIXELS`")),
        "{e}"
    );
    // Under the limit, the same header is read and the missing pixels are the error.
    let e = decode(&png_header(100, 100)).expect_err("no pixel data");
    assert!(matches!(e, VisionError::Decode(_)), "{e}");
}

/// Issue 52: a 2 MB PNG claiming 50 megapixels of 16-bit RGB. One pixel past the cap it is
/// refused by `parse`, naming the limit; at the cap its header asks for the 16-bit buffer
/// and no more than the RGB conversion needs beside it (in place: nothing).
#[test]
fn a_sixteen_bit_bomb_is_refused_or_accounted_from_its_header() {
    let over = blank_png(7072, 7072, 2, 16);
    assert!(over.len() < 4 << 20, "{} bytes", over.len());
    let e = Encoded::parse(&over).err().expect("over the cap");
    assert!(
        matches!(&e, VisionError::TooLarge(m) if m.contains("7072x7072 = 50013184 pixels") && m.contains("`MAX_IMAGE_PIXELS`")),
        "{e}"
    );
    let b64 = base64::engine::general_purpose::STANDARD.encode(&over);
    assert!(matches!(
        Encoded::parse(b64.as_bytes()),
        Err(VisionError::TooLarge(_))
    ));
    let under = blank_png(7071, 7071, 2, 16);
    let image = Encoded::parse(&under).expect("at the cap");
    assert_eq!((image.width(), image.height()), (7071, 7071));
    let decoded = 7071 * 7071 * 6;
    let working = image.working_bytes();
    assert!(
        working >= decoded + Encoded::header_bytes(&under),
        "{working}"
    );
    assert!(
        working < decoded + (16 << 20),
        "{working}: more than rows and metadata"
    );
}

/// The reference for every pixel format: the test's own samples, 16-bit ones rounded as
/// `round(v * 255 / 65535)` (what the `image` crate's `to_rgb8`, used before, computes).
#[test]
fn every_png_pixel_format_converts_to_rgb_in_place() {
    use image::DynamicImage as D;
    let (w, h) = (37u32, 23u32);
    let s16 = |x: u32, y: u32, c: u32| ((x * 7919 + y * 104_729 + c * 15_485_863) % 65_536) as u16;
    let s8 = |x: u32, y: u32, c: u32| (s16(x, y, c) >> 5) as u8;
    let r16 = |v: u16| (f64::from(v) * 255.0 / 65535.0).round() as u8;
    let images = [
        D::ImageLuma8(image::ImageBuffer::from_fn(w, h, |x, y| {
            image::Luma([s8(x, y, 0)])
        })),
        D::ImageLumaA8(image::ImageBuffer::from_fn(w, h, |x, y| {
            image::LumaA([s8(x, y, 0), s8(x, y, 3)])
        })),
        D::ImageRgb8(image::ImageBuffer::from_fn(w, h, |x, y| {
            image::Rgb([s8(x, y, 0), s8(x, y, 1), s8(x, y, 2)])
        })),
        D::ImageRgba8(image::ImageBuffer::from_fn(w, h, |x, y| {
            image::Rgba([s8(x, y, 0), s8(x, y, 1), s8(x, y, 2), s8(x, y, 3)])
        })),
        D::ImageLuma16(image::ImageBuffer::from_fn(w, h, |x, y| {
            image::Luma([s16(x, y, 0)])
        })),
        D::ImageLumaA16(image::ImageBuffer::from_fn(w, h, |x, y| {
            image::LumaA([s16(x, y, 0), s16(x, y, 3)])
        })),
        D::ImageRgb16(image::ImageBuffer::from_fn(w, h, |x, y| {
            image::Rgb([s16(x, y, 0), s16(x, y, 1), s16(x, y, 2)])
        })),
        D::ImageRgba16(image::ImageBuffer::from_fn(w, h, |x, y| {
            image::Rgba([s16(x, y, 0), s16(x, y, 1), s16(x, y, 2), s16(x, y, 3)])
        })),
    ];
    for img in images {
        let color = img.color();
        let mut png = Cursor::new(Vec::new());
        img.write_to(&mut png, ImageFormat::Png)
            .expect("encode PNG");
        let png = png.into_inner();
        let got = decode(&png).expect("decodes");
        let gray = matches!(
            color,
            ColorType::L8 | ColorType::La8 | ColorType::L16 | ColorType::La16
        );
        let wide = color.bytes_per_pixel() / color.channel_count() == 2;
        let mut want = Vec::new();
        for y in 0..h {
            for x in 0..w {
                for c in 0..3 {
                    let c = if gray { 0 } else { c };
                    want.push(if wide { r16(s16(x, y, c)) } else { s8(x, y, c) });
                }
            }
        }
        assert_eq!((got.width, got.height), (w as usize, h as usize));
        assert!(got.data == want, "{color:?}: RGB differs from the samples");
        assert_eq!(
            got.data.capacity(),
            got.data.len(),
            "{color:?}: buffer not shrunk"
        );
        if wide {
            // The `image` crate's own conversion, which decoding used for 16 bits before.
            let before = image::load_from_memory(&png).expect("loads").to_rgb8();
            assert!(
                got.data == before.into_raw(),
                "{color:?}: differs from `to_rgb8`"
            );
        }
    }
}

#[test]
fn jpeg_headers_account_for_coefficients() {
    let img = image::DynamicImage::ImageRgb8(image::ImageBuffer::from_fn(640, 480, |x, y| {
        image::Rgb([x as u8, y as u8, (x ^ y) as u8])
    }));
    let mut jpg = Cursor::new(Vec::new());
    img.write_to(&mut jpg, ImageFormat::Jpeg)
        .expect("encode JPEG");
    let jpg = jpg.into_inner();
    let image = Encoded::parse(&jpg).expect("parses");
    // Output, four components' coefficients, the header's copies.
    assert!(image.working_bytes() >= 640 * 480 * 3 + 672 * 512 * 8 + 2 * jpg.len());
    let rgb = image.decode().expect("decodes");
    assert_eq!(
        (rgb.width, rgb.height, rgb.data.len()),
        (640, 480, 640 * 480 * 3)
    );
}

#[test]
fn in_place_conversion_never_reads_a_byte_it_wrote() {
    // Each pixel's bytes are distinct, so a clobbered read shows.
    let pixels = 1000;
    let gray: Vec<u8> = (0..pixels).map(|i| i as u8).collect();
    let mut buf = gray.clone();
    buf.resize(pixels * 3, 0);
    to_rgb_in_place(&mut buf, ColorType::L8, pixels).expect("L8");
    assert!(buf.chunks_exact(3).zip(&gray).all(|(p, &g)| p == [g, g, g]));
    let rgba: Vec<u8> = (0..pixels * 4).map(|i| (i * 7) as u8).collect();
    let mut buf = rgba.clone();
    to_rgb_in_place(&mut buf, ColorType::Rgba8, pixels).expect("Rgba8");
    assert!(
        buf.chunks_exact(3)
            .zip(rgba.chunks_exact(4))
            .all(|(p, q)| p == &q[..3])
    );
    assert_eq!(narrow(&128u16.to_ne_bytes()), 0);
    assert_eq!(narrow(&129u16.to_ne_bytes()), 1);
    assert_eq!(narrow(&65535u16.to_ne_bytes()), 255);
    assert!(matches!(
        to_rgb_in_place(&mut vec![0; 12], ColorType::Rgb32F, 1),
        Err(VisionError::Decode(_))
    ));
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
