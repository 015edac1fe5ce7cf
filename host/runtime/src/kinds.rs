//! The kinds of component a [`Runtime`](crate::Runtime) loads ([`Load`]: workflows, rewards,
//! tools) and the two it calls outside an episode ([`Callable`]: rewards and tools), so that
//! loading, registering and calling once are one generic method each.

use std::future::Future;
use std::sync::Arc;

use wasmtime::component::Component;

use crate::bindings;
use crate::budget::HostMemory;
use crate::component::{ComponentInfo, RewardComponent, ToolComponent, link_error};
use crate::episode::WorkflowComponent;
use crate::limits::Limits;
use crate::pool::Pool;
use crate::registry::{Registered, Registries};
use crate::untrusted::{CallReport, RewardCall, describe_once, score_once, tool_once};
use crate::world::WorldKind;

mod sealed {
    pub trait Sealed {}
}

/// A component kind [`Runtime::load`](crate::Runtime::load) returns: the world it must target
/// and how it is linked. Implemented by [`WorkflowComponent`], [`RewardComponent`] and
/// [`ToolComponent`] only.
pub trait Load: Sized + sealed::Sealed {
    /// The world a component of this kind targets.
    const WORLD: WorldKind;
    #[doc(hidden)]
    fn link(pool: &Pool, info: ComponentInfo, component: &Component) -> anyhow::Result<Self>;
}

/// What one call of a tool outside an episode asks ([`Runtime::call_once`](crate::Runtime::call_once)).
#[derive(Debug, Clone)]
pub enum ToolInput {
    /// `call(name, args)`: the tool's name as the model gave it and its JSON arguments.
    Call {
        /// The function name.
        name: String,
        /// Its arguments, JSON text.
        args: String,
    },
    /// `describe()`: the tool's OpenAI schema (a component built before WIT 0.1.1 has none: an
    /// `Instantiate` fault naming the missing export).
    Describe,
}

/// A reward or a tool: registered by name, brought into a [`Scope`](crate::Scope) and called
/// once in a fresh sandbox through the same generic methods.
pub trait Callable: Load + Clone + Send + Sync + 'static {
    /// What one call takes.
    type Input: Send + 'static;
    /// What one call returns.
    type Output: Send + 'static;
    #[doc(hidden)]
    const KIND: &'static str;
    #[doc(hidden)]
    fn info(&self) -> &ComponentInfo;
    #[doc(hidden)]
    fn add(registries: &Registries, name: String, reg: Registered<Self>);
    #[doc(hidden)]
    fn once(
        &self,
        fuel: bool,
        input: Self::Input,
        limits: Arc<Limits>,
        host: Arc<HostMemory>,
    ) -> impl Future<Output = CallReport<Self::Output>> + Send;
}

impl sealed::Sealed for WorkflowComponent {}
impl sealed::Sealed for RewardComponent {}
impl sealed::Sealed for ToolComponent {}

impl Load for WorkflowComponent {
    const WORLD: WorldKind = WorldKind::Workflow;
    fn link(pool: &Pool, info: ComponentInfo, component: &Component) -> anyhow::Result<Self> {
        let pre = pool
            .workflow_linker
            .instantiate_pre(component)
            .map_err(|e| link_error(&info, e))?;
        let pre = bindings::workflow::WorkflowPre::new(pre).map_err(|e| link_error(&info, e))?;
        Ok(WorkflowComponent { info, pre })
    }
}

impl Load for RewardComponent {
    const WORLD: WorldKind = WorldKind::Reward;
    fn link(pool: &Pool, info: ComponentInfo, component: &Component) -> anyhow::Result<Self> {
        let pre = pool
            .reward_linker
            .instantiate_pre(component)
            .map_err(|e| link_error(&info, e))?;
        let pre = bindings::reward::RewardPre::new(pre).map_err(|e| link_error(&info, e))?;
        Ok(RewardComponent { info, pre })
    }
}

impl Load for ToolComponent {
    const WORLD: WorldKind = WorldKind::Tool;
    fn link(pool: &Pool, info: ComponentInfo, component: &Component) -> anyhow::Result<Self> {
        let pre = pool
            .tool_linker
            .instantiate_pre(component)
            .map_err(|e| link_error(&info, e))?;
        Ok(ToolComponent {
            info,
            pre,
            description: Default::default(),
        })
    }
}

impl Callable for RewardComponent {
    type Input = RewardCall;
    type Output = f64;
    const KIND: &'static str = "reward";
    fn info(&self) -> &ComponentInfo {
        &self.info
    }
    fn add(registries: &Registries, name: String, reg: Registered<Self>) {
        registries.add_reward(name, reg);
    }
    async fn once(
        &self,
        fuel: bool,
        input: RewardCall,
        limits: Arc<Limits>,
        host: Arc<HostMemory>,
    ) -> CallReport<f64> {
        score_once(fuel, self, input.into(), limits, host, None).await
    }
}

impl Callable for ToolComponent {
    type Input = ToolInput;
    type Output = String;
    const KIND: &'static str = "tool";
    fn info(&self) -> &ComponentInfo {
        &self.info
    }
    fn add(registries: &Registries, name: String, reg: Registered<Self>) {
        registries.add_tool(name, reg);
    }
    async fn once(
        &self,
        fuel: bool,
        input: ToolInput,
        limits: Arc<Limits>,
        host: Arc<HostMemory>,
    ) -> CallReport<String> {
        match input {
            ToolInput::Call { name, args } => tool_once(fuel, self, name, args, limits, host).await,
            ToolInput::Describe => describe_once(fuel, self, limits, host).await,
        }
    }
}
