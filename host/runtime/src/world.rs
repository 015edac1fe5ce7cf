//! The rollbox worlds a component can target, and the WIT package they belong to. The lists
//! here are checked against `wit/worlds.wit` by a test.

use std::fmt;

/// The WIT package every rollbox interface and world belongs to (`wit/worlds.wit`).
pub const WIT_PACKAGE: &str = "rollbox:workflow";
/// Its version.
pub const WIT_VERSION: &str = "0.1.2";

/// The rollbox worlds a component can target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorldKind {
    /// Exports `run-episode`; imports any rollbox interface.
    Workflow,
    /// Exports `score`; imports `log` only.
    Reward,
    /// Exports `call`; imports `log` only.
    Tool,
    /// Exports `reset` and `step`; imports `log` and `tools`.
    Environment,
}

impl WorldKind {
    /// Every world, in the order a component's exports are matched against them.
    pub const ALL: [WorldKind; 4] = [
        WorldKind::Workflow,
        WorldKind::Reward,
        WorldKind::Tool,
        WorldKind::Environment,
    ];

    /// The export that identifies the world.
    pub fn export_name(self) -> &'static str {
        match self {
            WorldKind::Workflow => "run-episode",
            WorldKind::Reward => "score",
            WorldKind::Tool => "call",
            WorldKind::Environment => "step",
        }
    }

    /// The world's WIT name, e.g. `rollbox:workflow/reward@0.1.2`.
    pub fn qualified_name(self) -> String {
        format!("{WIT_PACKAGE}/{self}@{WIT_VERSION}")
    }

    /// How to load a component of this world.
    pub(crate) fn load_hint(self) -> &'static str {
        match self {
            WorldKind::Workflow => "load it as the workflow",
            WorldKind::Reward => "register it as a reward",
            WorldKind::Tool => "register it as a tool",
            WorldKind::Environment => "open it as an environment",
        }
    }

    /// rollbox interfaces a component of this world may import.
    pub(crate) fn allowed_interfaces(self) -> &'static [&'static str] {
        match self {
            WorldKind::Workflow => &[
                "types",
                "engine",
                "tokenizer",
                "rewards",
                "tensor",
                "tools",
                "log",
                "episode",
                "vision",
            ],
            WorldKind::Reward => &["types", "log", "tools"],
            WorldKind::Tool => &["types", "log"],
            WorldKind::Environment => &["types", "log", "tools", "steps"],
        }
    }
}

impl fmt::Display for WorldKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            WorldKind::Workflow => "workflow",
            WorldKind::Reward => "reward",
            WorldKind::Tool => "tool",
            WorldKind::Environment => "environment",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interfaces each world may import, the package name and its version are those of
    /// `wit/worlds.wit` (so the list here cannot drift from the contract).
    #[test]
    fn allowed_interfaces_follow_the_wit_worlds() {
        let wit = include_str!("../../../wit/worlds.wit");
        assert!(
            wit.starts_with(&format!("package {WIT_PACKAGE}@{WIT_VERSION};")),
            "{}",
            wit.lines().next().unwrap_or_default()
        );
        for kind in WorldKind::ALL {
            let start = wit
                .find(&format!("world {kind} {{"))
                .unwrap_or_else(|| panic!("wit/worlds.wit has no world {kind}"));
            let body = &wit[start..start + wit[start..].find("\n}").expect("world closes")];
            let mut imports: Vec<&str> = body
                .lines()
                .filter_map(|l| l.trim().strip_prefix("import "))
                .map(|l| l.trim_end_matches(';').trim())
                .collect();
            // `types`, and `episode` and `steps`, come in through the exported functions' types.
            imports.push("types");
            match kind {
                WorldKind::Workflow => imports.push("episode"),
                WorldKind::Environment => imports.push("steps"),
                _ => {}
            }
            imports.sort_unstable();
            imports.dedup();
            let mut allowed = kind.allowed_interfaces().to_vec();
            allowed.sort_unstable();
            assert_eq!(allowed, imports, "world {kind}");
            assert!(body.contains(&format!("export {}:", kind.export_name())));
        }
    }
}
