//! Parity with transformers' own processors: `tests/fixtures/vision/qwen2vl.json`, recorded by
//! `scripts/fixtures/record_vision_fixtures.py` in AReaL 1.0.4's venv (transformers 5.3, torch 2.10,
//! Pillow 12.3). Every case must give the same `image_grid_thw` and bit-identical float32
//! `pixel_values` (compared by sha256), or the same refusal.

use rollbox_vision::{Backend, Qwen2VlConfig, Rgb, VisionError, decode, process};
use serde_json::Value;
use sha2::{Digest, Sha256};

fn fixtures_dir() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/vision")
}

/// The recording script's generator: a 32-bit hash of (x, y, channel, seed), low byte.
fn noise(w: usize, h: usize, seed: u32) -> Vec<u8> {
    let mut out = Vec::with_capacity(w * h * 3);
    for y in 0..h as u32 {
        for x in 0..w as u32 {
            for c in 0..3u32 {
                let mut v = x
                    .wrapping_mul(374_761_393)
                    .wrapping_add(y.wrapping_mul(668_265_263))
                    .wrapping_add(c.wrapping_mul(2_246_822_519))
                    .wrapping_add(seed.wrapping_mul(3_266_489_917));
                v = (v ^ (v >> 13)).wrapping_mul(1_274_126_177);
                v ^= v >> 16;
                out.push((v & 255) as u8);
            }
        }
    }
    out
}

fn procedural(spec: &Value) -> Rgb {
    let (w, h) = (
        spec["w"].as_u64().expect("w") as usize,
        spec["h"].as_u64().expect("h") as usize,
    );
    let data = match spec["kind"].as_str().expect("kind") {
        "noise" => noise(w, h, spec["seed"].as_u64().expect("seed") as u32),
        "flat" => {
            let rgb: Vec<u8> = spec["rgb"]
                .as_array()
                .expect("rgb")
                .iter()
                .map(|v| v.as_u64().expect("byte") as u8)
                .collect();
            rgb.repeat(w * h)
        }
        "gradient" => {
            let mut d = Vec::with_capacity(w * h * 3);
            for y in 0..h {
                for x in 0..w {
                    d.push(((x * 255) / (w - 1).max(1)) as u8);
                    d.push(((y * 255) / (h - 1).max(1)) as u8);
                    d.push((((x + y) * 255) / (w + h - 2).max(1)) as u8);
                }
            }
            d
        }
        "text" => {
            let mut d = Vec::with_capacity(w * h * 3);
            for y in 0..h {
                for x in 0..w {
                    let ink = (x % 9 < 2 && (y / 5) % 3 == 0) || (y % 11 == 0 && x % 7 < 5);
                    d.extend([if ink { 0 } else { 255 }; 3]);
                }
            }
            d
        }
        "checker" => {
            let k = spec["k"].as_u64().expect("k") as usize;
            let mut d = Vec::with_capacity(w * h * 3);
            for y in 0..h {
                for x in 0..w {
                    d.extend([(((x / k + y / k) % 2) * 255) as u8; 3]);
                }
            }
            d
        }
        other => panic!("unknown kind {other}"),
    };
    Rgb::new(w, h, data).expect("rgb")
}

fn source(spec: &Value) -> Rgb {
    match spec["file"].as_str() {
        Some(f) => {
            decode(&std::fs::read(fixtures_dir().join(f)).expect("image file")).expect("decodes")
        }
        None => procedural(spec),
    }
}

/// Largest difference, in levels, between rollbox's JPEG decoding (the `image` crate's
/// decoder) and Pillow's (libjpeg-turbo): their IDCT rounding and chroma upsampling differ.
/// Measured on the fixtures; documented in the README.
const JPEG_MAX_LEVELS: u8 = 3;

fn sha256(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[test]
fn pixel_values_are_bit_identical_to_transformers() {
    let doc: Value = serde_json::from_str(
        &std::fs::read_to_string(fixtures_dir().join("qwen2vl.json")).expect("fixture"),
    )
    .expect("JSON");
    let cases = doc["cases"].as_array().expect("cases");
    assert!(cases.len() >= 150, "{} cases", cases.len());
    let mut failures = Vec::new();
    let mut checked = 0;
    for case in cases {
        let name = format!(
            "{} {} {}",
            case["backend"].as_str().unwrap_or_default(),
            case["setting"].as_str().unwrap_or_default(),
            case["name"].as_str().unwrap_or_default()
        );
        let backend = Backend::parse(case["backend"].as_str().expect("backend")).expect("backend");
        let cfg = Qwen2VlConfig {
            min_pixels: case["min_pixels"].as_u64().expect("min"),
            max_pixels: case["max_pixels"].as_u64().expect("max"),
            ..Qwen2VlConfig::default()
        };
        let expect = &case["expect"];
        let mut img = source(&case["source"]);
        if let Some(file) = case["source"]["file"]
            .as_str()
            .filter(|f| f.ends_with(".jpg"))
        {
            // JPEG: our decoder is within JPEG_MAX_LEVELS of Pillow's; the processing is
            // checked bit for bit on Pillow's decoded pixels.
            let pillow = decode(
                &std::fs::read(fixtures_dir().join(format!("{file}.pillow.png"))).expect("png"),
            )
            .expect("decodes");
            let max = img
                .data
                .iter()
                .zip(&pillow.data)
                .map(|(a, b)| a.abs_diff(*b))
                .max();
            assert!(
                max.is_some_and(|m| m <= JPEG_MAX_LEVELS),
                "{name}: JPEG decoding off by {max:?} levels"
            );
            img = pillow;
        }
        if let Some(want) = case["decoded_rgb_sha256"].as_str()
            && sha256(&img.data) != want
        {
            failures.push(format!("{name}: decoded pixels differ from Pillow's"));
            continue;
        }
        let got = process(&img, &cfg, backend);
        if let Some(err) = expect["error"].as_str() {
            match (&got, err.contains("aspect ratio")) {
                (Err(VisionError::Shape(m)), true) if m.contains("aspect ratio") => {}
                // transformers' numpy path takes a 1x1x3 array for channels-first and fails
                // ("mean must have 1 elements"); rollbox processes the pixel.
                (Ok(_), false) if err.contains("mean must have 1 elements") => {}
                _ => failures.push(format!("{name}: expected error {err:?}, got {got:?}")),
            }
            continue;
        }
        // transformers' numpy path reads an HxWx3 array whose height is 1 or 3 as channels-first
        // (an ambiguity it warns about), so its Pillow backend transposes such images; rollbox
        // reads the image as it is, as the torchvision backend does.
        if backend == Backend::Pil
            && matches!(img.height, 1 | 3)
            && let Ok(p) = &got
        {
            let tv = process(&img, &cfg, Backend::Torchvision).expect("torchvision");
            assert_eq!(p.grid_thw, tv.grid_thw, "{name}");
            continue;
        }
        let p = match got {
            Ok(p) => p,
            Err(e) => {
                failures.push(format!("{name}: {e}"));
                continue;
            }
        };
        checked += 1;
        let grid: Vec<i64> = expect["grid_thw"]
            .as_array()
            .expect("grid")
            .iter()
            .map(|v| v.as_i64().expect("int"))
            .collect();
        if p.grid_thw.to_vec() != grid {
            failures.push(format!("{name}: grid {:?} != {grid:?}", p.grid_thw));
            continue;
        }
        let resized_ok = sha256(&p.resized.data) == expect["resized_rgb_sha256"];
        if std::env::var("ROLLBOX_VISION_DUMP").is_ok_and(|d| d == name) {
            std::fs::write("/tmp/rollbox-vision-dump.bin", &p.resized.data).expect("dump");
        }
        let bytes: Vec<u8> = p
            .pixel_values
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        if sha256(&bytes) != expect["pixel_values_sha256"] {
            let head: Vec<f64> = expect["head"]
                .as_array()
                .expect("head")
                .iter()
                .map(|v| v.as_f64().expect("f"))
                .collect();
            failures.push(format!(
                "{name}: pixel_values differ (resize {}); head {:?} vs {:?}",
                if resized_ok { "identical" } else { "differs" },
                &p.pixel_values[..8],
                head
            ));
        }
    }
    eprintln!(
        "{checked} cases bit-identical checked, {} failures",
        failures.len()
    );
    assert!(
        failures.is_empty(),
        "{} of {} failed:\n{}",
        failures.len(),
        cases.len(),
        failures.join("\n")
    );
}
