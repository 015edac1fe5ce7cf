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
use rollbox_sdk::trajectory::scored_single_turn;
use rollbox_sdk::{Episode, Error, ModelRequest, Output, Workflow, engine};

struct Rlvr;

impl Workflow for Rlvr {
    fn run_episode(episode: Episode) -> Result<Option<Output>, Error> {
        let reward_name = episode.config["reward"].as_str().unwrap_or("math");
        let input_ids =
            tokenizer::apply_chat_template(&episode.messages()?, &episode.chat_options())?;
        let resp = engine::generate(&ModelRequest::new(input_ids, episode.gconfig()?))?;
        Ok(Some(scored_single_turn(&episode, reward_name, &resp)?))
    }
}

rollbox_sdk::export_workflow!(Rlvr);
