//! Qwen2-VL / Qwen2.5-VL image preprocessing, as `transformers`' `Qwen2VLImageProcessor`
//! (Pillow backend) and `Qwen2VLImageProcessorFast` (torchvision backend, AReaL's default) do
//! it: `smart_resize`, bicubic resize, rescale by 1/255 and normalise in float32 (each backend
//! in its own order of operations), then patches of `temporal_patch_size x patch_size^2` per
//! channel, grouped by `merge_size^2`.

use crate::VisionError;
use crate::decode::Rgb;
use crate::resize::{pil_bicubic, torch_bicubic_aa};

/// Which reference implementation to match.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// `Qwen2VLImageProcessorFast` (torchvision, antialiased uint8 bicubic): what AReaL 1.0.4
    /// loads (`AutoProcessor.from_pretrained(..., use_fast=True)`).
    #[default]
    Torchvision,
    /// `Qwen2VLImageProcessor` (Pillow bicubic): `use_fast=False`.
    Pil,
}

impl Backend {
    /// `torchvision` or `pil`.
    pub fn parse(name: &str) -> Result<Backend, VisionError> {
        match name {
            "torchvision" | "fast" => Ok(Backend::Torchvision),
            "pil" | "slow" => Ok(Backend::Pil),
            other => Err(VisionError::Config(format!(
                "backend `{other}`: use \"torchvision\" (transformers' fast processor, AReaL's default) or \"pil\""
            ))),
        }
    }
}

/// The processor's settings (`preprocessor_config.json`); defaults are the class defaults of
/// transformers 5.3, shared by Qwen2-VL and Qwen2.5-VL.
#[derive(Debug, Clone, PartialEq)]
pub struct Qwen2VlConfig {
    /// Fewest pixels after resizing (`min_pixels`, `size.shortest_edge`). Default 56·56.
    pub min_pixels: u64,
    /// Most pixels after resizing (`max_pixels`, `size.longest_edge`). Default 28·28·1280.
    pub max_pixels: u64,
    /// Side of a vision patch. Default 14.
    pub patch_size: usize,
    /// Patches merged per side into one LLM token. Default 2.
    pub merge_size: usize,
    /// Frames per patch (an image is repeated to fill them). Default 2.
    pub temporal_patch_size: usize,
    /// Per-channel mean (CLIP's).
    pub image_mean: [f32; 3],
    /// Per-channel standard deviation (CLIP's).
    pub image_std: [f32; 3],
}

/// CLIP's normalisation constants, as written in `transformers` (Python floats).
const CLIP_MEAN: [f64; 3] = [0.48145466, 0.4578275, 0.40821073];
const CLIP_STD: [f64; 3] = [0.26862954, 0.26130258, 0.27577711];

impl Default for Qwen2VlConfig {
    fn default() -> Self {
        Qwen2VlConfig {
            min_pixels: 56 * 56,
            max_pixels: 28 * 28 * 1280,
            patch_size: 14,
            merge_size: 2,
            temporal_patch_size: 2,
            image_mean: CLIP_MEAN.map(|v| v as f32),
            image_std: CLIP_STD.map(|v| v as f32),
        }
    }
}

impl Qwen2VlConfig {
    /// Settings from a `preprocessor_config.json` object: `min_pixels`/`max_pixels` (or
    /// `size.shortest_edge`/`size.longest_edge`), `patch_size`, `merge_size`,
    /// `temporal_patch_size`, `image_mean`, `image_std`; missing keys keep the defaults.
    pub fn from_json(v: &serde_json::Value) -> Result<Qwen2VlConfig, VisionError> {
        let mut c = Qwen2VlConfig::default();
        let int = |key: &str, v: &serde_json::Value| -> Result<Option<u64>, VisionError> {
            match v {
                serde_json::Value::Null => Ok(None),
                v => v.as_u64().filter(|&n| n > 0).map(Some).ok_or_else(|| {
                    VisionError::Config(format!("`{key}` must be a positive integer, got {v}"))
                }),
            }
        };
        if let Some(n) = int("size.shortest_edge", &v["size"]["shortest_edge"])? {
            c.min_pixels = n;
        }
        if let Some(n) = int("size.longest_edge", &v["size"]["longest_edge"])? {
            c.max_pixels = n;
        }
        if let Some(n) = int("min_pixels", &v["min_pixels"])? {
            c.min_pixels = n;
        }
        if let Some(n) = int("max_pixels", &v["max_pixels"])? {
            c.max_pixels = n;
        }
        for (key, field) in [
            ("patch_size", &mut c.patch_size),
            ("merge_size", &mut c.merge_size),
            ("temporal_patch_size", &mut c.temporal_patch_size),
        ] {
            if let Some(n) = int(key, &v[key])? {
                *field = usize::try_from(n)
                    .ok()
                    .filter(|&n| n <= 64)
                    .ok_or_else(|| VisionError::Config(format!("`{key}` {n} is over 64")))?;
            }
        }
        for (key, field) in [
            ("image_mean", &mut c.image_mean),
            ("image_std", &mut c.image_std),
        ] {
            match &v[key] {
                serde_json::Value::Null => {}
                serde_json::Value::Array(a) if a.len() == 3 => {
                    for (f, x) in field.iter_mut().zip(a) {
                        *f = x.as_f64().ok_or_else(|| {
                            VisionError::Config(format!("`{key}` must hold numbers, got {x}"))
                        })? as f32;
                    }
                }
                other => {
                    return Err(VisionError::Config(format!(
                        "`{key}` must be a list of 3 numbers, got {other}"
                    )));
                }
            }
        }
        c.validate()?;
        Ok(c)
    }

    fn validate(&self) -> Result<(), VisionError> {
        if self.max_pixels > crate::MAX_IMAGE_PIXELS {
            return Err(VisionError::Config(format!(
                "max_pixels {} is over {} (the largest image rollbox processes)",
                self.max_pixels,
                crate::MAX_IMAGE_PIXELS
            )));
        }
        if self.min_pixels > self.max_pixels {
            return Err(VisionError::Config(format!(
                "min_pixels {} is over max_pixels {}",
                self.min_pixels, self.max_pixels
            )));
        }
        if self.image_std.contains(&0.0) {
            return Err(VisionError::Config("image_std has a zero".into()));
        }
        Ok(())
    }

    /// Side of the resize grid: `patch_size * merge_size` (28).
    pub fn factor(&self) -> usize {
        self.patch_size * self.merge_size
    }
}

/// `transformers`' `smart_resize(height, width, factor, min_pixels, max_pixels)`: the size a
/// `height x width` image is resized to. An aspect ratio over 200 is an error, as there.
pub fn smart_resize(
    height: usize,
    width: usize,
    factor: usize,
    min_pixels: u64,
    max_pixels: u64,
) -> Result<(usize, usize), VisionError> {
    if height == 0 || width == 0 {
        return Err(VisionError::Shape(format!(
            "the image is {width}x{height}: empty"
        )));
    }
    let (h, w, f) = (height as f64, width as f64, factor as f64);
    let ratio = h.max(w) / h.min(w);
    if ratio > 200.0 {
        return Err(VisionError::Shape(format!(
            "the image is {width}x{height}: its aspect ratio {ratio} is over 200, which Qwen2-VL's processor refuses; crop or pad it"
        )));
    }
    // Python's `round` on a float rounds half to even.
    let mut h_bar = (h / f).round_ties_even() * f;
    let mut w_bar = (w / f).round_ties_even() * f;
    if h_bar * w_bar > max_pixels as f64 {
        let beta = ((h * w) / max_pixels as f64).sqrt();
        h_bar = f.max((h / beta / f).floor() * f);
        w_bar = f.max((w / beta / f).floor() * f);
    } else if h_bar * w_bar < min_pixels as f64 {
        let beta = (min_pixels as f64 / (h * w)).sqrt();
        h_bar = (h * beta / f).ceil() * f;
        w_bar = (w * beta / f).ceil() * f;
    }
    Ok((h_bar as usize, w_bar as usize))
}

/// One processed image.
#[derive(Debug, Clone, PartialEq)]
pub struct Processed {
    /// `[rows, channels * temporal_patch_size * patch_size^2]` float32, row-major (1176 wide
    /// for the defaults).
    pub pixel_values: Vec<f32>,
    /// Width of a `pixel_values` row.
    pub row_len: usize,
    /// `[t, gh, gw]`: frames, patch rows, patch columns (`image_grid_thw`).
    pub grid_thw: [i64; 3],
    /// The resized image, for checks.
    pub resized: Rgb,
}

impl Processed {
    /// Rows of `pixel_values` (`t * gh * gw`).
    pub fn rows(&self) -> usize {
        self.pixel_values.len() / self.row_len
    }

    /// LLM tokens the image takes: `t * gh * gw / merge_size^2` (the number of
    /// `<|image_pad|>` copies its placeholder expands to).
    pub fn tokens(&self, merge_size: usize) -> usize {
        self.rows() / (merge_size * merge_size)
    }
}

/// What [`process_into`] appended for one image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// Rows of `pixel_values` appended (`t * gh * gw`).
    pub rows: usize,
    /// Width of a `pixel_values` row.
    pub row_len: usize,
    /// `[t, gh, gw]`: frames, patch rows, patch columns (`image_grid_thw`).
    pub grid_thw: [i64; 3],
}

impl Appended {
    /// LLM tokens the image takes (see [`Processed::tokens`]).
    pub fn tokens(&self, merge_size: usize) -> usize {
        self.rows / (merge_size * merge_size)
    }
}

/// Process one RGB image as the chosen `transformers` processor does.
pub fn process(img: &Rgb, cfg: &Qwen2VlConfig, backend: Backend) -> Result<Processed, VisionError> {
    let resized = resize(img, cfg, backend)?;
    let mut pixel_values = Vec::new();
    let appended = patches(&resized, cfg, backend, &mut pixel_values);
    Ok(Processed {
        pixel_values,
        row_len: appended.row_len,
        grid_thw: appended.grid_thw,
        resized,
    })
}

/// Process one RGB image as [`process`] does, appending its `pixel_values` rows to `out`: the
/// images of a batch land in one buffer without a copy each.
pub fn process_into(
    img: &Rgb,
    cfg: &Qwen2VlConfig,
    backend: Backend,
    out: &mut Vec<f32>,
) -> Result<Appended, VisionError> {
    let resized = resize(img, cfg, backend)?;
    Ok(patches(&resized, cfg, backend, out))
}

/// `smart_resize`, then the backend's bicubic resize.
fn resize(img: &Rgb, cfg: &Qwen2VlConfig, backend: Backend) -> Result<Rgb, VisionError> {
    cfg.validate()?;
    let (h, w) = smart_resize(
        img.height,
        img.width,
        cfg.factor(),
        cfg.min_pixels,
        cfg.max_pixels,
    )?;
    Ok(match backend {
        Backend::Pil => pil_bicubic(img, w, h),
        Backend::Torchvision => torch_bicubic_aa(img, w, h),
    })
}

/// Normalise and patchify a resized image, appending its rows to `pv`.
fn patches(resized: &Rgb, cfg: &Qwen2VlConfig, backend: Backend, pv: &mut Vec<f32>) -> Appended {
    // Per channel: the float32 value of each byte, as each backend computes it.
    let luts: Vec<[f32; 256]> = (0..3)
        .map(|c| {
            let mut lut = [0f32; 256];
            for (v, out) in lut.iter_mut().enumerate() {
                *out = normalise(v as u8, c, cfg, backend);
            }
            lut
        })
        .collect();
    let (h, w) = (resized.height, resized.width);
    let p = cfg.patch_size;
    let m = cfg.merge_size;
    let tp = cfg.temporal_patch_size;
    let (gh, gw) = (h / p, w / p);
    let row_len = 3 * tp * p * p;
    let frame = p * p;
    let rows = (gh / m) * (gw / m) * m * m;
    pv.reserve_exact(rows * row_len);
    let mut out = pv.spare_capacity_mut()[..rows * row_len].chunks_exact_mut(frame * tp);
    for bh in 0..gh / m {
        for bw in 0..gw / m {
            for mh in 0..m {
                for mw in 0..m {
                    let (py, px) = ((bh * m + mh) * p, (bw * m + mw) * p);
                    for (c, lut) in luts.iter().enumerate() {
                        // The image fills every frame of the temporal patch.
                        let frames = out.next().expect("a row per patch, 3 channels per row");
                        let (first, others) = frames.split_at_mut(frame);
                        for (i, dst) in first.chunks_exact_mut(p).enumerate() {
                            let at = ((py + i) * w + px) * 3;
                            let run = &resized.data[at..at + p * 3];
                            for (d, px) in dst.iter_mut().zip(run.chunks_exact(3)) {
                                d.write(lut[usize::from(px[c])]);
                            }
                        }
                        for other in others.chunks_exact_mut(frame) {
                            other.copy_from_slice(first);
                        }
                    }
                }
            }
        }
    }
    // SAFETY: the loops above wrote the `rows * row_len` elements reserved past the length:
    // `rows` patches of 3 channels (`row_len` is `3 * tp * frame`), each `tp` frames of
    // `frame` values, the first frame element by element and the others copied from it.
    unsafe { pv.set_len(pv.len() + rows * row_len) };
    Appended {
        rows,
        row_len,
        grid_thw: [1, gh as i64, gw as i64],
    }
}

/// The normalised float32 value of byte `v` in channel `c`.
fn normalise(v: u8, c: usize, cfg: &Qwen2VlConfig, backend: Backend) -> f32 {
    match backend {
        // numpy: `(x.astype(float64) * (1/255)).astype(float32)`, then `(x - mean) / std`
        // with mean and std as float32 arrays.
        Backend::Pil => {
            let x = (f64::from(v) * (1.0 / 255.0)) as f32;
            (x - cfg.image_mean[c]) / cfg.image_std[c]
        }
        // torch: mean and std fused with the rescale factor (float32 tensors times 255),
        // then `(x - mean) / std` on the float32 image.
        Backend::Torchvision => {
            let mean = cfg.image_mean[c] * 255.0f32;
            let std = cfg.image_std[c] * 255.0f32;
            (f32::from(v) - mean) / std
        }
    }
}

#[cfg(test)]
mod tests;
