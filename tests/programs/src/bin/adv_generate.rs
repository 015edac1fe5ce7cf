//! Calls generate `data["calls"]` times (default 100,000), ignoring every error. With
//! `data["metadata"]` (any JSON): one call with that request metadata, failing the episode
//! with the call's result.
use rollbox_sdk::{Episode, GenConfig, ModelRequest, Output, Workflow, engine};
struct Flood;
impl Workflow for Flood {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let n = e.data["calls"].as_u64().unwrap_or(100_000);
        let mut req = ModelRequest {
            rid: String::new(),
            input_ids: vec![1, 2, 3],
            gconfig: GenConfig {
                max_new_tokens: 4,
                ..GenConfig::default()
            },
            image_data: Vec::new(),
            metadata: "{}".into(),
        };
        if let Some(m) = e.data.get("metadata") {
            req.metadata = m.to_string();
            return Err(format!(
                "one call: {:?}",
                engine::generate(&req).map(|r| r.output_tokens)
            )
            .into());
        }
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
