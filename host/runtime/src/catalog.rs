//! What one caller reaches by name through `rewards` and `tools`: the host's registered
//! components (all of them, or only those a tenant may use) and any a request brought, which
//! take their name over for that caller alone. An episode carries its catalog, and so does
//! every reward call it makes (the tools a code reward runs are looked up in the same one).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use crate::component::{RewardComponent, ToolComponent};
use crate::registry::Registered;
use crate::services::Services;

/// The rewards and tools one caller may reach; the default reaches every registered one.
#[derive(Clone, Default)]
pub struct Catalog {
    rewards: Shelf<RewardComponent>,
    tools: Shelf<ToolComponent>,
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

impl std::fmt::Debug for Catalog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Catalog")
            .field("only_rewards", &self.rewards.only)
            .field("rewards", &self.rewards.brought.keys().collect::<Vec<_>>())
            .field("only_tools", &self.tools.only)
            .field("tools", &self.tools.brought.keys().collect::<Vec<_>>())
            .finish()
    }
}

impl Catalog {
    /// Reach only the registered rewards named in `names` (and any brought).
    pub fn only_rewards(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.rewards.only = Some(names.into_iter().collect());
        self
    }

    /// Reach only the registered tools named in `names` (and any brought).
    pub fn only_tools(mut self, names: impl IntoIterator<Item = String>) -> Self {
        self.tools.only = Some(names.into_iter().collect());
        self
    }

    /// Reach `reward` as `name`, in place of any registered one of that name.
    pub fn bring_reward(&mut self, name: String, reward: Arc<Registered<RewardComponent>>) {
        self.rewards.brought.insert(name, reward);
    }

    /// Reach `tool` as `name`, in place of any registered one of that name.
    pub fn bring_tool(&mut self, name: String, tool: Arc<Registered<ToolComponent>>) {
        self.tools.brought.insert(name, tool);
    }

    /// The reward this catalog reaches as `name`.
    pub fn reward(
        &self,
        services: &Services,
        name: &str,
    ) -> Option<Arc<Registered<RewardComponent>>> {
        self.rewards.get(name, |n| services.reward(n))
    }

    /// The tool this catalog reaches as `name`.
    pub fn tool(&self, services: &Services, name: &str) -> Option<Arc<Registered<ToolComponent>>> {
        self.tools.get(name, |n| services.tool(n))
    }

    /// The reward names this catalog reaches, sorted.
    pub fn reward_names(&self, services: &Services) -> Vec<String> {
        self.rewards.names(services.reward_names())
    }

    /// The tool names this catalog reaches, sorted.
    pub fn tool_names(&self, services: &Services) -> Vec<String> {
        self.tools.names(services.tool_names())
    }
}
