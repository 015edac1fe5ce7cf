//! The `replay` backend: answers from recorded request/response pairs.
//!
//! File format: JSON Lines, one object per recorded response:
//! `{"input_ids": [..], "output_tokens": [..], "output_logprobs": [..], "stop_reason": "stop"}`
//! (`output_versions` optional; `sample` and `repeat` as `--record` writes them). A request is
//! answered by the recordings whose `input_ids` equal its prompt:
//!
//! * a request from an episode (its host-set [`RequestOrigin`]) gets the recording made for
//!   the same sample and repeat (the n-th request of that episode with this prompt), else the
//!   one at `(sample + repeat) % count` in file order. Either way the answer depends only on
//!   (prompt, sample, repeat), so a replay at 64 episodes in flight gives the same batch as at
//!   one, and a GRPO group of n samples gets n different recorded answers;
//! * a request from outside an episode gets the prompt's recordings in turn (cycling).
//!
//! The answer is cut to the request's `max_new_tokens` (stop reason then `length`), as a real
//! engine would.

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use serde::Deserialize;

use crate::{EngineError, GenerateRequest, GenerateResponse, InferenceBackend, StopReason};

#[derive(Deserialize)]
struct Record {
    input_ids: Vec<u32>,
    #[serde(default)]
    sample: Option<u32>,
    #[serde(default)]
    repeat: Option<u32>,
    #[serde(flatten)]
    response: GenerateResponse,
}

/// One prompt's recordings: (sample, repeat) when recorded from an episode, the answer.
type Recordings = Vec<(Option<(u32, u32)>, GenerateResponse)>;

/// Largest replay file read, bytes. Guards memory against a wrong path (`replay:/dev/zero` is
/// refused as not a regular file before anything is read).
pub const MAX_REPLAY_FILE_BYTES: u64 = 4 << 30;

/// Serves recorded responses keyed by prompt token ids.
pub struct ReplayBackend {
    answers: HashMap<Vec<u32>, (Recordings, AtomicUsize)>,
    served: Mutex<u64>,
}

impl ReplayBackend {
    /// Read a replay file.
    pub fn from_file(path: &std::path::Path) -> Result<Self, EngineError> {
        let text = rollbox_tokenizer::file::read_capped_text(path, MAX_REPLAY_FILE_BYTES).map_err(
            |e| EngineError::Config {
                path: path.display().to_string(),
                message: format!("cannot read replay file: {e}"),
            },
        )?;
        Self::from_jsonl_str(&text).map_err(|e| match e {
            EngineError::Config { message, .. } => EngineError::Config {
                path: path.display().to_string(),
                message,
            },
            other => other,
        })
    }

    /// Parse replay records from JSON Lines text (blank lines ignored).
    pub fn from_jsonl_str(text: &str) -> Result<Self, EngineError> {
        let mut answers: HashMap<Vec<u32>, (Recordings, AtomicUsize)> = HashMap::new();
        for (index, line) in text.lines().enumerate() {
            if line.trim().is_empty() {
                continue;
            }
            let record: Record = serde_json::from_str(line).map_err(|e| EngineError::Config {
                path: "<replay>".into(),
                message: format!("line {}: {e}", index + 1),
            })?;
            let r = &record.response;
            if r.output_logprobs.len() != r.output_tokens.len() {
                return Err(EngineError::Config {
                    path: "<replay>".into(),
                    message: format!(
                        "line {}: {} output_tokens but {} output_logprobs; record one log-probability per token",
                        index + 1,
                        r.output_tokens.len(),
                        r.output_logprobs.len()
                    ),
                });
            }
            answers
                .entry(record.input_ids)
                .or_insert_with(|| (Vec::new(), AtomicUsize::new(0)))
                .0
                .push((record.sample.zip(record.repeat), record.response));
        }
        Ok(ReplayBackend {
            answers,
            served: Mutex::new(0),
        })
    }

    /// Number of distinct prompts recorded.
    pub fn prompts(&self) -> usize {
        self.answers.len()
    }

    /// Number of requests served so far.
    pub fn served(&self) -> u64 {
        self.served.lock().map(|n| *n).unwrap_or(0)
    }
}

#[async_trait]
impl InferenceBackend for ReplayBackend {
    fn name(&self) -> &'static str {
        "replay"
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateResponse, EngineError> {
        let Some((responses, next)) = self.answers.get(&request.input_ids) else {
            let head: Vec<u32> = request.input_ids.iter().take(8).copied().collect();
            return Err(EngineError::InvalidRequest {
                backend: "replay",
                message: format!(
                    "no recorded response for a prompt of {} tokens starting {head:?}; record one by running a live engine with `record` set (the CLI's --record)",
                    request.input_ids.len()
                ),
            });
        };
        let index = match &request.origin {
            Some(o) => responses
                .iter()
                .position(|(tag, _)| *tag == Some((o.sample, o.repeat)))
                .unwrap_or((o.sample as usize + o.repeat as usize) % responses.len()),
            None => next.fetch_add(1, Ordering::Relaxed) % responses.len(),
        };
        let mut response = responses[index].1.clone();
        let max = request.sampling.max_new_tokens as usize;
        if response.output_tokens.len() > max {
            response.output_tokens.truncate(max);
            response.output_logprobs.truncate(max);
            if let Some(v) = response.output_versions.as_mut() {
                v.truncate(max);
            }
            response.stop_reason = StopReason::Length;
        }
        if let Ok(mut n) = self.served.lock() {
            *n += 1;
        }
        Ok(response)
    }
}

/// Wraps any backend and appends every answered request to a JSONL file in the replay format,
/// so `replay:FILE` re-runs the episode exactly (`--record FILE`).
pub struct RecordingBackend {
    inner: std::sync::Arc<dyn InferenceBackend>,
    file: Mutex<std::fs::File>,
}

impl RecordingBackend {
    /// Record `inner`'s answers to `path` (appended; created if missing).
    pub fn new(
        inner: std::sync::Arc<dyn InferenceBackend>,
        path: &std::path::Path,
    ) -> Result<Self, EngineError> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .map_err(|e| EngineError::Config {
                path: path.display().to_string(),
                message: format!("opening the record file: {e}"),
            })?;
        Ok(RecordingBackend {
            inner,
            file: Mutex::new(file),
        })
    }
}

#[async_trait]
impl InferenceBackend for RecordingBackend {
    fn name(&self) -> &'static str {
        self.inner.name()
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateResponse, EngineError> {
        let input_ids = request.input_ids.clone();
        let origin = request.origin.clone();
        let response = self.inner.generate(request).await?;
        let mut line = serde_json::to_value(&response).unwrap_or_default();
        if let Some(o) = line.as_object_mut() {
            o.insert("input_ids".into(), serde_json::json!(input_ids));
            if let Some(origin) = origin {
                o.insert("sample".into(), origin.sample.into());
                o.insert("repeat".into(), origin.repeat.into());
            }
        }
        let text = line.to_string() + "\n";
        if let Ok(mut f) = self.file.lock() {
            use std::io::Write;
            if let Err(e) = f.write_all(text.as_bytes()) {
                tracing::warn!("recording a response failed: {e}");
            }
        }
        Ok(response)
    }

    fn default_stop_ids(&self) -> Vec<u32> {
        self.inner.default_stop_ids()
    }
}

#[cfg(test)]
mod record_tests {
    use super::*;

    #[tokio::test]
    async fn a_recording_replays_to_the_same_answers() {
        let live = std::sync::Arc::new(
            ReplayBackend::from_jsonl_str(
                r#"{"input_ids":[1,2],"output_tokens":[7,8,2],"output_logprobs":[-0.5,-0.25,-0.125],"output_versions":[3,3,4],"stop_reason":"stop"}"#,
            )
            .expect("source"),
        );
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("rec.jsonl");
        let rec = RecordingBackend::new(live, &path).expect("recorder");
        let first = rec
            .generate(GenerateRequest::new(vec![1, 2]))
            .await
            .expect("live");
        let replay = ReplayBackend::from_file(&path).expect("recorded file parses");
        let again = replay
            .generate(GenerateRequest::new(vec![1, 2]))
            .await
            .expect("replayed");
        assert_eq!(first, again);
        assert_eq!(again.output_versions, Some(vec![3, 3, 4]));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::RequestOrigin;

    fn block_on<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .build()
            .expect("runtime")
            .block_on(f)
    }

    const TWO: &str = concat!(
        r#"{"input_ids":[5],"output_tokens":[1,2,3],"output_logprobs":[-1,-2,-3],"stop_reason":"stop"}"#,
        "\n\n",
        r#"{"input_ids":[5],"output_tokens":[9],"output_logprobs":[-0.5],"stop_reason":"length"}"#,
    );

    #[test]
    fn cycles_through_recordings_of_one_prompt() {
        let b = ReplayBackend::from_jsonl_str(TWO).expect("parse");
        assert_eq!(b.prompts(), 1);
        let a = block_on(b.generate(GenerateRequest::new(vec![5]))).expect("first");
        let c = block_on(b.generate(GenerateRequest::new(vec![5]))).expect("second");
        let d = block_on(b.generate(GenerateRequest::new(vec![5]))).expect("third");
        assert_eq!(a.output_tokens, vec![1, 2, 3]);
        assert_eq!(c.output_tokens, vec![9]);
        assert_eq!(c.stop_reason, StopReason::Length);
        assert_eq!(d.output_tokens, vec![1, 2, 3]);
        assert_eq!(b.served(), 3);
    }

    fn from(sample: u32, repeat: u32) -> GenerateRequest {
        GenerateRequest {
            origin: Some(RequestOrigin {
                episode: format!("r0-s{sample}"),
                sample,
                repeat,
            }),
            ..GenerateRequest::new(vec![5])
        }
    }

    /// The answer depends on (prompt, sample, repeat), not on arrival order (issue 31): any
    /// interleaving of a group's requests gets the same answers.
    #[test]
    fn episode_requests_get_their_samples_answer_in_any_order() {
        let b = ReplayBackend::from_jsonl_str(TWO).expect("parse");
        let tokens = |r: GenerateRequest| block_on(b.generate(r)).expect("answer").output_tokens;
        assert_eq!(tokens(from(1, 0)), vec![9]);
        assert_eq!(tokens(from(1, 0)), vec![9]);
        assert_eq!(tokens(from(0, 0)), vec![1, 2, 3]);
        assert_eq!(
            tokens(from(0, 1)),
            vec![9],
            "the second request of sample 0"
        );
        // Tagged recordings (as --record writes them) are matched by their tags.
        let tagged = concat!(
            r#"{"input_ids":[5],"sample":1,"repeat":0,"output_tokens":[4],"output_logprobs":[-1]}"#,
            "\n",
            r#"{"input_ids":[5],"sample":0,"repeat":0,"output_tokens":[6],"output_logprobs":[-1]}"#,
        );
        let b = ReplayBackend::from_jsonl_str(tagged).expect("parse");
        let tokens = |r: GenerateRequest| block_on(b.generate(r)).expect("answer").output_tokens;
        assert_eq!(tokens(from(0, 0)), vec![6]);
        assert_eq!(tokens(from(1, 0)), vec![4]);
    }

    #[test]
    fn truncates_to_max_new_tokens_with_length() {
        let b = ReplayBackend::from_jsonl_str(TWO).expect("parse");
        let mut req = GenerateRequest::new(vec![5]);
        req.sampling.max_new_tokens = 2;
        let r = block_on(b.generate(req)).expect("answer");
        assert_eq!(r.output_tokens, vec![1, 2]);
        assert_eq!(r.output_logprobs, vec![-1.0, -2.0]);
        assert_eq!(r.stop_reason, StopReason::Length);
    }

    #[test]
    fn unknown_prompt_and_bad_lines_are_named() {
        let b = ReplayBackend::from_jsonl_str(TWO).expect("parse");
        let err = block_on(b.generate(GenerateRequest::new(vec![6]))).expect_err("unknown");
        assert!(err.to_string().contains("no recorded response"), "{err}");
        let err = ReplayBackend::from_jsonl_str("{}\n{")
            .err()
            .expect("bad line");
        assert!(err.to_string().contains("line 1"), "{err}");
        let err = ReplayBackend::from_jsonl_str(
            r#"{"input_ids":[1],"output_tokens":[1,2],"output_logprobs":[0]}"#,
        )
        .err()
        .expect("mismatch");
        assert!(
            err.to_string().contains("one log-probability per token"),
            "{err}"
        );
    }
}
