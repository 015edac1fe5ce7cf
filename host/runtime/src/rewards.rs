//! Host side of the `rewards` interface.
//!
//! No reward components are registered by this runtime yet: `score` returns an `unknown` value
//! naming the registered rewards (none) and how to register one. Never traps.

use crate::bindings::rewards::{self, ScoreResult};
use crate::bindings::types::{Error, RewardInput};
use crate::state::StoreState;

impl rewards::Host for StoreState {
    async fn score(
        &mut self,
        name: String,
        _input: RewardInput,
    ) -> wasmtime::Result<Result<ScoreResult, Error>> {
        Ok(Err(Error::Unknown(format!(
            "no reward named `{}` is registered (registered: none); register one with --reward NAME=PATH",
            crate::fault::truncate(&name, 256)
        ))))
    }

    async fn names(&mut self) -> wasmtime::Result<Vec<String>> {
        Ok(Vec::new())
    }
}
