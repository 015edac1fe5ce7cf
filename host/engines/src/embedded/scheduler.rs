//! The engine thread: each loop iteration admits waiting requests (prefill, first token; a
//! prompt several requests of one round share is prefilled once), then runs one batched decode
//! step for every active sequence, samples, and answers finished requests.

use std::sync::Arc;
use std::sync::mpsc;

use rollbox_tokenizer::HostTokenizer;

use super::model::{self, Model, SeqCache};
use super::sample::Sampler;
use super::{Job, NAME, logprobs, unavailable};
use crate::{EngineError, GenerateResponse, StopReason};

/// Prefill results of one admission round, kept only for prompts that more than one request
/// of the round has: prompt ids -> (KV cache, last-position logits).
struct SharedPrefills {
    repeated: Vec<Vec<u32>>,
    done: Vec<(Vec<u32>, SeqCache, Vec<f32>)>,
}

impl SharedPrefills {
    fn new(jobs: &[Job]) -> SharedPrefills {
        let mut repeated: Vec<Vec<u32>> = Vec::new();
        for (i, j) in jobs.iter().enumerate() {
            let ids = &j.request.input_ids;
            if !repeated.contains(ids) && jobs[i + 1..].iter().any(|k| &k.request.input_ids == ids)
            {
                repeated.push(ids.clone());
            }
        }
        SharedPrefills {
            repeated,
            done: Vec::new(),
        }
    }

    /// A copy of the prefill of `ids`, if one was offered this round.
    fn take(&self, ids: &[u32]) -> Option<(SeqCache, Vec<f32>)> {
        self.done
            .iter()
            .find(|(p, _, _)| p == ids)
            .map(|(_, cache, row)| (cache.clone(), row.clone()))
    }

    /// Keep the prefill of `ids` when another request of the round has the same prompt.
    fn offer(&mut self, ids: &[u32], cache: &SeqCache, row: &[f32]) {
        if self.repeated.iter().any(|p| p == ids) && !self.done.iter().any(|(p, _, _)| p == ids) {
            self.done.push((ids.to_vec(), cache.clone(), row.to_vec()));
        }
    }
}

/// A sequence being decoded.
struct Active {
    job: Job,
    cache: SeqCache,
    sampler: Sampler,
    stop_ids: Vec<u32>,
    tokens: Vec<u32>,
    logprobs: Vec<f32>,
    ttft: Option<f64>,
    /// Decoded text checked against stop strings (only when there are any).
    text_checked: usize,
}

/// The engine thread's state: the weights and what it decodes.
pub(super) struct Engine {
    pub(super) sequences: Arc<std::sync::atomic::AtomicUsize>,
    pub(super) model: Model,
    pub(super) tokenizer: Arc<HostTokenizer>,
    pub(super) eos: Option<u32>,
    pub(super) max_batch: usize,
}

impl Engine {
    /// Serve jobs from `rx` until every sender is dropped.
    pub(super) fn run(self, rx: mpsc::Receiver<Job>) {
        let mut active: Vec<Active> = Vec::new();
        loop {
            let mut pending = Vec::new();
            if active.is_empty() {
                match rx.recv() {
                    Ok(job) => pending.push(job),
                    Err(_) => return,
                }
            }
            while active.len() + pending.len() < self.max_batch {
                match rx.try_recv() {
                    Ok(job) => pending.push(job),
                    Err(_) => break,
                }
            }
            // A caller that gave up (episode timed out or dropped) closed its reply channel:
            // its sequence is not started, or dropped from the batch, instead of decoding for
            // nobody.
            pending.retain(|job| !job.reply.is_closed());
            active.retain(|a| !a.job.reply.is_closed());
            self.sequences.store(
                active.len() + pending.len(),
                std::sync::atomic::Ordering::Relaxed,
            );
            // Requests admitted together with the same prompt (a GRPO group) share one
            // prefill: the first one's cache and logits are copied for the others.
            let mut shared = SharedPrefills::new(&pending);
            for job in pending {
                if let Some(a) = self.admit(job, &mut shared) {
                    active.push(a);
                }
            }
            if !active.is_empty() {
                self.step(&mut active);
            }
            self.sequences
                .store(active.len(), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Prefill a new request (or copy a shared prefill of the same prompt) and sample its
    /// first token; `None` when it already finished.
    fn admit(&self, job: Job, shared: &mut SharedPrefills) -> Option<Active> {
        // Checked again for each job of the round: the prefills before it take time, and a
        // caller that gave up meanwhile is not prefilled for nobody (issue 31: 64 abandoned
        // requests admitted together held the engine ~26 s).
        if job.reply.is_closed() {
            return None;
        }
        let p = &job.request.sampling;
        let prompt_len = job.request.input_ids.len();
        let ctx = self.model.config().context_length;
        if prompt_len >= ctx {
            let _ = job.reply.send(Err(EngineError::InvalidRequest {
                backend: NAME,
                message: format!(
                    "the prompt has {prompt_len} tokens; the model's context is {ctx}"
                ),
            }));
            return None;
        }
        let stop_ids: Vec<u32> = p
            .stop_token_ids
            .iter()
            .copied()
            .filter(|&id| !(p.ignore_eos && Some(id) == self.eos))
            .collect();
        let capacity = (prompt_len + p.max_new_tokens as usize).min(ctx);
        let mut a = Active {
            sampler: Sampler::new(p, stop_ids.clone()),
            stop_ids,
            cache: SeqCache::new(&self.model, capacity),
            tokens: Vec::new(),
            logprobs: Vec::new(),
            ttft: None,
            text_checked: 0,
            job,
        };
        if a.job.request.sampling.max_new_tokens == 0 {
            self.finish(a, StopReason::Length);
            return None;
        }
        let prefilled = match shared.take(&a.job.request.input_ids) {
            Some((cache, row)) => {
                a.cache = cache;
                Ok(row)
            }
            None => self
                .model
                .forward(&[&a.job.request.input_ids], &mut [&mut a.cache])
                .and_then(|l| model::row(&l, 0))
                .inspect(|row| shared.offer(&a.job.request.input_ids, &a.cache, row)),
        };
        match prefilled {
            Ok(mut row) => {
                a.ttft = Some(a.job.submitted.elapsed().as_secs_f64());
                let (tok, lp) = a.sampler.next(&mut row, a.tokens.len());
                match self.push(&mut a, tok, lp) {
                    None => Some(a),
                    Some(reason) => {
                        self.finish(a, reason);
                        None
                    }
                }
            }
            Err(e) => {
                let _ = a
                    .job
                    .reply
                    .send(Err(unavailable(format!("prefill failed: {e}"))));
                None
            }
        }
    }

    /// One decode step for every active sequence.
    fn step(&self, active: &mut Vec<Active>) {
        let last: Vec<[u32; 1]> = active
            .iter()
            .map(|a| [*a.tokens.last().unwrap_or(&0)])
            .collect();
        let tokens: Vec<&[u32]> = last.iter().map(|t| t.as_slice()).collect();
        let logits = {
            let mut caches: Vec<&mut SeqCache> = active.iter_mut().map(|a| &mut a.cache).collect();
            self.model.forward(&tokens, &mut caches)
        };
        let logits = match logits {
            Ok(l) => l,
            Err(e) => {
                for a in active.drain(..) {
                    let _ = a
                        .job
                        .reply
                        .send(Err(unavailable(format!("decode failed: {e}"))));
                }
                return;
            }
        };
        // Choose each sequence's token (cheap, stateful), then compute the logprobs (a softmax
        // over the vocabulary each) on candle's pool, then check stops.
        let rows: Vec<candle_core::Result<(Vec<f32>, u32)>> = active
            .iter_mut()
            .enumerate()
            .map(|(i, a)| {
                let mut row = model::row(&logits, i)?;
                let tok = a.sampler.choose(&mut row, a.tokens.len());
                Ok((row, tok))
            })
            .collect();
        let lps = logprobs(&rows);
        let mut keep = Vec::with_capacity(active.len());
        for ((mut a, row), lp) in active.drain(..).zip(&rows).zip(lps) {
            match row {
                Ok((_, tok)) => match self.push(&mut a, *tok, lp) {
                    None => keep.push(a),
                    Some(reason) => self.finish(a, reason),
                },
                Err(e) => {
                    let _ = a
                        .job
                        .reply
                        .send(Err(unavailable(format!("decode failed: {e}"))));
                }
            }
        }
        *active = keep;
    }

    /// Sample the next token from `logits`; `Some` when the sequence ends.
    fn push(&self, a: &mut Active, tok: u32, lp: f32) -> Option<StopReason> {
        a.tokens.push(tok);
        a.logprobs.push(lp);
        let n = a.tokens.len();
        let min_ok = n > a.job.request.sampling.min_new_tokens as usize;
        let max_new = a.job.request.sampling.max_new_tokens as usize;
        let stop_string = |this: &Self, a: &mut Active| {
            !a.job.request.sampling.stop.is_empty() && this.stop_string_hit(a)
        };
        if min_ok && (a.stop_ids.contains(&tok) || stop_string(self, a)) {
            Some(StopReason::Stop)
        } else if n >= max_new
            || a.job.request.input_ids.len() + n >= self.model.config().context_length
        {
            Some(StopReason::Length)
        } else {
            None
        }
    }

    /// Does the decoded output contain a stop string that ends in its newest token?
    fn stop_string_hit(&self, a: &mut Active) -> bool {
        let Ok(text) = self.tokenizer.decode(&a.tokens, false) else {
            return false;
        };
        let longest = a
            .job
            .request
            .sampling
            .stop
            .iter()
            .map(String::len)
            .max()
            .unwrap_or(0);
        // Only text that appeared since the last check (plus a stop string's length) can hold a
        // new match.
        let mut from = a.text_checked.saturating_sub(longest);
        while !text.is_char_boundary(from) {
            from -= 1;
        }
        a.text_checked = text.len();
        let tail = &text[from..];
        a.job
            .request
            .sampling
            .stop
            .iter()
            .any(|s| !s.is_empty() && tail.contains(s.as_str()))
    }

    fn finish(&self, a: Active, stop_reason: StopReason) {
        let response = GenerateResponse {
            output_tokens: a.tokens,
            output_logprobs: a.logprobs,
            output_versions: None,
            stop_reason,
            ttft: a.ttft,
        };
        let _ = a.job.reply.send(Ok(response));
    }
}
