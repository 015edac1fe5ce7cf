//! One sandboxed call of a reward or tool component: a fresh instance, the untrusted-call
//! limits, and the outcome with its accounting. Retries and registries build on this.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::bindings::types::RewardInput;
use crate::component::{RewardComponent, ToolComponent};
use crate::fault::{GuestFault, MAX_FAULT_MESSAGE_BYTES, truncate};
use crate::limits::Limits;
use crate::runtime::Runtime;
use crate::sandbox::{fuel_consumed, guarded, new_store};

/// What one attempt of a reward or tool call produced and cost.
#[derive(Debug, Clone)]
pub struct CallReport<T> {
    /// The value, or why there is none.
    pub result: Result<T, GuestFault>,
    /// Wall time of the attempt.
    pub wall: Duration,
    /// Largest linear memory, bytes.
    pub peak_memory_bytes: usize,
    /// Fuel consumed, when metering is on.
    pub fuel_consumed: Option<u64>,
    /// Captured stderr (bounded), for diagnosing a failure.
    pub stderr: String,
}

/// Input of a reward call (AReaL's reward-function arguments).
#[derive(Debug, Clone, Default)]
pub struct RewardCall {
    /// Decoded prompt.
    pub prompt: String,
    /// Decoded completion.
    pub completion: String,
    /// Prompt token ids.
    pub prompt_ids: Vec<u32>,
    /// Completion token ids.
    pub completion_ids: Vec<u32>,
    /// The dataset row.
    pub data: serde_json::Value,
}

impl Runtime {
    /// Score once with `reward` in a fresh sandbox. A NaN or infinite score is an
    /// `InvalidOutput` fault.
    pub async fn call_reward(
        &self,
        reward: &RewardComponent,
        call: RewardCall,
        limits: Arc<Limits>,
    ) -> CallReport<f64> {
        let input = RewardInput {
            prompt: call.prompt,
            completion: call.completion,
            prompt_ids: call.prompt_ids,
            completion_ids: call.completion_ids,
            data: call.data.to_string(),
        };
        let pre = reward.pre.clone();
        let id = format!("reward:{}", short(&reward.info.sha256));
        self.untrusted(id, limits, move |store| {
            Box::pin(async move {
                let b = pre.instantiate_async(&mut *store).await?;
                b.call_score(&mut *store, &input).await
            })
        })
        .await
        .and_then(|v| {
            if v.is_finite() {
                Ok(v)
            } else {
                Err(GuestFault::InvalidOutput {
                    message: format!("the reward returned {v}; return a finite number"),
                })
            }
        })
    }

    /// Call `tool` once in a fresh sandbox.
    pub async fn call_tool(
        &self,
        tool: &ToolComponent,
        name: String,
        args: String,
        limits: Arc<Limits>,
    ) -> CallReport<String> {
        let pre = tool.pre.clone();
        let id = format!("tool:{}", short(&tool.info.sha256));
        self.untrusted(id, limits, move |store| {
            Box::pin(async move {
                let b = pre.instantiate_async(&mut *store).await?;
                b.call_call(&mut *store, &name, &args).await
            })
        })
        .await
    }

    async fn untrusted<T>(
        &self,
        id: String,
        limits: Arc<Limits>,
        call: impl for<'a> FnOnce(
            &'a mut wasmtime::Store<crate::state::StoreState>,
        ) -> crate::sandbox::GuestFuture<'a, Result<T, String>>,
    ) -> CallReport<T> {
        let start = Instant::now();
        let mut store = new_store(self, id, limits);
        let result = match guarded(&mut store, call).await {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(message)) => Err(GuestFault::GuestError {
                message: truncate(&message, MAX_FAULT_MESSAGE_BYTES),
            }),
            Err(f) => Err(f),
        };
        CallReport {
            result,
            wall: start.elapsed(),
            peak_memory_bytes: store.data().limiter.peak_bytes(),
            fuel_consumed: fuel_consumed(self, &store),
            stderr: store.data().ctx.stderr.take().0,
        }
    }
}

impl<T> CallReport<T> {
    fn and_then<U>(self, f: impl FnOnce(T) -> Result<U, GuestFault>) -> CallReport<U> {
        CallReport {
            result: self.result.and_then(f),
            wall: self.wall,
            peak_memory_bytes: self.peak_memory_bytes,
            fuel_consumed: self.fuel_consumed,
            stderr: self.stderr,
        }
    }
}

fn short(sha: &str) -> &str {
    sha.get(..12).unwrap_or(sha)
}
