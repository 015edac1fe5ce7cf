//! Returns AReaL's `loss_mask` as i64 instead of i32; the host must refuse the dict at the
//! boundary, naming the key, the expected and actual dtype/shape, and the fix. With
//! `data["case"] = "multi_modal_rows"`: a multi-modal key in a trajectory of two rows, which a
//! batch could not split back per trajectory.
use rollbox_sdk::tensor::{Tensor, TensorData};
use rollbox_sdk::{Episode, Output, Workflow};
struct BadKeys;
impl Workflow for BadKeys {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        if e.data["case"] == "multi_modal_rows" {
            let ids = Tensor::create(&TensorData::I32(vec![1, 2, 3, 4, 5, 6]), &[2, 3])
                .map_err(|e| e.to_string())?;
            let pixels = Tensor::create(&TensorData::F32(vec![0.5; 8]), &[4, 2])
                .map_err(|e| e.to_string())?;
            return Ok(Some(Output::new(vec![
                ("input_ids".into(), ids),
                ("multi_modal_input.pixel_values".into(), pixels),
            ])));
        }
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
