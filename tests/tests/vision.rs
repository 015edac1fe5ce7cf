//! The `vision` interface through the real guest boundary (issue 22): a workflow hands the host
//! images as base64 and gets `pixel_values` and `image_grid_thw` tensors back, equal to
//! `rollbox-vision` natively (itself bit-identical to transformers, `host/vision/tests`); bad
//! images and options are error values naming the image, never a host fault.

use std::path::Path;
use std::sync::Arc;

use base64::Engine as _;
use rollbox_runtime::{
    EpisodeOutcome, EpisodeReport, EpisodeRequest, Limits, Scope, Trajectory, WorkflowComponent,
};
use rollbox_tensor::TensorData;
use rollbox_tests::components as c;
use rollbox_tests::runtime;
use serde_json::{Value, json};

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("fixtures/vision/images")
            .join(name),
    )
    .expect("fixture image")
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

async fn probe(data: Value) -> EpisodeReport {
    let rt = runtime();
    let w = rt
        .load::<WorkflowComponent>(Path::new(c::VISION_PROBE))
        .expect("probe loads");
    rt.run_episode(
        &Scope::default(),
        &w,
        EpisodeRequest::new("r0-s0", data),
        Arc::new(Limits::default()),
    )
    .await
}

fn accepted(r: &EpisodeReport) -> &Trajectory {
    match &r.outcome {
        EpisodeOutcome::Accepted(t) => t,
        other => panic!("accepted expected, got {} ({other:?})", other.kind()),
    }
}

#[tokio::test]
async fn images_cross_as_tensors_equal_to_the_native_processor() {
    let png = fixture("rgb.png");
    let gray = fixture("gray.png");
    for backend in ["torchvision", "pil"] {
        let data = json!({
            "images": [b64(&png), format!("data:image/png;base64,{}", b64(&gray))],
            "backend": backend,
            "config": {"max_pixels": 28 * 28 * 16},
        });
        let r = probe(data).await;
        let t = accepted(&r);
        let cfg = rollbox_vision::Qwen2VlConfig {
            max_pixels: 28 * 28 * 16,
            ..Default::default()
        };
        let b = rollbox_vision::Backend::parse(backend).expect("backend");
        let (mut want, mut grids, mut tokens) = (Vec::new(), Vec::new(), Vec::new());
        for bytes in [&png, &gray] {
            let p =
                rollbox_vision::process(&rollbox_vision::decode(bytes).expect("decode"), &cfg, b)
                    .expect("process");
            want.extend_from_slice(&p.pixel_values);
            grids.extend(p.grid_thw);
            tokens.push(p.tokens(2));
        }
        let pv = t.get("pixel_values").expect("pixel_values");
        assert_eq!(pv.shape(), &[want.len() / 1176, 1176]);
        match pv.data().expect("data") {
            TensorData::F32(v) => assert!(v == want, "{backend}: pixel values differ"),
            other => panic!("{other:?}"),
        }
        match t.get("image_grid_thw").expect("grid").data().expect("data") {
            TensorData::I64(v) => assert_eq!(v, grids),
            other => panic!("{other:?}"),
        }
        assert_eq!(t.metadata()["tokens"], json!(tokens));
    }
}

#[tokio::test]
async fn bad_images_and_options_are_error_values() {
    let png = b64(&fixture("rgb.png"));
    for (data, want) in [
        (
            json!({"images": [png.clone(), "bm90IGFuIGltYWdl"]}),
            "image 1: cannot decode",
        ),
        (json!({"images": ["%%%"]}), "image 0: cannot decode"),
        (
            json!({"images": [png.clone()], "backend": "cv2"}),
            "backend `cv2`",
        ),
        (
            json!({"images": [png.clone()], "config": {"min_pixels": -3}}),
            "`min_pixels`",
        ),
        (
            json!({"images": vec![png.clone(); 65]}),
            "at most 64 per call",
        ),
        (
            json!({"images": [b64(&rollbox_vision::testing::png_header(20_000, 10_000))]}),
            "image 0: the image is 20000x10000 = 200000000 pixels",
        ),
    ] {
        let r = probe(data).await;
        let err = accepted(&r).metadata()["error"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(
            err.contains("InvalidArgument") && err.contains(want),
            "{want}: {err}"
        );
    }
}

/// A config that asks for a huge output from a tiny image is refused from the planned size,
/// before anything is resampled or allocated (50 megapixels x 6 floats: over the default 1 GiB).
#[tokio::test]
async fn an_output_over_the_tensor_budget_is_refused_before_allocation() {
    let png = b64(&fixture("rgb.png"));
    let r = probe(
        json!({"images": [png], "config": {"min_pixels": 50_000_000, "max_pixels": 50_000_000}}),
    )
    .await;
    let err = accepted(&r).metadata()["error"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    assert!(
        err.contains("LimitExceeded") && err.contains("(`max_tensor_bytes`)"),
        "{err}"
    );
}

/// Image work is bounded by the episode (issue 31, part 2): past its deadline the host stops
/// between images (before, a 2-image episode with a 3 s limit held the host 13-25 s), and with
/// fuel metering on, its CPU time is taken from the episode's fuel, image by image (issue 52).
/// Timed against one image measured in the same run: the whole runtime, blocking pool
/// included, is shut down within a few images' time (8 allowed, for a loaded machine), not
/// sixteen.
#[test]
fn image_work_stops_at_the_deadline_and_is_charged_to_fuel() {
    use std::time::{Duration, Instant};
    let image = rollbox_tests::gradient_png_base64(1024, 1024);
    async fn images(
        rt: &rollbox_runtime::Runtime,
        image: &str,
        n: usize,
        limits: Limits,
    ) -> EpisodeReport {
        let w = rt
            .load::<WorkflowComponent>(Path::new(c::VISION_PROBE))
            .expect("probe loads");
        let data = json!({"images": vec![image; n]});
        rt.run_episode(
            &Scope::default(),
            &w,
            EpisodeRequest::new("r0-s0", data),
            Arc::new(limits),
        )
        .await
    }
    let episode = |rt, n, limits| images(rt, &image, n, limits);
    let tokio = || {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .expect("tokio")
    };
    // One image, for scale (and the host CPU it costs).
    let rt = rollbox_tests::runtime();
    let start = Instant::now();
    let one = tokio().block_on(episode(&rt, 1, Limits::default()));
    let per_image = start.elapsed();
    accepted(&one);
    assert!(one.host_cpu > Duration::ZERO);
    // Sixteen images under a deadline of half an image: a timeout, and everything (the
    // blocking pool's work included) over within a few images' time.
    let limits = Limits {
        timeout: per_image / 2,
        ..Limits::default()
    };
    let start = Instant::now();
    let pool = tokio();
    let r = pool.block_on(episode(&rt, 16, limits));
    drop(pool);
    let took = start.elapsed();
    assert_eq!(r.outcome.kind(), "timeout");
    assert!(
        took < per_image * 12,
        "16 images stopped after {took:?} (one image: {per_image:?})"
    );
    // With fuel: one image's host CPU passes a budget the probe alone stays well within.
    let fuel = Some((one.host_cpu.as_nanos() as u64 / 4).max(1));
    let rt = rollbox_tests::runtime_with(
        Some(Arc::new(rollbox_tests::fixed_backend(Duration::ZERO))),
        true,
    );
    let r = tokio().block_on(episode(
        &rt,
        1,
        Limits {
            fuel,
            ..Limits::default()
        },
    ));
    assert_eq!(r.outcome.kind(), "out_of_fuel", "host CPU {:?}", r.host_cpu);
    // Charged image by image (issue 52): sixteen images under the same budget stop after the
    // image that spent it, not after all sixteen (before, 24 images ran 11.3 s of host CPU past
    // a 20 ms budget, and only then ended `out_of_fuel`).
    let r = tokio().block_on(episode(
        &rt,
        16,
        Limits {
            fuel,
            ..Limits::default()
        },
    ));
    assert_eq!(r.outcome.kind(), "out_of_fuel", "host CPU {:?}", r.host_cpu);
    assert!(
        r.host_cpu < one.host_cpu * 4,
        "16 images took {:?} of host CPU past the fuel (one image: {:?})",
        r.host_cpu,
        one.host_cpu
    );
}
