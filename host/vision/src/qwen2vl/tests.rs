use super::*;

#[test]
fn smart_resize_follows_transformers() {
    let f = 28;
    let (mn, mx) = (56 * 56, 28 * 28 * 1280);
    assert_eq!(smart_resize(97, 203, f, mn, mx), Ok((84, 196)));
    // Python rounds half to even: 42/28 = 1.5 -> 2, 70/28 = 2.5 -> 2.
    assert_eq!(smart_resize(42, 70, f, 28 * 28, mx), Ok((56, 56)));
    assert_eq!(smart_resize(1, 1, f, mn, mx), Ok((56, 56)));
    assert!(
        matches!(smart_resize(10, 2010, f, mn, mx), Err(VisionError::Shape(m)) if m.contains("aspect ratio 201"))
    );
    assert!(smart_resize(10, 2000, f, mn, mx).is_ok());
    assert!(matches!(
        smart_resize(0, 5, f, mn, mx),
        Err(VisionError::Shape(_))
    ));
}

#[test]
fn process_into_appends_what_process_returns() {
    let img = |w: usize, h: usize, seed: usize| {
        let data = (0..w * h * 3).map(|i| (i * 7 + seed * 31) as u8).collect();
        Rgb::new(w, h, data).expect("rgb")
    };
    let cfg = Qwen2VlConfig::default();
    for backend in [Backend::Torchvision, Backend::Pil] {
        let (a, b) = (img(97, 203, 1), img(60, 45, 2));
        let mut out = vec![7.0f32; 3];
        let first = process_into(&a, &cfg, backend, &mut out).expect("a");
        let second = process_into(&b, &cfg, backend, &mut out).expect("b");
        let (pa, pb) = (
            process(&a, &cfg, backend).expect("a"),
            process(&b, &cfg, backend).expect("b"),
        );
        assert_eq!((first.rows, first.grid_thw), (pa.rows(), pa.grid_thw));
        assert_eq!((second.rows, second.row_len), (pb.rows(), pb.row_len));
        assert_eq!(first.tokens(2), pa.tokens(2));
        let expect: Vec<f32> = [vec![7.0; 3], pa.pixel_values, pb.pixel_values].concat();
        assert_eq!(out, expect, "{backend:?}");
    }
}

#[test]
fn config_reads_preprocessor_json_and_names_bad_keys() {
    let c = Qwen2VlConfig::from_json(
        &serde_json::json!({"min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14}),
    )
    .expect("config");
    assert_eq!((c.min_pixels, c.max_pixels), (3136, 12845056));
    let c = Qwen2VlConfig::from_json(
        &serde_json::json!({"size": {"shortest_edge": 100, "longest_edge": 200}}),
    )
    .expect("size");
    assert_eq!((c.min_pixels, c.max_pixels), (100, 200));
    for (bad, key) in [
        (serde_json::json!({"min_pixels": -1}), "min_pixels"),
        (serde_json::json!({"image_mean": [1, 2]}), "image_mean"),
        (
            serde_json::json!({"min_pixels": 10, "max_pixels": 5}),
            "min_pixels",
        ),
        (serde_json::json!({"patch_size": 1000}), "patch_size"),
    ] {
        let e = Qwen2VlConfig::from_json(&bad)
            .expect_err("refused")
            .to_string();
        assert!(e.contains(key), "{e}");
    }
    assert!(Backend::parse("cv2").is_err());
}
