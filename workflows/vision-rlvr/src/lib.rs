//! `vision-rlvr`: AReaL's `VisionRLVRWorkflow` (Qwen2-VL / Qwen2.5-VL) as a rollbox
//! component.
//!
//! For one row:
//!
//! * **Images**: `row["images"]` (or the config's `image_key`), base64 strings, `data:` URLs or
//!   `{"bytes": base64}` objects, one or a list; paths are refused (the sandbox reads no
//!   files). The host's `vision` interface decodes and preprocesses them (transformers'
//!   `Qwen2VLImageProcessorFast` by default, bit for bit).
//! * **Prompt**: a string under `messages` is a prompt already rendered by the chat template
//!   (what AReaL's vision dataset loaders store) and is tokenised as the processor does
//!   (special tokens added); chat messages, or a text column as one user message, go through
//!   the host's chat template. `image_placeholder` (e.g. geometry3k's `<image>`) is replaced
//!   by `vision_tokens` first. Each image token (`<|image_pad|>`) is then repeated as many
//!   times as its image takes (`grid_h * grid_w / merge_size^2`), and `mm_token_type_ids`
//!   marks those positions with 1.
//! * **Generation**: one sample, with the images as `image_data` (the row's own bytes,
//!   base64: an engine decodes them to the pixels AReaL's PNG re-encoding carries) and the
//!   row's `messages_chat` in the request metadata for chat-completions servers (AReaL's
//!   `vision_msg_vllm`).
//! * **Reward**: the named reward component scores `(decoded prompt, decoded completion,
//!   prompt ids, completion ids, row)`, as in `rlvr`.
//!
//! Outputs: AReaL's tensors (`input_ids`, `loss_mask`, `logprobs`, `versions`,
//! `attention_mask`, `rewards`, plus `is_truncated`), `mm_token_type_ids` (i32 `[1, L]`: 1 on image tokens, 2 on video tokens, as the processor
//! marks them), and
//! AReaL's `multi_modal_input[0]` as `multi_modal_input.pixel_values` (f32 `[patches, 1176]`)
//! and `multi_modal_input.image_grid_thw` (i64 `[images, 3]`).
//!
//! Config: `{"reward": "math", "gconfig": {...}, "enable_thinking": false, "image_key":
//! "images", "image_token": "<|image_pad|>", "image_placeholder": null, "vision_tokens":
//! "<|vision_start|><|image_pad|><|vision_end|>", "processor": {"backend": "torchvision",
//! "min_pixels": ..., "max_pixels": ...}}` plus `rlvr`'s `prompt_key`, `prompt_suffix`,
//! `system_prompt` and `answer_key`.

pub mod prompt;

use prompt::{base64_payload, expand, row_images, substitute};
use rollbox_sdk::tensor::{Tensor, TensorData};
use rollbox_sdk::trajectory::scored_single_turn;
use rollbox_sdk::vision::{self, ImageOptions};
use rollbox_sdk::{Episode, Error, ModelRequest, Output, Workflow, engine, log, tokenizer};
use serde_json::{Value, json};

/// The image token of Qwen2-VL and Qwen2.5-VL.
pub const IMAGE_TOKEN: &str = "<|image_pad|>";

/// The video token of Qwen2-VL, which `mm_token_type_ids` marks 2.
pub const VIDEO_TOKEN: &str = "<|video_pad|>";

/// What one image placeholder of a dataset becomes in Qwen2-VL's prompt.
pub const VISION_TOKENS: &str = "<|vision_start|><|image_pad|><|vision_end|>";

struct VisionRlvr;

/// The prompt ids before expansion: a rendered prompt under `messages` tokenised with special
/// tokens (as the processor calls the tokenizer), else the chat messages through the template.
fn prompt_ids(episode: &Episode) -> Result<Vec<u32>, Error> {
    let cfg = &episode.config;
    let mut data = episode.data.clone();
    if let Some(placeholder) = cfg["image_placeholder"].as_str().filter(|p| !p.is_empty()) {
        let with = cfg["vision_tokens"].as_str().unwrap_or(VISION_TOKENS);
        substitute(&mut data, placeholder, with);
    }
    let key = cfg["prompt_key"].as_str().unwrap_or("messages");
    if let Some(Value::String(text)) = data.get(key)
        && key == "messages"
    {
        return Ok(tokenizer::encode(text, true)?);
    }
    let messages = rollbox_sdk::prompt_messages(&data, cfg)?;
    Ok(tokenizer::apply_chat_template(
        &serde_json::to_string(&messages)?,
        &episode.chat_options(),
    )?)
}

/// The id of `token`, which must be one token of the vocabulary.
fn token_id(token: &str) -> Result<u32, Error> {
    match tokenizer::encode(token, false)?.as_slice() {
        [id] => Ok(*id),
        ids => Err(Error::msg(format!(
            "the tokenizer reads the image token `{token}` as {} tokens, not one: serve a vision-language model's tokenizer (Qwen2-VL's or Qwen2.5-VL's), or set image_token in the config to its image token",
            ids.len()
        ))),
    }
}

impl Workflow for VisionRlvr {
    fn run_episode(episode: Episode) -> Result<Option<Output>, Error> {
        let cfg = &episode.config;
        let reward_name = cfg["reward"].as_str().unwrap_or("math");
        let image_key = cfg["image_key"].as_str().unwrap_or("images");
        let encoded = row_images(&episode.data, image_key).map_err(Error::msg)?;
        let mut processor = cfg["processor"].clone();
        let backend = processor["backend"].as_str().map(str::to_string);
        if let Some(o) = processor.as_object_mut() {
            o.remove("backend");
        }
        let options = ImageOptions {
            backend,
            config: (!processor.is_null()).then(|| processor.to_string()),
        };
        let processed = vision::process_images(&encoded, &options)?;

        let image_token = token_id(cfg["image_token"].as_str().unwrap_or(IMAGE_TOKEN))?;
        let (input_ids, mut mm_types) =
            expand(&prompt_ids(&episode)?, image_token, &processed.tokens).map_err(Error::msg)?;
        // The processor marks video tokens 2 (none are expanded here: images only).
        if let Ok([video]) = tokenizer::encode(VIDEO_TOKEN, false).as_deref() {
            for (t, id) in mm_types.iter_mut().zip(&input_ids) {
                if id == video {
                    *t = 2;
                }
            }
        }
        let mut request = ModelRequest::new(input_ids, episode.gconfig()?);
        // The same bytes, handed on without a copy: the base64 payload of each image.
        request.image_data = encoded.into_iter().map(base64_payload).collect();
        match episode.data.get("messages_chat") {
            None | Some(Value::Null) => {}
            Some(chat @ Value::Array(_)) => {
                request.metadata = json!({ "messages_chat": chat }).to_string();
            }
            Some(_) => {
                return Err(Error::msg(
                    "the row's `messages_chat` is not a list of chat messages (the prompt with `image_url` parts, for chat-completions servers)",
                ));
            }
        }
        let resp = engine::generate(&request)?;
        let mut out = scored_single_turn(&episode, reward_name, &resp)?;
        log::stat("images", processed.tokens.len() as f64);
        let image_tokens: f64 = processed.tokens.iter().map(|&n| f64::from(n)).sum();
        log::stat("image_tokens", image_tokens);
        // The host reports the request's own ids as the prompt, so the marks line up.
        let mut types = mm_types;
        types.resize(resp.input_tokens.len() + resp.output_tokens.len(), 0);
        let len = u32::try_from(types.len()).map_err(|_| Error::msg("sequence too long"))?;
        out.tensors.extend([
            (
                "mm_token_type_ids".to_string(),
                Tensor::create(&TensorData::I32(types), &[1, len])?,
            ),
            (
                "multi_modal_input.pixel_values".to_string(),
                processed.pixel_values,
            ),
            (
                "multi_modal_input.image_grid_thw".to_string(),
                processed.image_grid_thw,
            ),
        ]);
        out.metadata["image_tokens"] = json!(processed.tokens);
        Ok(Some(out))
    }
}

rollbox_sdk::export_workflow!(VisionRlvr);
