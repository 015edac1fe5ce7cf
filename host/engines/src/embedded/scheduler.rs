//! The engine thread: each loop iteration reads every queued request, drops those whose caller
//! has gone, admits waiting requests while the batch has room (prefill, first token; a prompt
//! several requests of one round share is prefilled once), drops the sequences whose caller left
//! meanwhile, then runs one batched decode step for the rest, samples, and answers finished
//! requests. A prefill or step is given up between layers once its callers have gone
//! ([`cancel::abandon`]).
//!
//! Admission is first come, first served within `max_batch`: a request arriving while the
//! batch is full waits until a sequence ends or its caller goes (no preemption).

use std::collections::VecDeque;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

use rollbox_tokenizer::HostTokenizer;

use super::cancel::{self, EngineStats};
use super::model::{self, Model, SeqCache};
use super::sample::Sampler;
use super::{Job, NAME, Reply, logprobs, unavailable};
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

/// Drop the sequences whose caller has gone, freeing their KV caches now.
fn drop_gone_running(active: &mut Vec<Active>, stats: &mut EngineStats) {
    let before = active.len();
    active.retain(|a| !a.job.reply.is_closed());
    stats.dropped_running += (before - active.len()) as u64;
}

/// The engine thread's state: the weights and what it decodes.
pub(super) struct Engine {
    pub(super) sequences: Arc<std::sync::atomic::AtomicUsize>,
    pub(super) stats: Arc<Mutex<EngineStats>>,
    pub(super) model: Model,
    pub(super) tokenizer: Arc<HostTokenizer>,
    pub(super) eos: Option<u32>,
    pub(super) max_batch: usize,
}

impl Engine {
    /// Serve jobs from `rx` until every sender is dropped and nothing is left to decode.
    pub(super) fn run(self, rx: mpsc::Receiver<Job>) {
        let mut active: Vec<Active> = Vec::new();
        let mut waiting: VecDeque<Job> = VecDeque::new();
        loop {
            if active.is_empty() && waiting.is_empty() {
                match rx.recv() {
                    Ok(job) => waiting.push_back(job),
                    Err(_) => return,
                }
            }
            // Everything queued is read each round, so the backlog of a dropped generate-many
            // (up to thousands of requests) is purged at once, not `max_batch` per step while
            // a live request waits behind it.
            waiting.extend(rx.try_iter());
            // A caller that gave up (episode timed out or dropped) closed its reply channel:
            // its request is not started, or its sequence (and KV cache) dropped from the
            // batch, instead of decoding for nobody.
            let round: Vec<Job> = {
                let mut stats = cancel::lock(&self.stats);
                stats.dropped_waiting += cancel::drop_gone(&mut waiting);
                drop_gone_running(&mut active, &mut stats);
                let room = self
                    .max_batch
                    .saturating_sub(active.len())
                    .min(waiting.len());
                let round: Vec<Job> = waiting.drain(..room).collect();
                for job in &round {
                    let waited = stats.steps.saturating_sub(job.submitted_step);
                    stats.max_wait_steps = stats.max_wait_steps.max(waited);
                }
                round
            };
            self.sequences.store(
                active.len() + round.len(),
                std::sync::atomic::Ordering::Relaxed,
            );
            {
                // Requests admitted together with the same prompt (a GRPO group) share one
                // prefill: the first one's cache and logits are copied for the others.
                let mut shared = SharedPrefills::new(&round);
                for job in round {
                    if let Some(a) = self.admit(job, &mut shared) {
                        active.push(a);
                    }
                }
            }
            if self.start_step(&mut active) {
                self.step(&mut active);
            }
            self.sequences
                .store(active.len(), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Drop the sequences whose callers left (during this round's prefills, say) and count the
    /// step about to run; `false` when nothing is left to decode. Done under the stats lock, so
    /// a caller that had gone before a reader of [`EngineStats`] took the lock is in no step
    /// counted after.
    fn start_step(&self, active: &mut Vec<Active>) -> bool {
        let mut stats = cancel::lock(&self.stats);
        drop_gone_running(active, &mut stats);
        if active.is_empty() {
            return false;
        }
        stats.steps += 1;
        stats.step_rows += active.len() as u64;
        true
    }

    /// Prefill a new request (or copy a shared prefill of the same prompt) and sample its
    /// first token; `None` when it already finished.
    fn admit(&self, job: Job, shared: &mut SharedPrefills) -> Option<Active> {
        // Checked again for each job of the round: the prefills before it take time, and a
        // caller that gave up meanwhile is not prefilled for nobody (issue 31: 64 abandoned
        // requests admitted together held the engine ~26 s). A caller that leaves during its
        // own prefill stops it at the next layer.
        if job.reply.is_closed() {
            cancel::lock(&self.stats).dropped_waiting += 1;
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
                Ok(Some(row))
            }
            None => {
                let reply = &a.job.reply;
                self.model
                    .forward_unless(&[&a.job.request.input_ids], &mut [&mut a.cache], |_, _| {
                        reply.is_closed()
                    })
                    .and_then(|l| l.map(|l| model::row(&l, 0)).transpose())
                    .inspect(|row| {
                        if let Some(row) = row {
                            shared.offer(&a.job.request.input_ids, &a.cache, row);
                        }
                    })
            }
        };
        match prefilled {
            Ok(None) => {
                cancel::lock(&self.stats).dropped_waiting += 1;
                None
            }
            Ok(Some(mut row)) => {
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

    /// One decode step for every active sequence. Before each layer it counts the callers
    /// still there; once redoing the step for those alone is cheaper than finishing it, the
    /// step is given up (caches rewound) and the next round drops the others and runs it again.
    fn step(&self, active: &mut Vec<Active>) {
        let last: Vec<[u32; 1]> = active
            .iter()
            .map(|a| [*a.tokens.last().unwrap_or(&0)])
            .collect();
        let tokens: Vec<&[u32]> = last.iter().map(|t| t.as_slice()).collect();
        let logits = {
            let (mut caches, replies): (Vec<&mut SeqCache>, Vec<&Reply>) = active
                .iter_mut()
                .map(|a| (&mut a.cache, &a.job.reply))
                .unzip();
            let rows = replies.len();
            self.model
                .forward_unless(&tokens, &mut caches, |done, stages| {
                    let live = replies.iter().filter(|r| !r.is_closed()).count();
                    cancel::abandon(rows, live, done, stages)
                })
        };
        let logits = match logits {
            Ok(Some(l)) => l,
            Ok(None) => {
                cancel::lock(&self.stats).abandoned_steps += 1;
                return;
            }
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
