//! The kinds of component a [`Runtime`](crate::Runtime) loads ([`Load`]: workflows, rewards,
//! tools, environments), the two it calls outside an episode ([`Callable`]: rewards and tools)
//! and the two instances it keeps across calls ([`Opens`]: tool sessions and environment
//! episodes), so that loading, registering, calling once and opening are one generic method
//! each.

use std::future::Future;
use std::sync::Arc;

use wasmtime::component::Component;

use crate::bindings;
use crate::budget::HostMemory;
use crate::component::{
    ComponentInfo, EnvironmentComponent, RewardComponent, ToolComponent, link_error,
};
use crate::episode::WorkflowComponent;
use crate::host::tools::NestedTools;
use crate::limits::Limits;
use crate::pool::Pool;
use crate::registry::{Registered, Registries};
use crate::scope::Scope;
use crate::services::Services;
use crate::session::{EnvSession, ToolSession};
use crate::untrusted::{CallReport, RewardCall, describe_once, score_once, tool_once};
use crate::world::WorldKind;

mod sealed {
    pub trait Sealed {}
}

/// A component kind [`Runtime::load`](crate::Runtime::load) returns: the world it must target
/// and how it is linked. Implemented by [`WorkflowComponent`], [`RewardComponent`],
/// [`ToolComponent`] and [`EnvironmentComponent`] only.
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
impl sealed::Sealed for EnvironmentComponent {}
impl sealed::Sealed for ToolSession {}
impl sealed::Sealed for EnvSession {}

/// What [`Runtime::open_session`](crate::Runtime::open_session) opens: a [`ToolSession`] of a
/// registered tool, named by a `&str`, or an [`EnvSession`], an episode of the environment an
/// [`EnvTarget`] gives. Implemented by those two only.
pub trait Opens: Sized + sealed::Sealed {
    /// What names what is opened.
    type Target<'a>: Send;
    #[doc(hidden)]
    fn open<'a>(
        cx: OpenCx<'a>,
        target: Self::Target<'a>,
    ) -> impl Future<Output = anyhow::Result<Self>> + Send + 'a;
}

/// An environment to open an episode of: its name in messages, the component, and the limits
/// of each call (the timeout) and of the episode's life (memory, fuel), capped by the scope's.
pub struct EnvTarget<'a> {
    /// The environment's name, for messages.
    pub name: &'a str,
    /// The loaded component.
    pub component: &'a EnvironmentComponent,
    /// Its limits.
    pub limits: Arc<Limits>,
}

/// What opening needs of the runtime.
#[doc(hidden)]
pub struct OpenCx<'a> {
    pub(crate) services: &'a Arc<Services>,
    pub(crate) registries: &'a Arc<Registries>,
    pub(crate) scope: &'a Scope,
    pub(crate) fuel: bool,
}

impl Opens for ToolSession {
    type Target<'a> = &'a str;
    async fn open<'a>(cx: OpenCx<'a>, name: &'a str) -> anyhow::Result<Self> {
        if let Some(reg) = cx.scope.tool(cx.registries, name)
            && let Err(message) = crate::limits::enforceable(cx.fuel, &reg.policy.limits)
        {
            anyhow::bail!("tool `{name}`: {message}");
        }
        ToolSession::open(cx.services, cx.registries, cx.scope, name, false)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "opening a session of tool `{name}` failed: {}",
                    crate::untrusted::describe(&e)
                )
            })
    }
}

impl Opens for EnvSession {
    type Target<'a> = EnvTarget<'a>;
    async fn open<'a>(cx: OpenCx<'a>, target: EnvTarget<'a>) -> anyhow::Result<Self> {
        let name = target.name;
        let caps = &cx.scope.caps().limits;
        let limits = match caps.is_empty() {
            true => target.limits,
            false => Arc::new(target.limits.capped(caps)),
        };
        limits
            .validate()
            .map_err(|e| anyhow::anyhow!("environment `{name}`: {e}"))?;
        crate::limits::enforceable(cx.fuel, &limits)
            .map_err(|e| anyhow::anyhow!("environment `{name}`: {e}"))?;
        let tools = Arc::new(NestedTools::new(
            cx.services.clone(),
            cx.registries.clone(),
            cx.scope.clone(),
        ));
        EnvSession::open(cx.services, name, target.component, limits, cx.fuel, tools)
            .await
            .map_err(|e| {
                anyhow::anyhow!(
                    "opening environment `{name}` failed: {}",
                    crate::untrusted::describe(&e)
                )
            })
    }
}

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

impl Load for EnvironmentComponent {
    const WORLD: WorldKind = WorldKind::Environment;
    fn link(pool: &Pool, info: ComponentInfo, component: &Component) -> anyhow::Result<Self> {
        // The reward world's imports (`types`, `log`, `tools`) are an environment's.
        let pre = pool
            .reward_linker
            .instantiate_pre(component)
            .map_err(|e| link_error(&info, e))?;
        let pre =
            bindings::environment::EnvironmentPre::new(pre).map_err(|e| link_error(&info, e))?;
        Ok(EnvironmentComponent { info, pre })
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
