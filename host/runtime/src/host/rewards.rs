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

use crate::bindings::rewards::{self, ScoreResult};
use crate::bindings::types::{Error, RewardInput};
use crate::episode::EpisodeState;
use crate::episode::RewardRecord;
use crate::fault::truncate;
use crate::limits::Setting;
use crate::untrusted::score_with_retries;

/// `kind: message` for an error value, as recorded in reports.
pub(crate) fn describe(e: &Error) -> String {
    let (kind, msg) = match e {
        Error::InvalidArgument(m) => ("invalid_argument", m),
        Error::LimitExceeded(m) => ("limit_exceeded", m),
        Error::Unknown(m) => ("unknown", m),
        Error::Unavailable(m) => ("unavailable", m),
        Error::Timeout(m) => ("timeout", m),
        Error::Trapped(m) => ("trapped", m),
        Error::InvalidOutput(m) => ("invalid_output", m),
        Error::Unsupported(m) => ("unsupported", m),
    };
    format!("{kind}: {msg}")
}

/// The `unknown` error for a name not in a registry (shared with `tools`).
pub(crate) fn unknown(what: &str, name: &str, names: &[String]) -> Error {
    let registered = if names.is_empty() {
        "none".to_string()
    } else {
        names.join(", ")
    };
    Error::Unknown(format!(
        "no {what} named `{}` is registered (registered: {registered}); register one under that name",
        truncate(name, 256)
    ))
}

impl rewards::Host for EpisodeState {
    async fn score(
        &mut self,
        name: String,
        input: RewardInput,
    ) -> wasmtime::Result<Result<ScoreResult, Error>> {
        let made = self.ctx.reward_calls.len();
        let max = self.ctx.limits.max_reward_calls;
        if made >= max as usize {
            return Ok(Err(self.ctx.refuse(
                Setting::Limit("max_reward_calls"),
                format!(
                    "this episode reached its limit of {max} reward calls (`max_reward_calls`)"
                ),
            )?));
        }
        let (services, catalog) = (self.ctx.services.clone(), self.ctx.catalog.clone());
        let Some(reg) = catalog.reward(&services, &name) else {
            return Ok(Err(unknown(
                "reward",
                &name,
                &catalog.reward_names(&services),
            )));
        };
        let (result, accounting) =
            score_with_retries(&name, &reg, input, &services, &catalog).await;
        self.ctx.reward_calls.push(RewardRecord {
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
        Ok(self.ctx.catalog.reward_names(&self.ctx.services))
    }
}
