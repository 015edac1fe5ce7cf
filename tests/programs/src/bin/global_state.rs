//! Keeps per-instance global state across a host call: two concurrent episodes must each see
//! only their own (a fresh instance per episode).
use rollbox_sdk::tensor::{Tensor, TensorData};
use rollbox_sdk::{Episode, GenConfig, ModelRequest, Output, Workflow, engine};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
static CALLS: AtomicU64 = AtomicU64::new(0);
static TAG: Mutex<String> = Mutex::new(String::new());
struct Global;
impl Workflow for Global {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let calls = CALLS.fetch_add(1, Ordering::SeqCst) + 1;
        let mine = e.data["tag"].as_str().unwrap_or("").to_string();
        let before = std::mem::replace(&mut *TAG.lock().map_err(|e| e.to_string())?, mine.clone());
        let req = ModelRequest {
            rid: String::new(),
            input_ids: vec![1, 2, 3],
            gconfig: GenConfig {
                max_new_tokens: 4,
                ..GenConfig::default()
            },
            image_data: Vec::new(),
            metadata: "{}".into(),
        };
        engine::generate(&req).map_err(|e| e.to_string())?;
        let after = TAG.lock().map_err(|e| e.to_string())?.clone();
        let t = Tensor::create(&TensorData::I32(vec![calls as i32]), &[1])
            .map_err(|e| e.to_string())?;
        let mut out = Output::new(vec![("calls".into(), t)]);
        out.metadata =
            serde_json::json!({"calls": calls, "before": before, "after": after, "mine": mine});
        Ok(Some(out))
    }
}
rollbox_sdk::export_workflow!(Global);
fn main() {}
