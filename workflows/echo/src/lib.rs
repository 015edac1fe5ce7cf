//! `echo`: the smallest useful rollbox workflow.
//!
//! Tokens in, trajectory out: it reads prompt token ids from `data["input_ids"]`, asks the
//! engine for one sample, optionally scores it with the reward named in the config, and
//! returns AReaL's tensor layout for one trajectory (`[1, L]` per-token keys).
//!
//! Config (all optional): `{"max_new_tokens": 64, "temperature": 1.0, "greedy": false,
//! "reward": "math"}`. Without a reward the trajectory's reward is 0.0.

use rollbox_sdk::rewards;
use rollbox_sdk::tensor::{Tensor, TensorData};
use rollbox_sdk::{
    Episode, GenConfig, ModelRequest, Output, RewardInput, StopReason, Workflow, engine, log,
};

struct Echo;

fn tensor(data: TensorData, shape: &[u32]) -> Result<Tensor, String> {
    Tensor::create(&data, shape).map_err(|e| e.to_string())
}

impl Workflow for Echo {
    fn run_episode(episode: Episode) -> Result<Option<Output>, String> {
        let prompt: Vec<u32> = episode.data["input_ids"]
            .as_array()
            .ok_or("the row needs `input_ids`, an array of token ids")?
            .iter()
            .map(|v| {
                v.as_u64()
                    .and_then(|x| u32::try_from(x).ok())
                    .ok_or("input_ids must be non-negative integers")
            })
            .collect::<Result<_, _>>()?;
        let cfg = &episode.config;
        let gconfig = GenConfig {
            max_new_tokens: cfg["max_new_tokens"].as_u64().unwrap_or(64) as u32,
            temperature: cfg["temperature"].as_f64().unwrap_or(1.0) as f32,
            greedy: cfg["greedy"].as_bool().unwrap_or(false),
            seed: Some(episode.seed),
            ..GenConfig::default()
        };
        let resp = engine::generate(&ModelRequest {
            rid: String::new(),
            input_ids: prompt.clone(),
            gconfig,
            image_data: Vec::new(),
            metadata: "{}".into(),
        })
        .map_err(|e| e.to_string())?;

        let reward = match cfg["reward"].as_str() {
            Some(name) => {
                let scored = rewards::score(
                    name,
                    &RewardInput {
                        prompt: String::new(),
                        completion: String::new(),
                        prompt_ids: prompt.clone(),
                        completion_ids: resp.output_tokens.clone(),
                        data: episode.data.to_string(),
                    },
                )
                .map_err(|e| e.to_string())?;
                scored.value as f32
            }
            None => 0.0,
        };
        log::stat("reward", f64::from(reward));

        let (p, o) = (prompt.len(), resp.output_tokens.len());
        let len = (p + o) as u32;
        let ids: Vec<i32> = prompt
            .iter()
            .chain(&resp.output_tokens)
            .map(|&t| t as i32)
            .collect();
        let loss_mask: Vec<i32> = std::iter::repeat_n(0, p)
            .chain(std::iter::repeat_n(1, o))
            .collect();
        let logprobs: Vec<f32> = std::iter::repeat_n(0.0, p)
            .chain(resp.output_logprobs.iter().copied())
            .collect();
        let versions: Vec<i32> = std::iter::repeat_n(-1, p)
            .chain(resp.output_versions.iter().copied())
            .collect();
        let truncated = matches!(resp.stop_reason, StopReason::Length);
        let tensors = vec![
            (
                "input_ids".to_string(),
                tensor(TensorData::I32(ids), &[1, len])?,
            ),
            (
                "loss_mask".to_string(),
                tensor(TensorData::I32(loss_mask), &[1, len])?,
            ),
            (
                "logprobs".to_string(),
                tensor(TensorData::F32(logprobs), &[1, len])?,
            ),
            (
                "versions".to_string(),
                tensor(TensorData::I32(versions), &[1, len])?,
            ),
            (
                "attention_mask".to_string(),
                tensor(TensorData::Bool(vec![true; len as usize]), &[1, len])?,
            ),
            (
                "rewards".to_string(),
                tensor(TensorData::F32(vec![reward]), &[1])?,
            ),
            (
                "is_truncated".to_string(),
                tensor(TensorData::Bool(vec![truncated]), &[1])?,
            ),
        ];
        let mut out = Output::new(tensors);
        out.metadata = serde_json::json!({
            "prompt_len": p,
            "output_len": o,
            "stop_reason": match resp.stop_reason {
                StopReason::Stop => "stop",
                StopReason::Length => "length",
                StopReason::ToolCalls => "tool_calls",
                StopReason::Abort => "abort",
            },
        });
        Ok(Some(out))
    }
}

rollbox_sdk::export_workflow!(Echo);
