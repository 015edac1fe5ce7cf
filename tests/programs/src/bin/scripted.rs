//! A workflow scripted by its row, for rollout-controller tests: one generate call, then
//! `data["rewards"][sample_index]` as the reward; returns nothing (rejected) when the sample
//! index is in `data["reject"]`, and fails when it is in `data["fail"]`. With
//! `data["extra"][sample_index] = {"dtype": "i32"|"f32", "shape": [..]}` it adds a zero-filled
//! tensor `extra` of that dtype and shape (hostile groups: dtypes or padded sizes that cannot
//! be assembled). Its metadata is `{"sample": i, "note": data["note"]}`. `data["rid"]` sets the
//! request's rid (a forged one, for routing tests); `data["message"]` is a failure's message,
//! also printed to stdout (hostile text, for log-forging tests).
use rollbox_sdk::tensor::{Tensor, TensorData};
use rollbox_sdk::trajectory::single_turn;
use rollbox_sdk::{Episode, GenConfig, ModelRequest, Output, Workflow, engine};
struct Scripted;
fn has(v: &serde_json::Value, i: u32) -> bool {
    v.as_array()
        .is_some_and(|a| a.iter().any(|x| x.as_u64() == Some(u64::from(i))))
}
impl Workflow for Scripted {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let i = e.sample_index;
        if has(&e.data["fail"], i) {
            let message = e.data["message"].as_str().unwrap_or("scripted failure");
            print!("{message}");
            return Err(format!("{message} of sample {i}").into());
        }
        if has(&e.data["reject"], i) {
            return Ok(None);
        }
        let resp = engine::generate(&ModelRequest {
            rid: e.data["rid"].as_str().unwrap_or_default().to_string(),
            input_ids: vec![1, 2, 3],
            gconfig: GenConfig::default(),
            image_data: Vec::new(),
            metadata: "{}".into(),
        })
        .map_err(|e| e.to_string())?;
        let reward = e.data["rewards"][i as usize].as_f64().unwrap_or(0.0) as f32;
        let mut out = single_turn(&resp, reward).map_err(|e| e.to_string())?;
        out.metadata = serde_json::json!({"sample": i, "note": e.data["note"]});
        let extra = &e.data["extra"][i as usize];
        if let Some(shape) = extra["shape"].as_array() {
            let shape: Vec<u32> = shape
                .iter()
                .map(|d| d.as_u64().unwrap_or(0) as u32)
                .collect();
            let n: usize = shape.iter().map(|&d| d as usize).product();
            let data = match extra["dtype"].as_str() {
                Some("f32") => TensorData::F32(vec![0.0; n]),
                _ => TensorData::I32(vec![0; n]),
            };
            let t = Tensor::create(&data, &shape).map_err(|e| format!("{e:?}"))?;
            out.tensors.push(("extra".into(), t));
        }
        Ok(Some(out))
    }
}
rollbox_sdk::export_workflow!(Scripted);
fn main() {}
