//! The reference components and the sample dataset that ship inside `rollbox`, selectable by
//! name wherever a path is taken (`--workflow rlvr`, `--reward math`, `--tool calculator`,
//! `rollbox rollout arith`), so that the defaults do not depend on the working directory.
//!
//! A name is used when no file of that name exists: a path always wins. A built-in component
//! is written once to the component cache (`$ROLLBOX_CACHE_DIR/builtin/`, by its sha256) and
//! loaded from there like any file.

use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

/// A component compiled into the binary.
#[derive(Debug)]
pub struct Builtin {
    /// The name to select it by.
    pub name: &'static str,
    /// Its world: `workflow`, `reward` or `tool`.
    pub world: &'static str,
    /// The crate it is built from (`workflows/...`).
    pub crate_name: &'static str,
    /// What it does, in a line.
    pub about: &'static str,
    /// The component.
    pub bytes: &'static [u8],
}

/// The built-in components (`host/cli/build.rs` builds them).
pub const BUILTINS: &[Builtin] = include!(concat!(env!("OUT_DIR"), "/builtin.rs"));

/// The built-in sample dataset: 16 arithmetic word problems (`workflows/rlvr/data/arith.jsonl`).
pub const ARITH: &str = include_str!("../../../workflows/rlvr/data/arith.jsonl");

/// The name of the built-in dataset.
pub const ARITH_NAME: &str = "arith";

impl Builtin {
    /// The component's sha256, hex.
    pub fn sha256(&self) -> String {
        hex::encode(Sha256::digest(self.bytes))
    }

    /// The component as a file in the cache, written (atomically) on first use.
    pub fn path(&self) -> anyhow::Result<PathBuf> {
        self.write_to(&cache_dir())
    }

    /// The component as a file in `dir`, written unless that file already holds exactly
    /// these bytes (a file of the right name and size but other content is replaced: the run
    /// must load what is built in, and its provenance says so).
    fn write_to(&self, dir: &Path) -> anyhow::Result<PathBuf> {
        let sha = self.sha256();
        let path = dir.join(format!("{}-{}.wasm", self.name, &sha[..16]));
        let same = std::fs::metadata(&path)
            .is_ok_and(|m| m.is_file() && m.len() == self.bytes.len() as u64)
            && std::fs::read(&path).is_ok_and(|b| b == self.bytes);
        if same {
            return Ok(path);
        }
        std::fs::create_dir_all(dir)
            .and_then(|()| rollbox_tensor::write_atomic(&path, self.bytes))
            .map_err(|e| {
                anyhow::anyhow!(
                    "writing the built-in component `{}` to {}: {e}; set ROLLBOX_CACHE_DIR to a writable folder",
                    self.name,
                    path.display()
                )
            })?;
        Ok(path)
    }
}

fn cache_dir() -> PathBuf {
    rollbox_runtime::default_cache_dir()
        .and_then(|c| c.parent().map(Path::to_path_buf))
        .unwrap_or_else(std::env::temp_dir)
        .join("builtin")
}

/// A built-in component of any world named `spec`, when `spec` is a bare name and no such
/// file exists (`rollbox inspect calculator`); `None` otherwise.
pub fn resolve_any(spec: &Path) -> Option<anyhow::Result<PathBuf>> {
    let name = bare_name(spec).filter(|_| !spec.exists())?;
    BUILTINS.iter().find(|b| b.name == name).map(Builtin::path)
}

/// `spec` as a built-in's name: lowercase letters, digits, `-` and `_` only.
fn bare_name(spec: &Path) -> Option<&str> {
    spec.to_str().filter(|s| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    })
}

/// The built-in component `name` of `world`.
pub fn find(world: &str, name: &str) -> Option<&'static Builtin> {
    BUILTINS.iter().find(|b| b.world == world && b.name == name)
}

/// The names of the built-in components of `world`, for messages.
pub fn names(world: &str) -> String {
    BUILTINS
        .iter()
        .filter(|b| b.world == world)
        .map(|b| b.name)
        .collect::<Vec<_>>()
        .join(", ")
}

/// A `world` component given as a path or a built-in name: an existing file, or anything that
/// is not a bare name (`x.wasm`, `dir/x`), is used as it is; else a built-in of that name; else
/// an error naming both ways.
pub fn resolve(world: &str, spec: &Path) -> anyhow::Result<PathBuf> {
    // A path (or an existing file): as it is; loading it reports a missing file.
    let Some(name) = bare_name(spec).filter(|_| !spec.exists()) else {
        return Ok(spec.to_path_buf());
    };
    if let Some(b) = find(world, name) {
        return b.path();
    }
    anyhow::bail!(
        "{}: no such file, and no built-in {world} of that name (built-in {world}s: {}; `rollbox components` lists them)",
        spec.display(),
        names(world)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtins_are_components_of_their_world_and_resolve_by_name() {
        let names: Vec<&str> = BUILTINS.iter().map(|b| b.name).collect();
        assert_eq!(
            names,
            [
                "rlvr",
                "multi-turn",
                "tool-agent",
                "vision-rlvr",
                "math",
                "calculator"
            ]
        );
        for b in BUILTINS {
            // The component binary's preamble (version 0x0d, layer 1).
            assert_eq!(&b.bytes[..8], b"\0asm\x0d\0\x01\0", "{}", b.name);
            assert_eq!(b.sha256().len(), 64);
        }
        let tmp = tempfile::tempdir().expect("tmp");
        let math = find("reward", "math").expect("math");
        let path = math.write_to(tmp.path()).expect("written");
        assert_eq!(std::fs::read(&path).expect("read back"), math.bytes);
        assert_eq!(math.write_to(tmp.path()).expect("again"), path);
        // Same name and size, other bytes: replaced by the built-in's.
        std::fs::write(&path, vec![0u8; math.bytes.len()]).expect("tamper");
        assert_eq!(math.write_to(tmp.path()).expect("rewritten"), path);
        assert_eq!(std::fs::read(&path).expect("read back"), math.bytes);
        let path = resolve("reward", Path::new("math")).expect("built-in math");
        assert_eq!(std::fs::read(&path).expect("cached"), math.bytes);
        // A file wins over a name; an unknown name lists the built-ins.
        let here = resolve("workflow", Path::new("Cargo.toml")).expect("a file");
        assert_eq!(here, Path::new("Cargo.toml"));
        let e = resolve("workflow", Path::new("rlvrr"))
            .expect_err("unknown")
            .to_string();
        assert!(e.contains("built-in workflows: rlvr, multi-turn"), "{e}");
        // Not a workflow.
        assert!(resolve("workflow", Path::new("math")).is_err());
    }
}
