//! One `trajectories.jsonl` line per row of an accepted episode: where it came from (row,
//! sample, episode), its rewards, stop reason, versions, prompt and completion (ids split by
//! the loss mask, decoded when a tokenizer is at hand), timings, reward calls and the
//! workflow's metadata. Serialised once: the batch header and the file hold the same text.

use rollbox_runtime::{EpisodeReport, Trajectory};
use rollbox_tokenizer::HostTokenizer;
use serde::Serialize;

use crate::group::Scored;

/// One `trajectories.jsonl` line (serialized once, written to the batch header and the file).
#[derive(Serialize)]
pub(crate) struct Line<'a> {
    row: usize,
    sample: u32,
    episode: &'a str,
    group_size: u32,
    accepted_in_group: usize,
    reward: Option<f64>,
    raw_reward: Option<f64>,
    stop_reason: &'static str,
    version_head: Option<i32>,
    version_tail: Option<i32>,
    prompt_tokens: usize,
    completion_tokens: usize,
    prompt: Option<String>,
    completion: Option<String>,
    episode_ms: f64,
    reward_ms: f64,
    generate_calls: u32,
    generated_tokens: u64,
    reward_calls: &'a [rollbox_runtime::episode::RewardRecord],
    workflow_sha256: &'a str,
    /// The workflow's metadata object (`episode-output.metadata`), as it returned it (compact,
    /// at most `rollbox_runtime::episode::MAX_METADATA_BYTES`).
    metadata: &'a serde_json::value::RawValue,
}

/// What every line of a run shares.
pub(crate) struct LineContext<'a> {
    /// Decodes prompt and completion text (`None`: no text).
    pub(crate) tokenizer: Option<&'a HostTokenizer>,
    /// `n_samples`.
    pub(crate) group_size: u32,
    /// The workflow component's sha256.
    pub(crate) workflow_sha256: &'a str,
}

/// The lines of one accepted episode, one per row of its tensors.
pub(crate) fn lines(
    cx: &LineContext<'_>,
    row: usize,
    scored: &Scored,
    r: &EpisodeReport,
    t: &Trajectory,
    accepted_in_group: usize,
) -> serde_json::Result<Vec<String>> {
    let (sample, rewards, raw) = (scored.sample, &scored.rewards, &scored.raw);
    let ids = t.i32s("input_ids").unwrap_or_default();
    let mask = t.i32s("loss_mask").unwrap_or_default();
    let attn = t.bools("attention_mask").unwrap_or_default();
    let versions = t.i32s("versions").unwrap_or_default();
    let truncated = t.bools("is_truncated").unwrap_or_default();
    let b = t.rows().unwrap_or(rewards.len().max(1));
    let l = ids.len().checked_div(b).unwrap_or(0);
    // Checked to be one compact JSON object at the episode boundary.
    let empty: &serde_json::value::RawValue = serde_json::from_str("{}")?;
    let metadata = serde_json::from_str(t.metadata_json.as_str()).unwrap_or(empty);
    (0..b)
        .map(|i| {
            let span = i * l..(i + 1) * l;
            let (mut prompt, mut completion, mut vs) = (Vec::new(), Vec::new(), Vec::new());
            for j in span.clone() {
                if attn.get(j) == Some(&false) {
                    continue;
                }
                let Some(&id) = ids.get(j) else { continue };
                if mask.get(j) == Some(&1) {
                    completion.push(id as u32);
                    if let Some(&v) = versions.get(j) {
                        vs.push(v);
                    }
                } else {
                    prompt.push(id as u32);
                }
            }
            let text = |ids: &[u32]| cx.tokenizer.and_then(|tok| tok.decode(ids, false).ok());
            let line = Line {
                row,
                sample,
                episode: &r.id,
                group_size: cx.group_size,
                accepted_in_group,
                reward: rewards.get(i).map(|&x| f64::from(x)),
                raw_reward: raw.get(i).map(|&x| f64::from(x)),
                stop_reason: match truncated.get(i) {
                    Some(true) => "length",
                    Some(false) => "stop",
                    None => "unknown",
                },
                version_head: vs.iter().min().copied(),
                version_tail: vs.iter().max().copied(),
                prompt_tokens: prompt.len(),
                completion_tokens: completion.len(),
                prompt: text(&prompt),
                completion: text(&completion),
                episode_ms: r.wall.as_secs_f64() * 1e3,
                reward_ms: r.reward_calls.iter().map(|c| c.wall_us).sum::<u64>() as f64 / 1e3,
                generate_calls: r.generate_calls,
                generated_tokens: r.generated_tokens,
                reward_calls: &r.reward_calls,
                workflow_sha256: cx.workflow_sha256,
                metadata,
            };
            serde_json::to_string(&line)
        })
        .collect()
}
