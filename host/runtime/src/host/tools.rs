//! Host side of the `tools` interface: call registered tool components, each call in its own
//! sandbox with the same limits model as rewards, alone or several at once, and describe them
//! as OpenAI tool schemas. Failures are values (`unknown`, `timeout`, `trapped`,
//! `invalid-output`), never traps of the calling workflow or reward.
//!
//! Fair shares: an episode has at most `tool_calls_per_episode` calls in flight, and tool
//! calls never hold the untrusted pool's slots reserved for rewards (`reward_reserve`); time
//! spent queued counts against the calling episode's deadline. A reward (a code reward running
//! test cases) has at most [`TOOL_CALLS_PER_REWARD`] in flight, drawn from a pool of their own
//! (the reward holds an untrusted-pool slot while it waits), and its deadline covers them.

use std::sync::Arc;

use wasmtime::component::Resource;

use crate::bindings::tools::{self, Session, ToolCall, ToolResult};
use crate::bindings::types::Error;
use crate::registry::Registries;
use crate::scope::Scope;
use crate::services::{Services, tool_calls_per_episode};
use crate::session::ToolSession;
use crate::slots::Slots;
use crate::state::{CallCtx, GuestSession, HostFuture, RewardTools};
use crate::untrusted::{call_with_retries, tool_schema, unknown};
use crate::views::CallsView;

/// Calls one `call-many` accepts. More are refused with `limit-exceeded` (every result).
pub const MAX_CALL_MANY_CALLS: usize = 256;

/// Tool calls one reward call may have in flight at once.
pub(crate) const TOOL_CALLS_PER_REWARD: usize = 4;

/// The tools as a reward call reaches them: the host's services and registered tools, the
/// scope of the episode that called the reward (or the default one), and the call's own
/// in-flight slots.
#[derive(Clone)]
pub(crate) struct NestedTools {
    services: Arc<Services>,
    registries: Arc<Registries>,
    scope: Scope,
    in_flight: Arc<Slots>,
}

impl NestedTools {
    pub(crate) fn new(services: Arc<Services>, registries: Arc<Registries>, scope: Scope) -> Self {
        NestedTools {
            services,
            registries,
            scope,
            in_flight: Arc::new(Slots::new(TOOL_CALLS_PER_REWARD)),
        }
    }
}

impl RewardTools for NestedTools {
    fn call(&self, name: String, args: String) -> HostFuture<'_, Result<ToolResult, Error>> {
        Box::pin(call_one(
            &self.services,
            &self.registries,
            &self.scope,
            &self.in_flight,
            name,
            args,
            true,
        ))
    }

    fn call_many(
        &self,
        calls: Vec<ToolCall>,
    ) -> HostFuture<'_, wasmtime::Result<Vec<Result<ToolResult, Error>>>> {
        Box::pin(call_many(
            &self.services,
            &self.registries,
            &self.scope,
            &self.in_flight,
            calls,
            true,
        ))
    }

    fn names(&self) -> Vec<String> {
        self.scope.tool_names(&self.registries)
    }

    fn schemas(&self) -> HostFuture<'_, Result<serde_json::Value, Error>> {
        Box::pin(schemas(&self.services, &self.registries, &self.scope))
    }

    fn open_session(&self, name: String) -> HostFuture<'_, Result<Arc<dyn GuestSession>, Error>> {
        Box::pin(async move {
            let s = ToolSession::open(&self.services, &self.registries, &self.scope, &name, true)
                .await?;
            Ok(Arc::new(s) as Arc<dyn GuestSession>)
        })
    }
}

/// One call by name, once one of the caller's `in_flight` slots is free: `unknown` when the
/// scope reaches nothing under it.
async fn call_one(
    services: &Services,
    registries: &Registries,
    scope: &Scope,
    in_flight: &Slots,
    name: String,
    args: String,
    by_reward: bool,
) -> Result<ToolResult, Error> {
    let Some(reg) = scope.tool(registries, &name) else {
        return Err(unknown("tool", &name, &scope.tool_names(registries)));
    };
    let _slot = in_flight.take().await;
    call_with_retries(&name, &reg, args, services, by_reward).await
}

/// `call-many`: every call waits for one of the caller's `in_flight` slots, then for its pool
/// (an episode's: the tools' share of the untrusted pool, then a pool slot, so tools never
/// take the rewards' reserve; a reward's: the pool of tool calls made by rewards). The wait
/// counts against the caller's deadline. Dropping the set (the caller cancelled or timed out)
/// aborts the calls in flight and queued.
async fn call_many(
    services: &Arc<Services>,
    registries: &Arc<Registries>,
    scope: &Scope,
    in_flight: &Arc<Slots>,
    calls: Vec<ToolCall>,
    by_reward: bool,
) -> wasmtime::Result<Vec<Result<ToolResult, Error>>> {
    if calls.len() > MAX_CALL_MANY_CALLS {
        let e = Error::LimitExceeded(format!(
            "call-many got {} calls; at most {MAX_CALL_MANY_CALLS} per call",
            calls.len()
        ));
        return Ok(vec![Err(e); calls.len()]);
    }
    let n = calls.len();
    let mut set = tokio::task::JoinSet::new();
    for (index, c) in calls.into_iter().enumerate() {
        let (services, registries, scope) = (services.clone(), registries.clone(), scope.clone());
        let in_flight = in_flight.clone();
        set.spawn(async move {
            let r = call_one(
                &services,
                &registries,
                &scope,
                &in_flight,
                c.name,
                c.args,
                by_reward,
            )
            .await;
            (index, r)
        });
    }
    let mut results: Vec<Option<Result<ToolResult, Error>>> = (0..n).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        let (index, r) = joined?;
        results[index] = Some(r);
    }
    Ok(results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(Error::Trapped("tool call lost".into()))))
        .collect())
}

impl CallsView<'_> {
    /// The episode's tool-call slots (made on first use).
    fn tool_calls(&mut self) -> Arc<Slots> {
        let services = self.services;
        self.calls
            .tool_calls
            .get_or_insert_with(|| {
                Arc::new(Slots::new(tool_calls_per_episode(
                    services.untrusted_pool_size(),
                )))
            })
            .clone()
    }
}

/// The OpenAI schema of every tool the scope reaches, in name order (`tools.schemas`).
pub(crate) async fn schemas(
    services: &Services,
    registries: &Registries,
    scope: &Scope,
) -> Result<serde_json::Value, Error> {
    let mut out = Vec::new();
    for name in scope.tool_names(registries) {
        if let Some(reg) = scope.tool(registries, &name) {
            out.push(tool_schema(&name, &reg, services).await?);
        }
    }
    Ok(serde_json::Value::Array(out))
}

impl tools::Host for CallsView<'_> {
    async fn call(
        &mut self,
        name: String,
        args: String,
    ) -> wasmtime::Result<Result<ToolResult, Error>> {
        let (services, scope) = (self.services.clone(), self.calls.scope.clone());
        let registries = self.calls.registries.clone();
        let in_flight = self.tool_calls();
        Ok(call_one(
            &services,
            &registries,
            &scope,
            &in_flight,
            name,
            args,
            false,
        )
        .await)
    }

    async fn call_many(
        &mut self,
        calls: Vec<ToolCall>,
    ) -> wasmtime::Result<Vec<Result<ToolResult, Error>>> {
        let (services, scope) = (self.services.clone(), self.calls.scope.clone());
        let registries = self.calls.registries.clone();
        let in_flight = self.tool_calls();
        call_many(&services, &registries, &scope, &in_flight, calls, false).await
    }

    async fn names(&mut self) -> wasmtime::Result<Vec<String>> {
        Ok(self.calls.scope.tool_names(&self.calls.registries))
    }

    async fn schemas(&mut self) -> wasmtime::Result<Result<String, Error>> {
        let (services, scope) = (self.services.clone(), self.calls.scope.clone());
        let registries = self.calls.registries.clone();
        Ok(schemas(&services, &registries, &scope)
            .await
            .map(|s| s.to_string()))
    }
}

/// What a reward that calls a tool gets where no tools are reachable (a reward called alone,
/// outside any host's services).
fn no_tools() -> Error {
    Error::Unavailable("no tools are registered where this reward runs".into())
}

/// A reward's `tools`: the host's registered tools, each call in a fresh sandbox of its own.
/// (The tool world does not import `tools`; a tool's store never holds them.)
impl tools::Host for CallCtx {
    async fn call(
        &mut self,
        name: String,
        args: String,
    ) -> wasmtime::Result<Result<ToolResult, Error>> {
        let Some(n) = self.nested.clone() else {
            return Ok(Err(no_tools()));
        };
        Ok(n.call(name, args).await)
    }

    async fn call_many(
        &mut self,
        calls: Vec<ToolCall>,
    ) -> wasmtime::Result<Vec<Result<ToolResult, Error>>> {
        let Some(n) = self.nested.clone() else {
            return Ok(vec![Err(no_tools()); calls.len()]);
        };
        n.call_many(calls).await
    }

    async fn names(&mut self) -> wasmtime::Result<Vec<String>> {
        Ok(self.nested.as_ref().map(|n| n.names()).unwrap_or_default())
    }

    async fn schemas(&mut self) -> wasmtime::Result<Result<String, Error>> {
        let Some(n) = self.nested.clone() else {
            return Ok(Ok("[]".into()));
        };
        Ok(n.schemas().await.map(|s| s.to_string()))
    }
}

/// An episode's `session`: a session of a tool its scope reaches, its calls drawing on the
/// tools' share of the pool.
impl tools::HostSession for CallsView<'_> {
    async fn open(&mut self, name: String) -> wasmtime::Result<Result<Resource<Session>, Error>> {
        let (services, scope) = (self.services.clone(), self.calls.scope.clone());
        let registries = self.calls.registries.clone();
        let opened = ToolSession::open(&services, &registries, &scope, &name, false).await;
        Ok(opened.and_then(|s| self.call.sessions.insert(Arc::new(s))))
    }

    async fn call(
        &mut self,
        session: Resource<Session>,
        args: String,
    ) -> wasmtime::Result<Result<ToolResult, Error>> {
        let session = self.call.sessions.get(&session)?;
        Ok(session.call(args).await)
    }

    async fn drop(&mut self, session: Resource<Session>) -> wasmtime::Result<()> {
        self.call.sessions.remove(session);
        Ok(())
    }
}

/// A reward's `session`: its calls draw on the pool of tool calls made by rewards.
impl tools::HostSession for CallCtx {
    async fn open(&mut self, name: String) -> wasmtime::Result<Result<Resource<Session>, Error>> {
        let Some(n) = self.nested.clone() else {
            return Ok(Err(no_tools()));
        };
        let opened = n.open_session(name).await;
        Ok(opened.and_then(|s| self.sessions.insert(s)))
    }

    async fn call(
        &mut self,
        session: Resource<Session>,
        args: String,
    ) -> wasmtime::Result<Result<ToolResult, Error>> {
        let session = self.sessions.get(&session)?;
        Ok(session.call(args).await)
    }

    async fn drop(&mut self, session: Resource<Session>) -> wasmtime::Result<()> {
        self.sessions.remove(session);
        Ok(())
    }
}
