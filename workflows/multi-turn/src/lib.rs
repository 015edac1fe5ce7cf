//! `multi-turn`: AReaL's `MultiTurnWorkflow` as a rollbox component — retry with feedback
//! until the reward is positive or the turns run out.
//!
//! Each attempt generates from the whole conversation so far; when the reward is 0 and turns
//! remain, the output (plus eos when it did not end with it) and a feedback turn are appended
//! as tokens — the token delta between the chat with and without the feedback message, computed
//! once, so encode/decode drift cannot creep in. The final reward is multiplied by
//! `turn_discount^(turns - 1)`. Stats `reward` and `num_turns`; outputs carry `turn_ids`.
//!
//! Config: `{"reward": "math", "max_turns": 3, "turn_discount": 0.9, "gconfig": {...},
//! "enable_thinking": false, "feedback": "..."}`; `max_turns > 0` and
//! `0 < turn_discount <= 1` are checked; `prompt_key`, `prompt_suffix`, `system_prompt` and
//! `answer_key` read rows as datasets ship them, as in `rlvr`.

use rollbox_sdk::tokenizer::{self, ChatOptions};
use rollbox_sdk::trajectory::TrajectoryBuilder;
use rollbox_sdk::{
    Episode, Error, ModelRequest, Output, RewardInput, Workflow, engine, log, rewards,
};
use serde_json::{Value, json};

/// The default feedback turn after a zero reward.
const FEEDBACK: &str = "That answer was judged incorrect or could not be read. Reread the question, check your previous steps, and give your final answer again.";

struct MultiTurn;

/// Tokens that a feedback user turn adds after an assistant turn (plus the next assistant
/// header): the difference between the chat with and without it.
fn feedback_ids(feedback: &str, options: &ChatOptions) -> Result<Vec<u32>, Error> {
    let before = json!([{"role": "assistant", "content": "placeholder answer."}]);
    let after = json!([
        {"role": "assistant", "content": "placeholder answer."},
        {"role": "user", "content": feedback}
    ]);
    let without = ChatOptions {
        add_generation_prompt: false,
        ..options.clone()
    };
    let a = tokenizer::apply_chat_template(&before.to_string(), &without)?;
    let b = tokenizer::apply_chat_template(&after.to_string(), options)?;
    if !b.starts_with(&a) {
        return Err(
            "the chat template does not extend a chat by appending; multi-turn needs one that does"
                .into(),
        );
    }
    Ok(b[a.len()..].to_vec())
}

impl Workflow for MultiTurn {
    fn run_episode(episode: Episode) -> Result<Option<Output>, Error> {
        let cfg = &episode.config;
        let reward_name = cfg["reward"].as_str().unwrap_or("math");
        let max_turns = cfg["max_turns"].as_u64().unwrap_or(2);
        let turn_discount = cfg["turn_discount"].as_f64().unwrap_or(1.0);
        if max_turns == 0 {
            return Err("max_turns must be greater than 0".into());
        }
        if !(turn_discount > 0.0 && turn_discount <= 1.0) {
            return Err(format!("turn_discount must be in (0, 1], got {turn_discount}").into());
        }
        let messages = episode.messages()?;
        let options = episode.chat_options();
        let special = tokenizer::special_tokens();
        let gconfig = episode.gconfig()?;
        let feedback = feedback_ids(cfg["feedback"].as_str().unwrap_or(FEEDBACK), &options)?;

        let mut input_ids = tokenizer::apply_chat_template(&messages, &options)?;
        let mut traj = TrajectoryBuilder::multi_turn();
        let mut reward = 0.0f64;
        let mut discount = 1.0f64;
        let mut turns = 0u64;
        while reward == 0.0 && turns < max_turns {
            let resp = engine::generate(&ModelRequest::new(input_ids.clone(), gconfig.clone()))?;
            let scored = rewards::score(
                reward_name,
                &RewardInput {
                    prompt: tokenizer::decode(&input_ids, false)?,
                    completion: tokenizer::decode(&resp.output_tokens, false)?,
                    prompt_ids: resp.input_tokens.clone(),
                    completion_ids: resp.output_tokens.clone(),
                    data: episode.reward_data()?,
                },
            )?;
            reward = scored.value;
            let seen = traj.tokens();
            if !resp.input_tokens.starts_with(&seen) {
                return Err(
                    "the engine's input tokens do not extend the conversation so far".into(),
                );
            }
            traj.prompt(&resp.input_tokens[seen.len()..]).output(&resp);
            turns += 1;
            if reward == 0.0 && turns < max_turns {
                input_ids.extend_from_slice(&resp.output_tokens);
                if let Some(eos) = special.eos
                    && resp.output_tokens.last() != Some(&eos)
                {
                    input_ids.push(eos);
                }
                input_ids.extend_from_slice(&feedback);
                discount *= turn_discount;
            }
        }
        let reward = reward * discount;
        log::stat("reward", reward);
        log::stat("num_turns", turns as f64);
        let mut out = traj.build(reward as f32)?;
        out.metadata = json!({"num_turns": turns, "discount": discount, "raw_reward": Value::from(reward / discount)});
        Ok(Some(out))
    }
}

rollbox_sdk::export_workflow!(MultiTurn);
