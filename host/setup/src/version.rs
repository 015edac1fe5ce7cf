//! What a build of rollbox is: the package version, the commit it was built from, the WIT
//! package its components target, and the wasmtime it runs them on with rollbox's patches
//! (`vendor/wasmtime/PATCHES.md`). `rollbox --version` prints it; the Python package gives it as
//! `rollbox.build_info()`.

use std::fmt;

mod wasmtime_info {
    include!(concat!(env!("OUT_DIR"), "/wasmtime_info.rs"));
}

pub use wasmtime_info::{WASMTIME_PATCHES, WASMTIME_VERSION};

/// A build's identity ([`BuildInfo::new`]).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct BuildInfo {
    /// The package version (the workspace's, the wheel's).
    pub version: &'static str,
    /// The commit, as the printing crate's build script found it (`unknown` outside a
    /// repository unless `ROLLBOX_COMMIT` was set).
    pub commit: &'static str,
    /// The WIT package and version components must target (`rollbox:workflow@X.Y.Z`).
    pub wit: String,
    /// The wasmtime release rollbox builds.
    pub wasmtime: &'static str,
    /// The patches on it, in the order they apply.
    pub wasmtime_patches: &'static [&'static str],
}

impl BuildInfo {
    /// This build, with the `commit` the caller's build script recorded.
    pub fn new(commit: &'static str) -> BuildInfo {
        BuildInfo {
            version: env!("CARGO_PKG_VERSION"),
            commit,
            wit: format!(
                "{}@{}",
                rollbox_runtime::world::WIT_PACKAGE,
                rollbox_runtime::world::WIT_VERSION
            ),
            wasmtime: WASMTIME_VERSION,
            wasmtime_patches: WASMTIME_PATCHES,
        }
    }
}

/// `0.1.0 (commit 0123456789ab, WIT rollbox:workflow@0.1.2, wasmtime 48.0.8 with patches 0001
/// 0002)`: what `--version` prints after the program's name.
impl fmt::Display for BuildInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let patches: Vec<&str> = self
            .wasmtime_patches
            .iter()
            .map(|p| p.split('-').next().unwrap_or(p))
            .collect();
        write!(
            f,
            "{} (commit {}, WIT {}, wasmtime {}",
            self.version, self.commit, self.wit, self.wasmtime
        )?;
        if !patches.is_empty() {
            write!(f, " with patches {}", patches.join(" "))?;
        }
        write!(f, ")")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_line_names_each_part() {
        let info = BuildInfo::new("0123456789ab");
        let line = info.to_string();
        assert!(
            line.starts_with(&format!(
                "{} (commit 0123456789ab, WIT rollbox:workflow@",
                info.version
            )),
            "{line}"
        );
        assert_eq!(info.wasmtime, "48.0.8");
        assert!(
            info.wasmtime_patches
                .iter()
                .any(|p| p.starts_with("0002-pagemap")),
            "{:?}",
            info.wasmtime_patches
        );
        assert!(line.ends_with(" with patches 0001 0002)"), "{line}");
    }
}
