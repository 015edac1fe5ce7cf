//! The `workflow` world: the [`Workflow`] trait, the episode it gets, the output it returns,
//! and the host interfaces it may call (`engine`, `tokenizer`, `rewards`, `tensor`, `tools`,
//! `log`). Its items are also re-exported at the crate root.

pub use crate::bindings::workflow::rollbox::workflow::{
    engine, log, rewards, tensor, tokenizer, tools, types, vision,
};
pub use types::{GenConfig, ModelRequest, ModelResponse, RewardInput, StopReason};

use crate::Error;
use crate::bindings::workflow::rollbox::workflow::episode::{EpisodeInput, EpisodeOutput};

impl ModelRequest {
    /// A request for `input_ids` with `gconfig`: no rid (the host assigns one), no images, no
    /// metadata.
    pub fn new(input_ids: Vec<u32>, gconfig: GenConfig) -> Self {
        ModelRequest {
            rid: String::new(),
            input_ids,
            gconfig,
            image_data: Vec::new(),
            metadata: "{}".into(),
        }
    }
}

impl StopReason {
    /// AReaL's name: `stop`, `length`, `tool_calls` or `abort`.
    pub fn as_str(self) -> &'static str {
        match self {
            StopReason::Stop => "stop",
            StopReason::Length => "length",
            StopReason::ToolCalls => "tool_calls",
            StopReason::Abort => "abort",
        }
    }
}

/// One episode as a workflow sees it.
#[derive(Debug, Clone)]
pub struct Episode {
    /// Unique id, e.g. `r12-s3`.
    pub id: String,
    /// The dataset row (AReaL's `data`).
    pub data: serde_json::Value,
    /// The row as the host sent it (JSON text): pass it on (e.g. as a reward's `data`)
    /// instead of serializing [`Episode::data`] again.
    pub data_json: String,
    /// The workflow's configuration object.
    pub config: serde_json::Value,
    /// Index in the GRPO group.
    pub sample_index: u32,
    /// Seed for the workflow's own randomness.
    pub seed: u64,
}

impl Episode {
    /// The prompt as chat messages (JSON text for the chat template), from the row as the
    /// dataset ships it; see [`prompt_messages`] for the keys and config options.
    pub fn messages(&self) -> Result<String, Error> {
        Ok(serde_json::to_string(&prompt_messages(
            &self.data,
            &self.config,
        )?)?)
    }

    /// The row to hand a reward as its `data` (JSON text): the row as the host sent it, or, with
    /// `answer_key` in the config (`"label"`, `"reward_model.ground_truth"`), the row with that
    /// value under `answer`, where rewards look first.
    pub fn reward_data(&self) -> Result<String, Error> {
        let Some(key) = self.config["answer_key"].as_str() else {
            return Ok(self.data_json.clone());
        };
        let answer = lookup(&self.data, key)
            .filter(|v| !v.is_null())
            .ok_or_else(|| Error::msg(format!("the row has no `{key}` (the config's answer_key)")))?
            .clone();
        let mut row = self.data.clone();
        match row.as_object_mut() {
            Some(o) => {
                o.insert("answer".into(), answer);
            }
            None => return Err(Error::msg("the row is not a JSON object")),
        }
        Ok(serde_json::to_string(&row)?)
    }

    /// Chat options for the prompt: `add_generation_prompt`, and `enable_thinking` from the
    /// config (default false), as AReaL's RLVR and multi-turn workflows pass them.
    pub fn chat_options(&self) -> tokenizer::ChatOptions {
        let thinking = self.config["enable_thinking"].as_bool().unwrap_or(false);
        tokenizer::ChatOptions {
            add_generation_prompt: true,
            tools: None,
            extra: Some(format!("{{\"enable_thinking\":{thinking}}}")),
        }
    }

    /// One-sample sampling settings: AReaL's defaults, the config's `gconfig` overrides, and
    /// the tokenizer's stop and pad ids (AReaL's `new_with_stop_and_pad_token_ids`).
    pub fn gconfig(&self) -> Result<GenConfig, Error> {
        let g = GenConfig::default()
            .new_with(&self.config["gconfig"])?
            .with_stop_and_pad_token_ids(&tokenizer::special_tokens());
        Ok(GenConfig { n_samples: 1, ..g })
    }
}

/// Keys a row's prompt is looked up under, in order, when the config names none
/// (`prompt_key`): chat messages as most RL datasets hold them (`messages`; verl's `prompt`), or
/// a text (`prompt`, GSM8K's `question`, MATH's `problem`).
pub const PROMPT_KEYS: &[&str] = &["messages", "prompt", "question", "problem"];

/// `row[a][b]` for `key` = `"a.b"`.
fn lookup<'a>(row: &'a serde_json::Value, key: &str) -> Option<&'a serde_json::Value> {
    key.split('.').try_fold(row, |v, part| v.get(part))
}

/// A row's prompt as chat messages, from the first of `config["prompt_key"]` (else
/// [`PROMPT_KEYS`]) the row holds: a list of `{"role", "content"}` messages is taken as it is; a
/// text becomes one user message with `config["prompt_suffix"]` appended (AReaL's GSM8K loader
/// appends `"\nPlease put your final answer within \\boxed{}."`). `config["system_prompt"]`
/// is put first unless the messages already start with a system message.
pub fn prompt_messages(
    row: &serde_json::Value,
    config: &serde_json::Value,
) -> Result<serde_json::Value, Error> {
    let named = config["prompt_key"].as_str();
    let keys: Vec<&str> = match named {
        Some(k) => vec![k],
        None => PROMPT_KEYS.to_vec(),
    };
    let Some((key, value)) = keys
        .iter()
        .find_map(|k| lookup(row, k).filter(|v| !v.is_null()).map(|v| (*k, v)))
    else {
        let names: Vec<String> = keys.iter().map(|k| format!("`{k}`")).collect();
        return Err(Error::msg(format!(
            "the row has no prompt: none of {} (set prompt_key in the config to the column that holds it)",
            names.join(", ")
        )));
    };
    let mut messages = match value {
        serde_json::Value::Array(list) => {
            if let Some(bad) = list.iter().position(|m| !m["role"].is_string()) {
                return Err(Error::msg(format!(
                    "`{key}`[{bad}] is not a {{\"role\", \"content\"}} message"
                )));
            }
            list.clone()
        }
        serde_json::Value::String(text) => {
            let suffix = config["prompt_suffix"].as_str().unwrap_or_default();
            vec![serde_json::json!({"role": "user", "content": format!("{text}{suffix}")})]
        }
        other => {
            return Err(Error::msg(format!(
                "`{key}` must be a list of {{\"role\", \"content\"}} messages or a text, not {other}"
            )));
        }
    };
    if let Some(system) = config["system_prompt"].as_str()
        && messages.first().is_none_or(|m| m["role"] != "system")
    {
        messages.insert(0, serde_json::json!({"role": "system", "content": system}));
    }
    Ok(serde_json::Value::Array(messages))
}

/// What an accepted episode returns: the tensor dict and a metadata object.
#[derive(Debug)]
pub struct Output {
    /// `(name, tensor)` pairs, e.g. `input_ids`, `loss_mask`, ...
    pub tensors: Vec<(String, tensor::Tensor)>,
    /// Free-form metadata recorded with the trajectory.
    pub metadata: serde_json::Value,
}

impl Output {
    /// Tensors with empty metadata.
    pub fn new(tensors: Vec<(String, tensor::Tensor)>) -> Self {
        Output {
            tensors,
            metadata: serde_json::json!({}),
        }
    }
}

/// A rollout workflow (AReaL's `RolloutWorkflow.arun_episode`).
pub trait Workflow {
    /// Turn one row into trajectories: `Ok(Some(..))` accepts, `Ok(None)` rejects,
    /// `Err(..)` fails the episode (counted, logged, never fatal to the host).
    fn run_episode(episode: Episode) -> Result<Option<Output>, Error>;
}

#[doc(hidden)]
pub fn __run_workflow<W: Workflow>(input: EpisodeInput) -> Result<Option<EpisodeOutput>, String> {
    let parse = |what: &str, s: &str| -> Result<serde_json::Value, String> {
        if s.trim().is_empty() {
            return Ok(serde_json::json!({}));
        }
        serde_json::from_str(s).map_err(|e| format!("episode {what} is not valid JSON: {e}"))
    };
    let episode = Episode {
        data: parse("data", &input.data)?,
        data_json: if input.data.trim().is_empty() {
            "{}".into()
        } else {
            input.data
        },
        config: parse("config", &input.config)?,
        id: input.episode_id,
        sample_index: input.sample_index,
        seed: input.seed,
    };
    let Some(o) = W::run_episode(episode)? else {
        return Ok(None);
    };
    // Not `Value::to_string`, which writes through `Display`'s formatter one piece at a time.
    let metadata = serde_json::to_string(&o.metadata).map_err(|e| e.to_string())?;
    Ok(Some(EpisodeOutput {
        tensors: o.tensors,
        metadata,
    }))
}

/// Export a [`Workflow`] implementation as the component's `run-episode`.
#[macro_export]
macro_rules! export_workflow {
    ($ty:ty) => {
        const _: () = {
            struct __RollboxWorkflowExport;
            impl $crate::bindings::workflow::Guest for __RollboxWorkflowExport {
                fn run_episode(
                    input: $crate::bindings::workflow::rollbox::workflow::episode::EpisodeInput,
                ) -> ::core::result::Result<
                    ::core::option::Option<$crate::bindings::workflow::rollbox::workflow::episode::EpisodeOutput>,
                    ::std::string::String,
                > {
                    $crate::__run_workflow::<$ty>(input)
                }
            }
            $crate::bindings::workflow::__export_workflow_world!(__RollboxWorkflowExport with_types_in $crate::bindings::workflow);
        };
    };
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn prompts_come_from_rows_as_datasets_ship_them() {
        let cfg = json!({});
        let msgs = json!([{"role": "user", "content": "hi"}]);
        assert_eq!(
            prompt_messages(&json!({"messages": msgs}), &cfg).expect("messages"),
            msgs
        );
        // verl: `prompt` is a list of messages.
        assert_eq!(
            prompt_messages(&json!({"prompt": msgs}), &cfg).expect("prompt"),
            msgs
        );
        // GSM8K: `question`, with AReaL's suffix and a system prompt.
        let gsm8k = json!({"question": "2 + 2?", "answer": "#### 4"});
        let cfg = json!({"prompt_suffix": " Box it.", "system_prompt": "Be brief."});
        assert_eq!(
            prompt_messages(&gsm8k, &cfg).expect("question"),
            json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2 + 2? Box it."}])
        );
        // MATH: `problem`; a named key wins.
        let row = json!({"problem": "x?", "text": "y?"});
        assert_eq!(
            prompt_messages(&row, &json!({})).expect("problem")[0]["content"],
            "x?"
        );
        assert_eq!(
            prompt_messages(&row, &json!({"prompt_key": "text"})).expect("text")[0]["content"],
            "y?"
        );
        // Errors name the keys and the fix.
        let e = prompt_messages(&json!({"text": "y?"}), &json!({}))
            .expect_err("none")
            .to_string();
        assert!(e.contains("`question`") && e.contains("prompt_key"), "{e}");
        let e = prompt_messages(&json!({"prompt": 3}), &json!({}))
            .expect_err("type")
            .to_string();
        assert!(e.contains("`prompt` must be"), "{e}");
        let e = prompt_messages(&json!({"messages": [1]}), &json!({}))
            .expect_err("bad")
            .to_string();
        assert!(e.contains("`messages`[0]"), "{e}");
    }
}
