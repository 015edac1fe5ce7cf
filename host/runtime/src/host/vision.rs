//! Host side of the `vision` interface: images decoded and preprocessed natively
//! (`rollbox-vision`), results handed back as tensors under the episode's tensor limits.
//! A bad image or option is an `invalid-argument` value naming it, never a trap. The work runs
//! on the blocking pool, stops between images once the episode's deadline has passed
//! (`timeout`), and its CPU time is charged to the episode (`host_work`).

use rollbox_tensor::{HostTensor, TensorData};
use rollbox_vision::{Backend, Qwen2VlConfig, decode, process_into, smart_resize};

use std::time::Instant;

use crate::bindings::types::Error;
use crate::bindings::vision::{self, ImageOptions, ProcessedImages};
use crate::budget::{Reservation, host_memory};
use crate::episode::EpisodeState;
use crate::host_work::{offload, past_deadline};

/// Images one call accepts.
pub const MAX_IMAGES_PER_CALL: usize = 64;

/// The processed images of one call: `pixel_values` rows, grids and token counts.
type Batch = (Vec<f32>, usize, Vec<i64>, Vec<u32>);

/// Process `images` within `budget` tensor bytes, stopping between images once `deadline`
/// has passed (the episode timed out or was dropped: nobody waits for the rest).
fn run(
    images: &[Vec<u8>],
    options: &ImageOptions,
    budget: usize,
    deadline: Instant,
    working: &mut Reservation,
) -> Result<Batch, Error> {
    let bad = |e: String| Error::InvalidArgument(e);
    if images.len() > MAX_IMAGES_PER_CALL {
        return Err(bad(format!(
            "process-images got {} images; at most {MAX_IMAGES_PER_CALL} per call",
            images.len()
        )));
    }
    let backend = match &options.backend {
        Some(b) => Backend::parse(b).map_err(|e| bad(e.to_string()))?,
        None => Backend::default(),
    };
    let cfg = match &options.config {
        Some(text) => {
            let v: serde_json::Value = serde_json::from_str(text)
                .map_err(|e| bad(format!("image-options.config is not JSON: {e}")))?;
            Qwen2VlConfig::from_json(&v).map_err(|e| bad(e.to_string()))?
        }
        None => Qwen2VlConfig::default(),
    };
    let (mut pv, mut grids, mut tokens) = (Vec::new(), Vec::new(), Vec::new());
    let mut row_len = 3 * cfg.temporal_patch_size * cfg.patch_size * cfg.patch_size;
    let mut planned = 0usize;
    for (i, bytes) in images.iter().enumerate() {
        if Instant::now() >= deadline {
            return Err(past_deadline(&format!("process-images (at image {i})")));
        }
        let img = decode(bytes).map_err(|e| bad(format!("image {i}: {e}")))?;
        // The output's size is known before any resampling: refuse what would pass the
        // episode's tensor bytes instead of allocating it.
        let (h, w) = smart_resize(
            img.height,
            img.width,
            cfg.factor(),
            cfg.min_pixels,
            cfg.max_pixels,
        )
        .map_err(|e| bad(format!("image {i}: {e}")))?;
        planned = h
            .checked_mul(w)
            .and_then(|n| n.checked_mul(3 * cfg.temporal_patch_size * 4))
            .and_then(|n| n.checked_add(planned))
            .filter(|&n| n <= budget)
            .ok_or_else(|| {
                Error::LimitExceeded(format!(
                    "image {i}: the pixel values would pass the {budget} tensor bytes this episode has left (`max_tensor_bytes`); lower max_pixels or raise that limit"
                ))
            })?;
        // The decoded image and this image's pixel values, from the host-wide budget.
        let host = host_memory();
        let bytes = img
            .width
            .saturating_mul(img.height)
            .saturating_mul(3)
            .saturating_add(
                h.saturating_mul(w)
                    .saturating_mul(3 * cfg.temporal_patch_size * 4),
            );
        if !working.grow_bulk(host, bytes) {
            return Err(Error::LimitExceeded(
                host.exhausted(&format!("process-images (image {i})"), bytes),
            ));
        }
        // Appended in place: no copy of each image's 18 MB (1024x768) of pixel values.
        let p = process_into(&img, &cfg, backend, &mut pv)
            .map_err(|e| bad(format!("image {i}: {e}")))?;
        tokens.push(p.tokens(cfg.merge_size) as u32);
        grids.extend(p.grid_thw);
        row_len = p.row_len;
    }
    Ok((pv, row_len, grids, tokens))
}

impl vision::Host for EpisodeState {
    async fn process_images(
        &mut self,
        images: Vec<Vec<u8>>,
        options: ImageOptions,
    ) -> wasmtime::Result<Result<ProcessedImages, Error>> {
        // CPU-heavy: off the async worker, so other episodes' I/O keeps going.
        let budget = self.tensor_budget();
        let deadline = self.ctx.deadline;
        // The working memory's reservation is held until the results are admitted as
        // tensors (which reserve their own bytes), then given back.
        let ((batch, _working), cpu) = offload(move || {
            let mut working = Reservation::default();
            (
                run(&images, &options, budget, deadline, &mut working),
                working,
            )
        })
        .await?;
        self.ctx.charge_host(cpu);
        let (pv, row_len, grids, tokens) = match batch {
            Ok(b) => b,
            Err(e) => return Ok(Err(e)),
        };
        let device = self.ctx.services.device().clone();
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
