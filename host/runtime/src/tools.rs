//! Host side of the `tools` interface.
//!
//! No tool components are registered by this runtime yet: `call` returns an `unknown` value
//! naming the registered tools (none) and how to register one. Never traps.

use crate::bindings::tools::{self, ToolResult};
use crate::bindings::types::Error;
use crate::state::StoreState;

impl tools::Host for StoreState {
    async fn call(
        &mut self,
        name: String,
        _args: String,
    ) -> wasmtime::Result<Result<ToolResult, Error>> {
        Ok(Err(Error::Unknown(format!(
            "no tool named `{}` is registered (registered: none); register one with --tool NAME=PATH",
            crate::fault::truncate(&name, 256)
        ))))
    }

    async fn names(&mut self) -> wasmtime::Result<Vec<String>> {
        Ok(Vec::new())
    }
}
