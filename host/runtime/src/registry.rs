//! What a registered reward or tool is: its component, how it is called ([`CallPolicy`]) and
//! whether fuel is metered for it. [`crate::Services`] keeps them by name; `untrusted` runs
//! them.

use std::sync::Arc;

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
