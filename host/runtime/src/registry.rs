//! What a registered reward or tool is: its component, how it is called ([`CallPolicy`]) and
//! whether fuel is metered for it. [`Registries`] keeps them by name; `untrusted` runs
//! them.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use crate::component::{RewardComponent, ToolComponent};

use crate::limits::Limits;

/// How a registered reward or tool is called: its limits and how often a failed attempt is
/// retried. Defaults follow AReaL's `AsyncRewardWrapper`: 15 s, 3 retries, 256 MiB.
#[derive(Debug, Clone)]
pub struct CallPolicy {
    /// Limits of each attempt (`Limits::untrusted_call()` by default).
    pub limits: Arc<Limits>,
    /// Attempts after the first one. Default 3.
    pub retries: u32,
}

impl CallPolicy {
    /// The default for tools: [`Limits::untrusted_tool`] (5 s, 128 MiB) and no retries (a
    /// tool's failure is an observation for the agent; running model-written code again after
    /// a timeout would only time out again).
    pub fn tool() -> Self {
        CallPolicy {
            limits: Arc::new(Limits::untrusted_tool()),
            retries: 0,
        }
    }
}

impl Default for CallPolicy {
    fn default() -> Self {
        CallPolicy {
            limits: Arc::new(Limits::untrusted_call()),
            retries: 3,
        }
    }
}

/// A reward or tool component registered under a name, with what it takes to run it.
pub struct Registered<C> {
    pub(crate) component: C,
    pub(crate) policy: CallPolicy,
    pub(crate) fuel_metering: bool,
}

impl<C> Registered<C> {
    /// The component.
    pub fn component(&self) -> &C {
        &self.component
    }

    /// Its call policy.
    pub fn policy(&self) -> &CallPolicy {
        &self.policy
    }
}

/// The rewards and tools registered in a runtime, by name ([`Runtime::register`](crate::Runtime::register));
/// a caller reaches them through its [`Scope`](crate::Scope).
#[derive(Default)]
pub struct Registries {
    rewards: RwLock<BTreeMap<String, Arc<Registered<RewardComponent>>>>,
    tools: RwLock<BTreeMap<String, Arc<Registered<ToolComponent>>>>,
}

impl Registries {
    pub(crate) fn add_reward(&self, name: String, reg: Registered<RewardComponent>) {
        let mut map = self.rewards.write().unwrap_or_else(|p| p.into_inner());
        map.insert(name, Arc::new(reg));
    }

    pub(crate) fn add_tool(&self, name: String, reg: Registered<ToolComponent>) {
        let mut map = self.tools.write().unwrap_or_else(|p| p.into_inner());
        map.insert(name, Arc::new(reg));
    }

    /// The reward registered under `name`.
    pub fn reward(&self, name: &str) -> Option<Arc<Registered<RewardComponent>>> {
        self.rewards
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// The tool registered under `name`.
    pub fn tool(&self, name: &str) -> Option<Arc<Registered<ToolComponent>>> {
        self.tools
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .cloned()
    }

    /// Registered reward names, sorted.
    pub fn reward_names(&self) -> Vec<String> {
        self.rewards
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    /// Registered tool names, sorted.
    pub fn tool_names(&self) -> Vec<String> {
        self.tools
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }
}
