//! What decoding and resizing hold, measured (issue 52): a counting allocator records this test
//! binary's heap, and each image's peak must stay within what its header said
//! (`Encoded::working_bytes`, `resize::working_bytes`): what the runtime reserves from the host's
//! memory budget before it decodes. An image over `MAX_IMAGE_PIXELS` is refused from its header,
//! before anything of its size is allocated. One test, so that nothing else allocates beside it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::io::Cursor;
use std::sync::atomic::{AtomicUsize, Ordering};

use base64::Engine as _;
use rollbox_vision::testing::blank_png;
use rollbox_vision::{Backend, Encoded, Qwen2VlConfig, VisionError, process_into, resize};

/// The system allocator, counting the bytes allocated now and the most at once.
struct Counting;

static NOW: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grew(bytes: usize) {
    let now = NOW.fetch_add(bytes, Ordering::Relaxed) + bytes;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: every call is forwarded to `System` with the caller's arguments; the counters do not
// allocate.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            grew(layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: the caller's contract, forwarded.
        unsafe { System.dealloc(ptr, layout) };
        NOW.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: the caller's contract, forwarded.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            if new_size >= layout.size() {
                grew(new_size - layout.size());
            } else {
                NOW.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
            }
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// `f`'s result and the most bytes it held at once beyond what was allocated when it started.
fn peak_of<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let base = NOW.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f();
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

/// Decode `input` as the runtime does, checking the peak against the header's estimate.
fn decodes_within_its_estimate(what: &str, input: &[u8]) -> rollbox_vision::Rgb {
    let header = Encoded::header_bytes(input);
    let ((image, working), parsing) = peak_of(|| {
        let image = Encoded::parse(input).expect("parses");
        let working = image.working_bytes();
        (image, working)
    });
    assert!(
        parsing <= header,
        "{what}: parsing held {parsing}, header_bytes {header}"
    );
    let (rgb, decoding) = peak_of(|| image.decode().expect("decodes"));
    // The parsed image's own allocations were made before `peak_of` started counting.
    assert!(
        decoding + parsing <= working,
        "{what}: decoding held {decoding} + {parsing}, working_bytes {working}"
    );
    eprintln!("{what}: held {} of {working} estimated", decoding + parsing);
    rgb
}

fn encoded(img: image::DynamicImage, format: image::ImageFormat) -> Vec<u8> {
    let mut out = Cursor::new(Vec::new());
    img.write_to(&mut out, format).expect("encode");
    out.into_inner()
}

#[test]
fn decoding_holds_what_the_header_said() {
    // Over the cap: refused from the header, having allocated a few KB of decoder state.
    let over = blank_png(7072, 7072, 2, 16);
    let (refused, held) = peak_of(|| Encoded::parse(&over).err());
    assert!(
        matches!(&refused, Some(VisionError::TooLarge(m)) if m.contains("`MAX_IMAGE_PIXELS`")),
        "{refused:?}"
    );
    assert!(held < 1 << 20, "refusing held {held} bytes");

    // The bomb of issue 52 at the cap: 50 megapixels of 16-bit RGB (300 MB), in place to RGB.
    let bomb = blank_png(7071, 7071, 2, 16);
    let rgb = decodes_within_its_estimate("16-bit RGB, 50 MP", &bomb);
    assert_eq!((rgb.width, rgb.height), (7071, 7071));
    assert!(rgb.data.iter().all(|&b| b == 0));
    drop(rgb);

    // Every PNG pixel format and both JPEG ones, raw and as base64 text.
    let (w, h) = (1531, 997);
    let px = |x: u32, y: u32| [(x * 3) as u8, (y * 5) as u8, (x ^ y) as u8, (x + y) as u8];
    let rgba = image::DynamicImage::ImageRgba8(image::ImageBuffer::from_fn(w, h, |x, y| {
        image::Rgba(px(x, y))
    }));
    let cases = [
        (
            "L8 PNG",
            encoded(rgba.to_luma8().into(), image::ImageFormat::Png),
        ),
        (
            "LA8 PNG",
            encoded(rgba.to_luma_alpha8().into(), image::ImageFormat::Png),
        ),
        (
            "RGB8 PNG",
            encoded(rgba.to_rgb8().into(), image::ImageFormat::Png),
        ),
        ("RGBA8 PNG", encoded(rgba.clone(), image::ImageFormat::Png)),
        (
            "L16 PNG",
            encoded(rgba.to_luma16().into(), image::ImageFormat::Png),
        ),
        (
            "LA16 PNG",
            encoded(rgba.to_luma_alpha16().into(), image::ImageFormat::Png),
        ),
        (
            "RGB16 PNG",
            encoded(rgba.to_rgb16().into(), image::ImageFormat::Png),
        ),
        (
            "RGBA16 PNG",
            encoded(rgba.to_rgba16().into(), image::ImageFormat::Png),
        ),
        (
            "RGB JPEG",
            encoded(rgba.to_rgb8().into(), image::ImageFormat::Jpeg),
        ),
        (
            "gray JPEG",
            encoded(rgba.to_luma8().into(), image::ImageFormat::Jpeg),
        ),
    ];
    for (what, bytes) in &cases {
        let rgb = decodes_within_its_estimate(what, bytes);
        assert_eq!((rgb.width, rgb.height), (w as usize, h as usize), "{what}");
        let b64 = base64::engine::general_purpose::STANDARD.encode(bytes);
        let again = decodes_within_its_estimate(&format!("{what}, base64"), b64.as_bytes());
        assert!(again == rgb, "{what}: base64 decodes differently");
    }

    // Resizing and patching, for both backends, shrinking, growing and Pillow's tall path.
    for (sw, sh, cfg) in [
        (1531, 997, Qwen2VlConfig::default()),
        (60, 40, Qwen2VlConfig::default()),
        (
            40,
            4100,
            Qwen2VlConfig {
                max_pixels: 28 * 28 * 64,
                ..Default::default()
            },
        ),
    ] {
        let src = rollbox_vision::Rgb::new(sw, sh, vec![77; sw * sh * 3]).expect("rgb");
        let (h, w) =
            rollbox_vision::smart_resize(sh, sw, cfg.factor(), cfg.min_pixels, cfg.max_pixels)
                .expect("size");
        let pixel_values = h * w * 3 * cfg.temporal_patch_size * 4;
        let allowed = resize::working_bytes(sw, sh, w, h) + pixel_values;
        for backend in [Backend::Pil, Backend::Torchvision] {
            let mut pv = Vec::new();
            let (_, held) = peak_of(|| process_into(&src, &cfg, backend, &mut pv).expect("ok"));
            assert!(
                held <= allowed,
                "{sw}x{sh} to {w}x{h}, {backend:?}: held {held}, allowed {allowed}"
            );
            assert_eq!(pv.len() * 4, pixel_values);
        }
    }
}
