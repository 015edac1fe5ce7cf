//! `rlvr`: AReaL's `RLVRWorkflow` (reinforcement learning with verifiable rewards) as a
//! rollbox component.
//!
//! For one row: the prompt is the row's chat messages, or its text as one user message (see
//! `rollbox_sdk::prompt_messages`: `messages`, `prompt`, `question`, `problem`), through the
//! host chat template
//! (`add_generation_prompt`, `enable_thinking` passed through); one sample is generated with
//! the configured sampling settings plus the tokenizer's stop and pad ids; the reward component
//! named in the config scores `(decoded prompt, decoded completion with stop tokens kept, prompt
//! ids, completion ids, row)`; the reward is recorded as the `reward` stat; the output is AReaL's
//! tensor layout (`input_tokens + output_tokens`, masks, logprobs, versions, `rewards [1]`) plus
//! `is_truncated`. It never rejects; a reward error fails the episode.
//!
//! Config: `{"reward": "math", "gconfig": {"max_new_tokens": 512, "temperature": 1.0},
//! "enable_thinking": false}` (`reward` defaults to `math`), and for rows as datasets ship
//! them: `prompt_key` (the column holding the prompt), `prompt_suffix` (appended to a text
//! prompt, e.g. AReaL's GSM8K `"\nPlease put your final answer within \\boxed{}."`),
//! `system_prompt`, `answer_key` (the column the reward reads as `answer`).

use rollbox_sdk::tokenizer;
use rollbox_sdk::trajectory::single_turn;
use rollbox_sdk::{
    Episode, Error, ModelRequest, Output, RewardInput, Workflow, engine, log, rewards,
};
use serde_json::json;

struct Rlvr;

impl Workflow for Rlvr {
    fn run_episode(episode: Episode) -> Result<Option<Output>, Error> {
        let cfg = &episode.config;
        let reward_name = cfg["reward"].as_str().unwrap_or("math");
        let input_ids =
            tokenizer::apply_chat_template(&episode.messages()?, &episode.chat_options())?;
        let gconfig = episode.gconfig()?;
        let resp = engine::generate(&ModelRequest::new(input_ids.clone(), gconfig))?;
        let prompt = tokenizer::decode(&input_ids, false)?;
        let completion = tokenizer::decode(&resp.output_tokens, false)?;
        let input = RewardInput {
            prompt,
            completion,
            prompt_ids: resp.input_tokens.clone(),
            completion_ids: resp.output_tokens.clone(),
            data: episode.reward_data()?,
        };
        let scored = rewards::score(reward_name, &input)?;
        let RewardInput {
            prompt, completion, ..
        } = input;
        log::stat("reward", scored.value);
        let mut out = single_turn(&resp, scored.value as f32)?;
        out.metadata = json!({
            "prompt": prompt,
            "completion": completion,
            "stop_reason": resp.stop_reason.as_str(),
            "reward_timed_out": scored.timed_out,
        });
        Ok(Some(out))
    }
}

rollbox_sdk::export_workflow!(Rlvr);
