//! Processes the images in `data["images"]` (base64 strings) with `data["options"]` through
//! the host's `vision` interface; returns `pixel_values` and `image_grid_thw`, and the token
//! counts or the error in the metadata.
use rollbox_sdk::tensor::{Tensor, TensorData};
use rollbox_sdk::vision::{self, ImageOptions};
use rollbox_sdk::{Episode, Output, Workflow};
struct Probe;
impl Workflow for Probe {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let images: Vec<Vec<u8>> = e.data["images"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|v| v.as_str().unwrap_or("").as_bytes().to_vec())
                    .collect()
            })
            .unwrap_or_default();
        let options = ImageOptions {
            backend: e.data["backend"].as_str().map(str::to_string),
            config: e.data.get("config").map(|c| c.to_string()),
        };
        match vision::process_images(&images, &options) {
            Ok(p) => {
                let mut out = Output::new(vec![
                    ("pixel_values".into(), p.pixel_values),
                    ("image_grid_thw".into(), p.image_grid_thw),
                ]);
                out.metadata = serde_json::json!({"tokens": p.tokens});
                Ok(Some(out))
            }
            Err(err) => {
                let t =
                    Tensor::create(&TensorData::I32(vec![0]), &[1]).map_err(|e| e.to_string())?;
                let mut out = Output::new(vec![("x".into(), t)]);
                out.metadata = serde_json::json!({"error": format!("{err:?}")});
                Ok(Some(out))
            }
        }
    }
}
rollbox_sdk::export_workflow!(Probe);
fn main() {}
