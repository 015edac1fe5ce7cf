//! Builds two trajectories of different lengths and rewards (`data["rewards"]`) from fixed
//! responses and merges them into one episode output with `trajectory::merge`.
use rollbox_sdk::trajectory::{TrajectoryBuilder, merge};
use rollbox_sdk::{Episode, ModelResponse, Output, StopReason, Workflow};
struct MultiRow;
fn response(prompt: &[u32], output: &[u32]) -> ModelResponse {
    ModelResponse {
        input_tokens: prompt.to_vec(),
        output_tokens: output.to_vec(),
        output_logprobs: vec![-0.5; output.len()],
        output_versions: vec![4; output.len()],
        stop_reason: StopReason::Stop,
        latency: 0.0,
        ttft: 0.0,
    }
}
impl Workflow for MultiRow {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let r: Vec<f32> = e.data["rewards"]
            .as_array()
            .ok_or("rewards: [a, b]")?
            .iter()
            .map(|x| x.as_f64().unwrap_or(0.0) as f32)
            .collect();
        let mut a = TrajectoryBuilder::new();
        a.prompt(&[1, 2]).output(&response(&[1, 2], &[3, 4, 5]));
        let mut b = TrajectoryBuilder::new();
        b.prompt(&[1, 2]).output(&response(&[1, 2], &[6]));
        let rows = [
            a.build(r[0]).map_err(|e| e.to_string())?,
            b.build(r[1]).map_err(|e| e.to_string())?,
        ];
        Ok(Some(
            merge(&rows, r.iter().sum::<f32>() / 2.0).map_err(|e| e.to_string())?,
        ))
    }
}
rollbox_sdk::export_workflow!(MultiRow);
fn main() {}
