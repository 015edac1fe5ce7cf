//! Host side of the `rewards` interface: score with a registered reward component in its own
//! sandbox (fresh instance, the reward's limits, retries, 0.0 after the last timeout).
//!
//! Limit: `max_reward_calls` per episode (soft: reported once as `limit-exceeded`, then a
//! trap), which also bounds the records kept for the report.
//!
//! Failures are values, never traps of the calling workflow: `unknown` (lists the registered
//! names), `timeout` is not returned (the 0.0 fallback is, with `timed-out` set), `trapped` and
//! `invalid-output` after the last attempt. Every call's accounting is kept in the episode
//! report.

use std::sync::Arc;

use crate::bindings::rewards::{self, ScoreResult};
use crate::bindings::types::{Error, RewardInput};
use crate::fault::truncate;
use crate::host::tools::NestedTools;
use crate::limits::Setting;
use crate::untrusted::{describe, score_with_retries, unknown};
use crate::views::{CallsView, RewardRecord};

impl rewards::Host for CallsView<'_> {
    async fn score(
        &mut self,
        name: String,
        input: RewardInput,
    ) -> wasmtime::Result<Result<ScoreResult, Error>> {
        let made = self.calls.reward_calls.len();
        let max = self.call.limits.max_reward_calls;
        if made >= max as usize {
            return Ok(Err(self.call.refuse(
                Setting::Limit("max_reward_calls"),
                format!(
                    "this episode reached its limit of {max} reward calls (`max_reward_calls`)"
                ),
            )?));
        }
        let (services, scope) = (self.services.clone(), self.calls.scope.clone());
        let registries = self.calls.registries.clone();
        let Some(reg) = scope.reward(&registries, &name) else {
            return Ok(Err(unknown(
                "reward",
                &name,
                &scope.reward_names(&registries),
            )));
        };
        let tools = NestedTools::new(services.clone(), registries, scope);
        let (result, accounting) =
            score_with_retries(&name, &reg, input, &services, Arc::new(tools)).await;
        self.calls.reward_calls.push(RewardRecord {
            name: truncate(&name, 256),
            value: result.as_ref().ok().map(|r| r.value),
            timed_out: result.as_ref().map(|r| r.timed_out).unwrap_or(false),
            wall_us: accounting.wall_us,
            fuel: accounting.fuel,
            peak_memory_bytes: accounting.peak_memory_bytes,
            attempts: accounting.attempts,
            error: result.as_ref().err().map(describe),
        });
        Ok(result)
    }

    async fn names(&mut self) -> wasmtime::Result<Vec<String>> {
        Ok(self.calls.scope.reward_names(&self.calls.registries))
    }
}
