//! Trajectory builders that produce AReaL's tensor dict exactly, so workflows rarely touch raw
//! tensors.
//!
//! Keys, dtypes and shapes (each per-token key `[1, L]`): `input_ids` i32, `loss_mask` i32
//! (0 prompt / 1 output), `logprobs` f32 (0.0 on the prompt), `versions` i32 (-1 on the prompt),
//! `attention_mask` bool (all true), `rewards` f32 `[1]`, `is_truncated` bool `[1]` (true when
//! the last output stopped on `length`), and, for multi-turn builders, `turn_ids` i32 (-1 on
//! prompt and context tokens, the turn index on outputs).

use crate::tensor::{Tensor, TensorData};
use crate::{
    Episode, Error, ModelResponse, Output, RewardInput, StopReason, log, rewards, tokenizer,
};

/// Builds one trajectory by appending prompt tokens and model outputs in order.
///
/// ```no_run
/// # use rollbox_sdk::{ModelResponse, trajectory::TrajectoryBuilder};
/// # fn demo(prompt: &[u32], resp: &ModelResponse) -> Result<(), rollbox_sdk::Error> {
/// let mut t = TrajectoryBuilder::new();
/// t.prompt(prompt);
/// t.output(resp);
/// let output = t.build(1.0)?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct TrajectoryBuilder {
    input_ids: Vec<i32>,
    loss_mask: Vec<i32>,
    logprobs: Vec<f32>,
    versions: Vec<i32>,
    turn_ids: Vec<i32>,
    with_turn_ids: bool,
    truncated: bool,
    turns: i32,
}

impl TrajectoryBuilder {
    /// An empty single-turn builder (no `turn_ids` key).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty multi-turn builder: the output also carries `turn_ids`.
    pub fn multi_turn() -> Self {
        TrajectoryBuilder {
            with_turn_ids: true,
            ..Self::default()
        }
    }

    /// Append prompt or context tokens (not trained on).
    pub fn prompt(&mut self, ids: &[u32]) -> &mut Self {
        self.input_ids.extend(ids.iter().map(|&i| i as i32));
        self.loss_mask.extend(std::iter::repeat_n(0, ids.len()));
        self.logprobs.extend(std::iter::repeat_n(0.0, ids.len()));
        self.versions.extend(std::iter::repeat_n(-1, ids.len()));
        self.turn_ids.extend(std::iter::repeat_n(-1, ids.len()));
        self
    }

    /// Append a model output (trained on): its tokens, log-probabilities and versions, tagged
    /// with the next turn index.
    pub fn output(&mut self, resp: &ModelResponse) -> &mut Self {
        let n = resp.output_tokens.len();
        self.input_ids
            .extend(resp.output_tokens.iter().map(|&i| i as i32));
        self.loss_mask.extend(std::iter::repeat_n(1, n));
        self.logprobs.extend(
            resp.output_logprobs
                .iter()
                .copied()
                .chain(std::iter::repeat(0.0))
                .take(n),
        );
        self.versions.extend(
            resp.output_versions
                .iter()
                .copied()
                .chain(std::iter::repeat(-1))
                .take(n),
        );
        self.turn_ids.extend(std::iter::repeat_n(self.turns, n));
        self.truncated = matches!(resp.stop_reason, StopReason::Length);
        self.turns += 1;
        self
    }

    /// Mark the trajectory truncated (`is_truncated`) or not. By default it is truncated when
    /// the last output stopped on length; an agent that ends for another budget sets it.
    pub fn set_truncated(&mut self, truncated: bool) -> &mut Self {
        self.truncated = truncated;
        self
    }

    /// The token sequence so far.
    pub fn tokens(&self) -> Vec<u32> {
        self.input_ids.iter().map(|&i| i as u32).collect()
    }

    /// Tokens so far.
    pub fn len(&self) -> usize {
        self.input_ids.len()
    }

    /// True when nothing was appended.
    pub fn is_empty(&self) -> bool {
        self.input_ids.is_empty()
    }

    /// Outputs appended so far.
    pub fn turns(&self) -> u32 {
        self.turns as u32
    }

    /// The tensor dict with `reward` as `rewards`.
    pub fn build(&self, reward: f32) -> Result<Output, Error> {
        self.clone().finish(reward)
    }

    /// [`build`](Self::build), moving the token lists into the tensors instead of copying them.
    pub fn finish(self, reward: f32) -> Result<Output, Error> {
        let len = self.input_ids.len();
        let row = [1, len as u32];
        let mut tensors = vec![
            (
                "input_ids".to_string(),
                Tensor::create(&TensorData::I32(self.input_ids), &row)?,
            ),
            (
                "loss_mask".to_string(),
                Tensor::create(&TensorData::I32(self.loss_mask), &row)?,
            ),
            (
                "logprobs".to_string(),
                Tensor::create(&TensorData::F32(self.logprobs), &row)?,
            ),
            (
                "versions".to_string(),
                Tensor::create(&TensorData::I32(self.versions), &row)?,
            ),
            (
                "attention_mask".to_string(),
                Tensor::create(&TensorData::Bool(vec![true; len]), &row)?,
            ),
        ];
        if self.with_turn_ids {
            tensors.push((
                "turn_ids".to_string(),
                Tensor::create(&TensorData::I32(self.turn_ids), &row)?,
            ));
        }
        tensors.push((
            "rewards".to_string(),
            Tensor::create(&TensorData::F32(vec![reward]), &[1])?,
        ));
        tensors.push((
            "is_truncated".to_string(),
            Tensor::create(&TensorData::Bool(vec![self.truncated]), &[1])?,
        ));
        Ok(Output::new(tensors))
    }
}

/// AReaL's RLVR layout for one prompt and one response: `input_tokens + output_tokens`.
pub fn single_turn(resp: &ModelResponse, reward: f32) -> Result<Output, Error> {
    let mut t = TrajectoryBuilder::new();
    t.prompt(&resp.input_tokens).output(resp);
    t.finish(reward)
}

/// One response scored as AReaL's RLVR workflows score it, as its trajectory: the reward
/// component `reward` on (decoded prompt, decoded completion with stop tokens kept, prompt ids,
/// completion ids, the row as [`Episode::reward_data`] gives it), the `reward` stat, then
/// [`single_turn`] with the metadata `prompt`, `completion`, `stop_reason` and
/// `reward_timed_out`.
pub fn scored_single_turn(
    episode: &Episode,
    reward: &str,
    resp: &ModelResponse,
) -> Result<Output, Error> {
    let input = RewardInput {
        prompt: tokenizer::decode(&resp.input_tokens, false)?,
        completion: tokenizer::decode(&resp.output_tokens, false)?,
        prompt_ids: resp.input_tokens.clone(),
        completion_ids: resp.output_tokens.clone(),
        data: episode.reward_data()?,
    };
    let scored = rewards::score(reward, &input)?;
    log::stat("reward", scored.value);
    let mut out = single_turn(resp, scored.value as f32)?;
    out.metadata = serde_json::json!({
        "prompt": input.prompt,
        "completion": input.completion,
        "stop_reason": resp.stop_reason.as_str(),
        "reward_timed_out": scored.timed_out,
    });
    Ok(out)
}

/// Several trajectories of one episode as one tensor dict, concatenated with AReaL's
/// `concat_padded_tensors` semantics on the host. When their rewards differ, `rollout_reward`
/// (f32 `[B]`) carries `reference` — the episode's finite reference reward for group
/// normalisation — on every row, while each row keeps its own `rewards`.
pub fn merge(outputs: &[Output], reference: f32) -> Result<Output, Error> {
    let dicts: Vec<Vec<(String, &Tensor)>> = outputs
        .iter()
        .map(|o| o.tensors.iter().map(|(k, t)| (k.clone(), t)).collect())
        .collect();
    let merged = crate::tensor::concat_padded(&dicts, 0.0)?;
    let rewards: Vec<f32> = merged
        .iter()
        .find(|(k, _)| k == "rewards")
        .map(|(_, t)| match t.data() {
            TensorData::F32(v) => v,
            _ => Vec::new(),
        })
        .unwrap_or_default();
    let mut out = Output::new(merged);
    if rewards.windows(2).any(|w| w[0] != w[1]) {
        if !reference.is_finite() {
            return Err(Error::msg(format!(
                "rollout_reward must be finite, got {reference}"
            )));
        }
        let rows = rewards.len() as u32;
        out.tensors.push((
            "rollout_reward".to_string(),
            Tensor::create(&TensorData::F32(vec![reference; rows as usize]), &[rows])?,
        ));
    }
    Ok(out)
}
