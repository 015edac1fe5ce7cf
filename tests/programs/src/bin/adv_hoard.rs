//! With `data["hoard"]`: creates 4 MiB f32 tensors and keeps every one alive until the host
//! refuses one, then fails with the refusal. Otherwise a normal episode: one generate call on
//! `[1, 2, 3]`, reward 1.0.
use rollbox_sdk::tensor::{Tensor, TensorData};
use rollbox_sdk::trajectory::single_turn;
use rollbox_sdk::{Episode, GenConfig, ModelRequest, Output, Workflow, engine};
struct Hoard;
impl Workflow for Hoard {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        if e.data["hoard"].as_bool() == Some(true) {
            let mut held = Vec::new();
            let chunk = vec![1.0f32; 1 << 20];
            loop {
                match Tensor::create(&TensorData::F32(chunk.clone()), &[1 << 20]) {
                    Ok(t) => held.push(t),
                    Err(err) => {
                        return Err(format!("refused after {} tensors: {err:?}", held.len()).into());
                    }
                }
            }
        }
        let resp = engine::generate(&ModelRequest {
            rid: String::new(),
            input_ids: vec![1, 2, 3],
            gconfig: GenConfig::default(),
            image_data: Vec::new(),
            metadata: "{}".into(),
        })
        .map_err(|e| e.to_string())?;
        Ok(Some(single_turn(&resp, 1.0).map_err(|e| e.to_string())?))
    }
}
rollbox_sdk::export_workflow!(Hoard);
fn main() {}
