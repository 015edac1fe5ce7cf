//! A deterministic fake backend for tests and benchmarks (feature `testing`), so that test
//! suites and benchmark programs do not each write their own.
//!
//! [`FakeBackend`] answers every request the same way, optionally after a delay or only once a
//! gate is opened, and counts the calls it saw and the most it held at once.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use crate::{EngineError, GenerateRequest, GenerateResponse, InferenceBackend, StopReason};

#[derive(Debug, Clone)]
enum Answer {
    /// These tokens, cut to `max_new_tokens` (then stopped by `length`).
    Fixed {
        tokens: Vec<u32>,
        logprobs: Vec<f32>,
        stop: StopReason,
    },
    /// Exactly `max_new_tokens` copies of one token (stopped by `length`).
    Fill { token: u32, logprob: f32 },
}

/// A backend with a fixed answer; see the [module docs](self).
#[derive(Debug)]
pub struct FakeBackend {
    answer: Answer,
    delay: Duration,
    gate: Option<tokio::sync::Semaphore>,
    calls: AtomicUsize,
    in_flight: AtomicUsize,
    max_in_flight: AtomicUsize,
}

impl FakeBackend {
    fn new(answer: Answer) -> Self {
        FakeBackend {
            answer,
            delay: Duration::ZERO,
            gate: None,
            calls: AtomicUsize::new(0),
            in_flight: AtomicUsize::new(0),
            max_in_flight: AtomicUsize::new(0),
        }
    }

    /// Answers `tokens` with `logprobs` and `stop`, cut to the request's `max_new_tokens` (a
    /// cut answer stops by `length`).
    pub fn fixed(tokens: Vec<u32>, logprobs: Vec<f32>, stop: StopReason) -> Self {
        assert_eq!(tokens.len(), logprobs.len(), "one logprob per token");
        FakeBackend::new(Answer::Fixed {
            tokens,
            logprobs,
            stop,
        })
    }

    /// Answers exactly `max_new_tokens` copies of `token` with `logprob`, stopped by `length`.
    pub fn filling(token: u32, logprob: f32) -> Self {
        FakeBackend::new(Answer::Fill { token, logprob })
    }

    /// Waits `delay` before each answer.
    pub fn with_delay(mut self, delay: Duration) -> Self {
        self.delay = delay;
        self
    }

    /// Holds every request until [`FakeBackend::open`] lets it through.
    pub fn gated(mut self) -> Self {
        self.gate = Some(tokio::sync::Semaphore::new(0));
        self
    }

    /// Lets `n` more gated requests through.
    pub fn open(&self, n: usize) {
        if let Some(g) = &self.gate {
            g.add_permits(n);
        }
    }

    /// Requests received so far (including those still waiting).
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::Acquire)
    }

    /// The most requests held at once (waiting at the gate or in the delay).
    pub fn max_in_flight(&self) -> usize {
        self.max_in_flight.load(Ordering::Acquire)
    }

    fn answer(&self, max_new_tokens: u32) -> GenerateResponse {
        let max = max_new_tokens as usize;
        let (output_tokens, output_logprobs, stop_reason) = match &self.answer {
            Answer::Fixed {
                tokens, logprobs, ..
            } if tokens.len() > max => (
                tokens[..max].to_vec(),
                logprobs[..max].to_vec(),
                StopReason::Length,
            ),
            Answer::Fixed {
                tokens,
                logprobs,
                stop,
            } => (tokens.clone(), logprobs.clone(), *stop),
            Answer::Fill { token, logprob } => {
                (vec![*token; max], vec![*logprob; max], StopReason::Length)
            }
        };
        GenerateResponse {
            output_tokens,
            output_logprobs,
            output_versions: None,
            stop_reason,
            ttft: None,
        }
    }
}

#[async_trait]
impl InferenceBackend for FakeBackend {
    fn name(&self) -> &'static str {
        "fake"
    }

    async fn generate(&self, request: GenerateRequest) -> Result<GenerateResponse, EngineError> {
        self.calls.fetch_add(1, Ordering::AcqRel);
        let now = self.in_flight.fetch_add(1, Ordering::AcqRel) + 1;
        self.max_in_flight.fetch_max(now, Ordering::AcqRel);
        let waited = async {
            if let Some(g) = &self.gate {
                g.acquire()
                    .await
                    .map_err(|e| EngineError::Unavailable {
                        backend: "fake",
                        message: e.to_string(),
                    })?
                    .forget();
            }
            if !self.delay.is_zero() {
                tokio::time::sleep(self.delay).await;
            }
            Ok(())
        }
        .await;
        self.in_flight.fetch_sub(1, Ordering::AcqRel);
        waited.map(|()| self.answer(request.sampling.max_new_tokens))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(max_new_tokens: u32) -> GenerateRequest {
        let mut r = GenerateRequest::new(vec![1]);
        r.sampling.max_new_tokens = max_new_tokens;
        r
    }

    #[tokio::test]
    async fn answers_cut_fill_and_count() {
        let f = FakeBackend::fixed(vec![7, 8, 2], vec![-0.1, -0.2, -0.3], StopReason::Stop);
        let a = f.generate(request(8)).await.expect("answer");
        assert_eq!(a.output_tokens, vec![7, 8, 2]);
        assert_eq!(a.stop_reason, StopReason::Stop);
        let a = f.generate(request(1)).await.expect("answer");
        assert_eq!((a.output_tokens, a.output_logprobs), (vec![7], vec![-0.1]));
        assert_eq!(a.stop_reason, StopReason::Length);
        assert_eq!(f.calls(), 2);
        let fill = FakeBackend::filling(5, -0.5);
        let a = fill.generate(request(4)).await.expect("answer");
        assert_eq!(a.output_tokens, vec![5; 4]);
        assert_eq!(a.stop_reason, StopReason::Length);
    }

    #[tokio::test]
    async fn the_gate_holds_requests_until_opened() {
        let f =
            std::sync::Arc::new(FakeBackend::fixed(vec![1], vec![0.0], StopReason::Stop).gated());
        let tasks: Vec<_> = (0..3)
            .map(|_| {
                let f = f.clone();
                tokio::spawn(async move { f.generate(request(4)).await })
            })
            .collect();
        while f.calls() < 3 {
            tokio::task::yield_now().await;
        }
        assert_eq!(f.max_in_flight(), 3);
        f.open(3);
        for t in tasks {
            assert!(t.await.expect("task").is_ok());
        }
    }
}
