//! Host side of the `vision` interface: images decoded and preprocessed natively
//! (`rollbox-vision`), results handed back as tensors under the episode's tensor limits.
//!
//! Limits, each checked from an image's header, before its pixels are decoded:
//! * at most [`MAX_IMAGES_PER_CALL`] images a call; each at most `MAX_IMAGE_BYTES` encoded and
//!   `MAX_IMAGE_PIXELS` decoded (`rollbox-vision`), its aspect ratio within Qwen2-VL's 200;
//! * the call's pixel values within the episode's tensor bytes (`max_tensor_bytes`);
//! * the host memory budget (`max_host_memory`): what reading an image's header may hold, then
//!   what decoding and resizing it will (`Encoded::working_bytes`, `resize::working_bytes`:
//!   the decoded buffer in the image's own pixel format, converted to RGB in place, the
//!   decoder's rows or JPEG coefficients, the resize's intermediate), reserved for that image
//!   and given back once it is processed; the call's pixel values, reserved until they are
//!   admitted as tensors (which reserve their own).
//!
//! The work runs on the blocking pool. Between images it stops once the episode's deadline has
//! passed or the call was dropped (the episode timed out or was cancelled: nobody waits for the
//! rest), and, with fuel on, once the CPU it has spent uses the fuel the episode can have left:
//! every image's CPU time is charged to the episode (`host_work`), so the next would only end it
//! `out_of_fuel` later. A bad image or option is an `invalid-argument` value naming the image;
//! over the tensor bytes or the memory budget, `limit-exceeded`; past the deadline, `timeout`;
//! out of fuel, a trap (fault `out_of_fuel`).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use rollbox_tensor::{HostTensor, TensorData};
use rollbox_vision::{
    Appended, Backend, Encoded, Qwen2VlConfig, VisionError, process_into, resize, smart_resize,
};
use wasmtime::Trap;

use crate::bindings::types::Error;
use crate::bindings::vision::{self, ImageOptions, ProcessedImages};
use crate::budget::{HostMemory, Reservation};
use crate::host_work::{HOST_FUEL_PER_MS, offload, past_deadline, timed};
use crate::views::TensorView;

/// Images one call accepts.
pub const MAX_IMAGES_PER_CALL: usize = 64;

/// The processed images of one call: `pixel_values` rows, grids and token counts.
type Batch = (Vec<f32>, usize, Vec<i64>, Vec<u32>);

/// Where a call stops between images.
struct Stops {
    /// Tensor bytes the episode may still create.
    tensor_bytes: usize,
    /// The episode's deadline.
    deadline: Instant,
    /// Fuel the episode can have left for host work (`None`: fuel is off): its budget less the
    /// host work charged so far, an upper bound (its own instructions took some too).
    fuel_left: Option<u64>,
    /// Set when the call's future is dropped.
    dropped: Arc<AtomicBool>,
    /// The host's memory budget, which decoding and pixel values reserve from.
    host: Arc<HostMemory>,
}

impl Stops {
    /// The `timeout` value once the deadline has passed or the call was dropped.
    fn past(&self, i: usize) -> Option<Error> {
        (self.dropped.load(Ordering::Relaxed) || Instant::now() >= self.deadline)
            .then(|| past_deadline(&format!("process-images (at image {i})")))
    }

    /// A trap once `spent` CPU in this call has used the fuel the episode can have left: charged
    /// (as it is when the call returns), it ends the episode `out_of_fuel` anyway.
    fn out_of_fuel(&self, spent: Duration) -> wasmtime::Result<()> {
        match self.fuel_left {
            Some(left) if fuel_for(spent) >= left => Err(wasmtime::Error::new(Trap::OutOfFuel)),
            _ => Ok(()),
        }
    }
}

/// Fuel charged for `cpu` of host work, as `CallCtx::charge_host` charges it.
fn fuel_for(cpu: Duration) -> u64 {
    let fuel = cpu.as_nanos().saturating_mul(u128::from(HOST_FUEL_PER_MS)) / 1_000_000;
    u64::try_from(fuel).unwrap_or(u64::MAX)
}

/// Sets its flag when dropped: with the host call's future, when the episode times out or is
/// cancelled while the blocking pool works.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// One call's images processed so far.
struct Images<'a> {
    cfg: Qwen2VlConfig,
    backend: Backend,
    tensor_bytes: usize,
    /// Pixel values planned so far, bytes.
    planned: usize,
    pv: Vec<f32>,
    /// The pixel values' share of the host budget.
    working: &'a mut Reservation,
    host: &'a Arc<HostMemory>,
}

impl Images<'_> {
    /// Image `i`: its header read and checked, its memory reserved, then decoded, resized and
    /// its rows appended to the call's pixel values.
    fn add(&mut self, i: usize, bytes: &[u8]) -> Result<Appended, Error> {
        let bad = |e: VisionError| Error::InvalidArgument(format!("image {i}: {e}"));
        let host = self.host;
        let refused = |what: &str, bytes: usize| {
            Error::LimitExceeded(
                host.exhausted(&format!("process-images (image {i}, {what})"), bytes),
            )
        };
        // What reading the header may hold (copies of the encoded bytes, decoder metadata).
        let mut held = Reservation::default();
        let header = Encoded::header_bytes(bytes);
        if !held.grow_bulk(host, header) {
            return Err(refused("its header", header));
        }
        let image = Encoded::parse(bytes).map_err(bad)?;
        let cfg = &self.cfg;
        let (h, w) = smart_resize(
            image.height(),
            image.width(),
            cfg.factor(),
            cfg.min_pixels,
            cfg.max_pixels,
        )
        .map_err(bad)?;
        // The output's size is known from the header: refuse what would pass the episode's
        // tensor bytes instead of decoding it.
        let out = h
            .checked_mul(w)
            .and_then(|n| n.checked_mul(3 * cfg.temporal_patch_size * 4))
            .filter(|&n| {
                self.planned
                    .checked_add(n)
                    .is_some_and(|total| total <= self.tensor_bytes)
            })
            .ok_or_else(|| {
                Error::LimitExceeded(format!(
                    "image {i}: the pixel values would pass the {} tensor bytes this episode has left (`max_tensor_bytes`); lower max_pixels or raise that limit",
                    self.tensor_bytes
                ))
            })?;
        // Decoding (the decoded buffer, converted in place), then the RGB image beside the
        // resize's intermediate and output: the larger, from the header.
        let (iw, ih) = (image.width(), image.height());
        let resizing = iw
            .saturating_mul(ih)
            .saturating_mul(3)
            .saturating_add(resize::working_bytes(iw, ih, w, h));
        let need = image.working_bytes().max(resizing);
        if !held.grow_bulk(host, need.saturating_sub(header)) {
            return Err(refused("decoding it", need));
        }
        if !self.working.grow_bulk(host, out) {
            return Err(refused("its pixel values", out));
        }
        self.planned += out;
        let rgb = image.decode().map_err(bad)?;
        // Appended in place: no copy of each image's 18 MB (1024x768) of pixel values.
        process_into(&rgb, cfg, self.backend, &mut self.pv).map_err(bad)
    }
}

/// Process `images` within `stops`: the batch, or the value the guest gets; a trap when the
/// episode's fuel is spent.
fn run(
    images: &[Vec<u8>],
    options: &ImageOptions,
    stops: &Stops,
    working: &mut Reservation,
) -> wasmtime::Result<Result<Batch, Error>> {
    let bad = |e: String| Error::InvalidArgument(e);
    if images.len() > MAX_IMAGES_PER_CALL {
        return Ok(Err(bad(format!(
            "process-images got {} images; at most {MAX_IMAGES_PER_CALL} per call",
            images.len()
        ))));
    }
    let backend = match &options.backend {
        Some(b) => match Backend::parse(b) {
            Ok(b) => b,
            Err(e) => return Ok(Err(bad(e.to_string()))),
        },
        None => Backend::default(),
    };
    let cfg = match &options.config {
        Some(text) => match serde_json::from_str::<serde_json::Value>(text) {
            Ok(v) => match Qwen2VlConfig::from_json(&v) {
                Ok(c) => c,
                Err(e) => return Ok(Err(bad(e.to_string()))),
            },
            Err(e) => return Ok(Err(bad(format!("image-options.config is not JSON: {e}")))),
        },
        None => Qwen2VlConfig::default(),
    };
    let mut row_len = 3 * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size;
    let mut batch = Images {
        cfg,
        backend,
        tensor_bytes: stops.tensor_bytes,
        planned: 0,
        pv: Vec::new(),
        working,
        host: &stops.host,
    };
    let (mut grids, mut tokens) = (Vec::new(), Vec::new());
    // This call's CPU so far, charged image by image against the episode's fuel.
    let mut spent = Duration::ZERO;
    for (i, bytes) in images.iter().enumerate() {
        if let Some(e) = stops.past(i) {
            return Ok(Err(e));
        }
        stops.out_of_fuel(spent)?;
        let (added, cpu) = timed(|| batch.add(i, bytes));
        spent += cpu;
        let p = match added {
            Ok(p) => p,
            Err(e) => return Ok(Err(e)),
        };
        tokens.push(p.tokens(batch.cfg.merge_size) as u32);
        grids.extend(p.grid_thw);
        row_len = p.row_len;
    }
    stops.out_of_fuel(spent)?;
    Ok(Ok((batch.pv, row_len, grids, tokens)))
}

impl vision::Host for TensorView<'_> {
    async fn process_images(
        &mut self,
        images: Vec<Vec<u8>>,
        options: ImageOptions,
    ) -> wasmtime::Result<Result<ProcessedImages, Error>> {
        let dropped = Arc::new(AtomicBool::new(false));
        let _stop_when_dropped = SetOnDrop(dropped.clone());
        let stops = Stops {
            tensor_bytes: self.tensor_budget(),
            deadline: self.call.deadline,
            fuel_left: self
                .call
                .limits
                .fuel
                .map(|fuel| fuel.saturating_sub(fuel_for(self.call.host_cpu))),
            dropped,
            host: self.services.host_memory().clone(),
        };
        // CPU-heavy: off the async worker, so other episodes' I/O keeps going. The pixel
        // values' reservation is held until the results are admitted as tensors (which reserve
        // their own bytes), then given back.
        let ((batch, _working), cpu) = offload(move || {
            let mut working = Reservation::default();
            (run(&images, &options, &stops, &mut working), working)
        })
        .await?;
        self.call.charge_host(cpu);
        let (pv, row_len, grids, tokens) = match batch? {
            Ok(b) => b,
            Err(e) => return Ok(Err(e)),
        };
        let device = self.services.device().clone();
        let rows = pv.len() / row_len.max(1);
        let n = tokens.len();
        let pixel_values = HostTensor::new_on(TensorData::F32(pv), vec![rows, row_len], &device)?;
        let grid = HostTensor::new_on(TensorData::I64(grids), vec![n, 3], &device)?;
        let pixel_values = match self.admit(pixel_values)? {
            Ok(h) => h,
            Err(e) => return Ok(Err(e)),
        };
        let image_grid_thw = match self.admit(grid)? {
            Ok(h) => h,
            Err(e) => return Ok(Err(e)),
        };
        Ok(Ok(ProcessedImages {
            pixel_values,
            image_grid_thw,
            tokens,
        }))
    }
}
