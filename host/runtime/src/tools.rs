//! Host side of the `tools` interface: call a registered tool component in its own sandbox
//! with the same limits model as rewards. Failures are values (`unknown`, `timeout`,
//! `trapped`, `invalid-output`), never traps of the calling workflow.

use crate::bindings::tools::{self, ToolResult};
use crate::bindings::types::Error;
use crate::rewards::unknown;
use crate::state::StoreState;
use crate::untrusted::call_with_retries;

impl tools::Host for StoreState {
    async fn call(
        &mut self,
        name: String,
        args: String,
    ) -> wasmtime::Result<Result<ToolResult, Error>> {
        let services = self.ctx.services.clone();
        let Some(reg) = services.tool(&name) else {
            return Ok(Err(unknown(
                "tool",
                "--tool",
                &name,
                &services.tool_names(),
            )));
        };
        Ok(call_with_retries(&name, &reg, args, &services).await)
    }

    async fn names(&mut self) -> wasmtime::Result<Vec<String>> {
        Ok(self.ctx.services.tool_names())
    }
}
