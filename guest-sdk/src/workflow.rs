//! The `workflow` world: the [`Workflow`] trait, the episode it gets, the output it returns,
//! and the host interfaces it may call (`engine`, `tokenizer`, `rewards`, `tensor`, `tools`,
//! `log`). Its items are also re-exported at the crate root.

pub use crate::bindings::workflow::rollbox::workflow::{
    engine, log, rewards, tensor, tokenizer, tools, types,
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
    /// The row's `messages` (AReaL's `data["messages"]`) as JSON text for the chat template.
    pub fn messages(&self) -> Result<String, Error> {
        let messages = &self.data["messages"];
        if !messages.is_array() {
            return Err(
                "the row needs `messages`, a list of {\"role\", \"content\"} objects".into(),
            );
        }
        Ok(serde_json::to_string(messages)?)
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
