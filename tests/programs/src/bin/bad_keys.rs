//! Returns AReaL's `loss_mask` as i64 instead of i32; the host must refuse the dict at the
//! boundary, naming the key, the expected and actual dtype/shape, and the fix.
use rollbox_sdk::tensor::{Tensor, TensorData};
use rollbox_sdk::{Episode, Output, Workflow};
struct BadKeys;
impl Workflow for BadKeys {
    fn run_episode(_: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let ids =
            Tensor::create(&TensorData::I32(vec![1, 2, 3]), &[1, 3]).map_err(|e| e.to_string())?;
        let mask =
            Tensor::create(&TensorData::I64(vec![0, 1, 1]), &[1, 3]).map_err(|e| e.to_string())?;
        Ok(Some(Output::new(vec![
            ("input_ids".into(), ids),
            ("loss_mask".into(), mask),
        ])))
    }
}
rollbox_sdk::export_workflow!(BadKeys);
fn main() {}
