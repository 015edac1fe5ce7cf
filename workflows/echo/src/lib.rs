//! `echo`: the smallest useful rollbox workflow.
//!
//! Tokens in, trajectory out: it reads prompt token ids from `data["input_ids"]`, asks the
//! engine for one sample, optionally scores it with the reward named in the config, and
//! returns AReaL's tensor layout for one trajectory (`[1, L]` per-token keys).
//!
//! Config (all optional): `{"max_new_tokens": 64, "temperature": 1.0, "greedy": false,
//! "reward": "math"}`. Without a reward the trajectory's reward is 0.0.

use rollbox_sdk::rewards;
use rollbox_sdk::trajectory::single_turn;
use rollbox_sdk::{
    Episode, Error, GenConfig, ModelRequest, Output, RewardInput, Workflow, engine, log,
};

struct Echo;

impl Workflow for Echo {
    fn run_episode(episode: Episode) -> Result<Option<Output>, Error> {
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
        let resp = engine::generate(&ModelRequest::new(prompt.clone(), gconfig))?;

        let reward = match cfg["reward"].as_str() {
            Some(name) => {
                let scored = rewards::score(
                    name,
                    &RewardInput {
                        prompt: String::new(),
                        completion: String::new(),
                        prompt_ids: prompt.clone(),
                        completion_ids: resp.output_tokens.clone(),
                        data: episode.data_json.clone(),
                    },
                )?;
                scored.value as f32
            }
            None => 0.0,
        };
        log::stat("reward", f64::from(reward));

        let mut out = single_turn(&resp, reward)?;
        out.metadata = serde_json::json!({
            "prompt_len": prompt.len(),
            "output_len": resp.output_tokens.len(),
            "stop_reason": resp.stop_reason.as_str(),
        });
        Ok(Some(out))
    }
}

rollbox_sdk::export_workflow!(Echo);
