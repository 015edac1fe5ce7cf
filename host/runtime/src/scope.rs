//! [`Scope`]: who is calling. What one caller reaches by name through `rewards` and `tools`
//! (the host's registered components, all of them or only those a tenant may use, and any a
//! request brought, which take their name over for that caller alone) and the caps its
//! episodes and calls run under.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::component::{RewardComponent, ToolComponent};
use crate::limit_spec::Caps;
use crate::registry::Registered;
use crate::registry::Registries;

/// Who is calling: the rewards and tools it reaches by name (every registered one, or only
/// those a tenant may use, plus any its request brought) and the [`Caps`] every episode and
/// call it makes runs under. The default reaches every registered component, uncapped. Cheap
/// to clone: an episode carries its scope, and so does every reward call it makes (the tools a
/// code reward runs are looked up, and capped, by the same one).
#[derive(Clone, Default)]
pub struct Scope {
    inner: Arc<Reach>,
}

#[derive(Clone, Default)]
struct Reach {
    rewards: Shelf<RewardComponent>,
    tools: Shelf<ToolComponent>,
    caps: Caps,
}

/// One kind's part of a catalog.
struct Shelf<C> {
    /// Registered names the caller may reach (`None`: all).
    only: Option<BTreeSet<String>>,
    /// Brought by the request, by the name it gave; ahead of registered ones.
    brought: BTreeMap<String, Arc<Registered<C>>>,
}

impl<C> Default for Shelf<C> {
    fn default() -> Self {
        Shelf {
            only: None,
            brought: BTreeMap::new(),
        }
    }
}

impl<C> Clone for Shelf<C> {
    fn clone(&self) -> Self {
        Shelf {
            only: self.only.clone(),
            brought: self.brought.clone(),
        }
    }
}

impl<C> Shelf<C> {
    fn get(
        &self,
        name: &str,
        registered: impl FnOnce(&str) -> Option<Arc<Registered<C>>>,
    ) -> Option<Arc<Registered<C>>> {
        if let Some(r) = self.brought.get(name) {
            return Some(r.clone());
        }
        if self.only.as_ref().is_some_and(|o| !o.contains(name)) {
            return None;
        }
        registered(name)
    }

    fn names(&self, registered: Vec<String>) -> Vec<String> {
        let mut names: BTreeSet<String> = registered
            .into_iter()
            .filter(|n| self.only.as_ref().is_none_or(|o| o.contains(n)))
            .collect();
        names.extend(self.brought.keys().cloned());
        names.into_iter().collect()
    }
}

impl std::fmt::Debug for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let r = &self.inner;
        f.debug_struct("Scope")
            .field("only_rewards", &r.rewards.only)
            .field("rewards", &r.rewards.brought.keys().collect::<Vec<_>>())
            .field("only_tools", &r.tools.only)
            .field("tools", &r.tools.brought.keys().collect::<Vec<_>>())
            .field("caps", &r.caps)
            .finish()
    }
}

impl Scope {
    /// Reach only the registered rewards named in `names` (and any brought).
    pub fn only_rewards(mut self, names: impl IntoIterator<Item = String>) -> Self {
        Arc::make_mut(&mut self.inner).rewards.only = Some(names.into_iter().collect());
        self
    }

    /// Reach only the registered tools named in `names` (and any brought).
    pub fn only_tools(mut self, names: impl IntoIterator<Item = String>) -> Self {
        Arc::make_mut(&mut self.inner).tools.only = Some(names.into_iter().collect());
        self
    }

    /// This scope under `caps` too: the tighter of each cap.
    pub fn capped(mut self, caps: &Caps) -> Self {
        let reach = Arc::make_mut(&mut self.inner);
        reach.caps = reach.caps.and(caps);
        self
    }

    /// The caps its episodes and calls run under.
    pub fn caps(&self) -> &Caps {
        &self.inner.caps
    }

    /// Reach `reward` as `name`, in place of any registered one of that name.
    pub fn bring_reward(&mut self, name: String, reward: Arc<Registered<RewardComponent>>) {
        Arc::make_mut(&mut self.inner)
            .rewards
            .brought
            .insert(name, reward);
    }

    /// Reach `tool` as `name`, in place of any registered one of that name.
    pub fn bring_tool(&mut self, name: String, tool: Arc<Registered<ToolComponent>>) {
        Arc::make_mut(&mut self.inner)
            .tools
            .brought
            .insert(name, tool);
    }

    /// The reward this scope reaches as `name`, under its caps.
    pub(crate) fn reward(
        &self,
        registries: &Registries,
        name: &str,
    ) -> Option<Arc<Registered<RewardComponent>>> {
        let reg = self.inner.rewards.get(name, |n| registries.reward(n))?;
        Some(self.cap(reg))
    }

    /// The tool this scope reaches as `name`, under its caps.
    pub(crate) fn tool(
        &self,
        registries: &Registries,
        name: &str,
    ) -> Option<Arc<Registered<ToolComponent>>> {
        let reg = self.inner.tools.get(name, |n| registries.tool(n))?;
        Some(self.cap(reg))
    }

    /// The reward names this scope reaches, sorted.
    pub fn reward_names(&self, registries: &Registries) -> Vec<String> {
        self.inner.rewards.names(registries.reward_names())
    }

    /// The tool names this scope reaches, sorted.
    pub fn tool_names(&self, registries: &Registries) -> Vec<String> {
        self.inner.tools.names(registries.tool_names())
    }

    /// `reg` under this scope's caps (itself when there are none).
    fn cap<C: Clone>(&self, reg: Arc<Registered<C>>) -> Arc<Registered<C>> {
        let caps = &self.inner.caps;
        if caps.is_empty() {
            return reg;
        }
        Arc::new(Registered {
            component: reg.component.clone(),
            policy: crate::CallPolicy {
                limits: Arc::new(reg.policy.limits.capped(&caps.limits)),
                retries: caps
                    .retries
                    .map_or(reg.policy.retries, |r| r.min(reg.policy.retries)),
            },
            fuel_metering: reg.fuel_metering,
        })
    }
}
