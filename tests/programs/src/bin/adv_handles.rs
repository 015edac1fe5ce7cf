//! Creates `data["count"]` tensors (default 1,000,000) and keeps every handle.
use rollbox_sdk::tensor::{Tensor, TensorData};
use rollbox_sdk::{Episode, Output, Workflow};
struct Handles;
impl Workflow for Handles {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let n = e.data["count"].as_u64().unwrap_or(1_000_000);
        let mut kept = Vec::new();
        for i in 0..n {
            match Tensor::create(&TensorData::I32(vec![i as i32]), &[1]) {
                Ok(t) => kept.push(t),
                // A well-behaved guest would stop here; this one insists once more.
                Err(_) => {
                    let again = Tensor::create(&TensorData::I32(vec![0]), &[1]);
                    return Err(format!("still running after refusal: {}", again.is_ok()).into());
                }
            }
        }
        Ok(Some(Output::new(vec![(
            "t".into(),
            kept.pop().ok_or("no tensors")?,
        )])))
    }
}
rollbox_sdk::export_workflow!(Handles);
fn main() {}
