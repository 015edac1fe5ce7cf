//! Calls generate `data["calls"]` times (default 100,000), ignoring every error.
use rollbox_sdk::{Episode, GenConfig, ModelRequest, Output, Workflow, engine};
struct Flood;
impl Workflow for Flood {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let n = e.data["calls"].as_u64().unwrap_or(100_000);
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
        let mut ok = 0u64;
        for _ in 0..n {
            if engine::generate(&req).is_ok() {
                ok += 1;
            }
        }
        Err(format!("finished {n} calls, {ok} succeeded").into())
    }
}
rollbox_sdk::export_workflow!(Flood);
fn main() {}
