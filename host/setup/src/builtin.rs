//! The reference components and the sample dataset that ship inside `rollbox`, selectable by
//! name wherever a path is taken (`--workflow rlvr`, `--reward math`, `--tool calculator`,
//! `rollbox rollout arith`), so that the defaults do not depend on the working directory.
//!
//! A name is used when no file of that name exists: a path always wins. A built-in component
//! is loaded from the bytes compiled into the binary ([`ComponentSource::Bytes`], shown as
//! `builtin:NAME`); it is never written to a directory and read back, so nobody who can write a
//! cache directory can swap it.

use std::path::{Path, PathBuf};

use rollbox_runtime::component::ComponentSource;

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
    /// The component's sha256 (hex), recorded when it was built in; loading it checks it.
    pub sha256: &'static str,
    /// The component.
    pub bytes: &'static [u8],
}

/// The built-in components (`host/setup/build.rs` builds them).
pub const BUILTINS: &[Builtin] = include!(concat!(env!("OUT_DIR"), "/builtin.rs"));

/// Why python-exec is not among [`BUILTINS`] (`None`: it is): componentize-py was absent when
/// this rollbox was built (`host/setup/build.rs`).
pub const PYTHON_EXEC_ABSENT: Option<&str> =
    include!(concat!(env!("OUT_DIR"), "/python_exec_absent.rs"));

/// The built-in sample dataset: 16 arithmetic word problems (`workflows/rlvr/data/arith.jsonl`).
pub const ARITH: &str = include_str!("../../../workflows/rlvr/data/arith.jsonl");

/// The name of the built-in dataset.
pub const ARITH_NAME: &str = "arith";

impl Builtin {
    /// The component, from the binary's own bytes, which must still have its recorded sha256.
    pub fn source(&self) -> ComponentSource {
        ComponentSource::Bytes {
            name: PathBuf::from(format!("builtin:{}", self.name)),
            bytes: self.bytes,
            sha256: Some(self.sha256),
        }
    }
}

/// A built-in component of any world named `spec`, when `spec` is a bare name and no such
/// file exists (`rollbox inspect calculator`); `None` otherwise.
pub fn resolve_any(spec: &Path) -> Option<ComponentSource> {
    let name = bare_name(spec).filter(|_| !spec.exists())?;
    BUILTINS
        .iter()
        .find(|b| b.name == name)
        .map(Builtin::source)
}

/// `spec` as a built-in's name: lowercase letters, digits, `-` and `_` only.
fn bare_name(spec: &Path) -> Option<&str> {
    spec.to_str().filter(|s| {
        !s.is_empty()
            && s.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '_')
    })
}

/// The built-in `world` component `spec` names: a bare name (see [`resolve`]) of a built-in,
/// with no file of that name, which would win.
pub fn named(world: &str, spec: &Path) -> Option<&'static Builtin> {
    bare_name(spec)
        .filter(|_| !spec.exists())
        .and_then(|name| find(world, name))
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
pub fn resolve(world: &str, spec: &Path) -> anyhow::Result<ComponentSource> {
    // A path (or an existing file): as it is; loading it reports a missing file.
    let Some(name) = bare_name(spec).filter(|_| !spec.exists()) else {
        return Ok(ComponentSource::File(spec.to_path_buf()));
    };
    if let Some(b) = find(world, name) {
        return Ok(b.source());
    }
    if world == "tool" {
        missing(spec)?;
    }
    anyhow::bail!(
        "{}: no such file, and no built-in {world} of that name (built-in {world}s: {}; `rollbox components` lists them)",
        spec.display(),
        names(world)
    )
}

/// The error for `spec` when it names a built-in this build left out (python-exec without
/// componentize-py at build) and no file of that name exists; `Ok` otherwise.
pub fn missing(spec: &Path) -> anyhow::Result<()> {
    if spec == Path::new("python-exec")
        && !spec.exists()
        && let Some(why) = PYTHON_EXEC_ABSENT
    {
        anyhow::bail!("{}", not_built_in(why));
    }
    Ok(())
}

/// What asking for python-exec says where it was not built in (`why`: [`PYTHON_EXEC_ABSENT`]).
fn not_built_in(why: &str) -> String {
    format!(
        "python-exec is not built into this rollbox ({why}): install componentize-py (`pip install componentize-py==0.25.1`, or `source scripts/install/test-env.sh`) and build rollbox again, or give python-exec's path (`scripts/guests/build-python-exec.sh python_exec.wasm` builds it)"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use sha2::{Digest as _, Sha256};

    #[test]
    fn builtins_are_components_of_their_world_and_resolve_by_name() {
        let names: Vec<&str> = BUILTINS.iter().map(|b| b.name).collect();
        let mut want = vec![
            "rlvr",
            "multi-turn",
            "tool-agent",
            "vision-rlvr",
            "math",
            "code",
            "calculator",
        ];
        // python-exec where componentize-py was there at build (the test command's setup, which
        // sets ROLLBOX_REQUIRE_GUESTS, always has it).
        if PYTHON_EXEC_ABSENT.is_none() {
            want.push("python-exec");
        } else {
            assert!(
                std::env::var_os("ROLLBOX_REQUIRE_GUESTS").is_none(),
                "python-exec was not built in: {PYTHON_EXEC_ABSENT:?}"
            );
        }
        assert_eq!(names, want);
        for b in BUILTINS {
            // The component binary's preamble (version 0x0d, layer 1).
            assert_eq!(&b.bytes[..8], b"\0asm\x0d\0\x01\0", "{}", b.name);
            assert_eq!(b.sha256, hex::encode(Sha256::digest(b.bytes)), "{}", b.name);
        }
        let math = find("reward", "math").expect("math");
        let bytes_of = |s: ComponentSource| match s {
            ComponentSource::Bytes { name, bytes, .. } => (name, bytes),
            other => panic!("not built in: {}", other.name().display()),
        };
        let (name, bytes) = bytes_of(resolve("reward", Path::new("math")).expect("built-in math"));
        assert_eq!((name.to_str(), bytes), (Some("builtin:math"), math.bytes));
        assert_eq!(
            bytes_of(resolve_any(Path::new("calculator")).expect("any world")).0,
            Path::new("builtin:calculator")
        );
        // A file wins over a name; an unknown name lists the built-ins.
        let here = resolve("workflow", Path::new("Cargo.toml")).expect("a file");
        assert!(matches!(here, ComponentSource::File(p) if p == Path::new("Cargo.toml")));
        let e = resolve("workflow", Path::new("rlvrr"))
            .expect_err("unknown")
            .to_string();
        assert!(e.contains("built-in workflows: rlvr, multi-turn"), "{e}");
        // Not a workflow.
        assert!(resolve("workflow", Path::new("math")).is_err());
    }

    #[test]
    fn a_built_in_whose_bytes_changed_is_refused_naming_it() {
        use rollbox_runtime::{Runtime, RuntimeConfig, Services};
        let runtime = Runtime::new(RuntimeConfig::default(), Services::new()).expect("runtime");
        let calculator = find("tool", "calculator").expect("calculator");
        assert!(runtime.inspect(calculator.source()).is_ok());
        // One byte of the last section flipped: still a component's preamble, other bytes.
        let mut bytes = calculator.bytes.to_vec();
        *bytes.last_mut().expect("bytes") ^= 1;
        let corrupted = ComponentSource::Bytes {
            name: PathBuf::from("builtin:calculator"),
            bytes: Box::leak(bytes.into_boxed_slice()),
            sha256: Some(calculator.sha256),
        };
        let e = format!("{:#}", runtime.inspect(corrupted).expect_err("corrupted"));
        assert!(e.contains("builtin:calculator is corrupted"), "{e}");
        assert!(e.contains(calculator.sha256), "{e}");
        assert!(e.contains("reinstall rollbox"), "{e}");
    }

    #[test]
    fn asking_for_python_exec_where_it_is_not_built_in_names_the_install() {
        let m = not_built_in("componentize-py was not found at build time");
        assert!(m.contains("componentize-py was not found"), "{m}");
        assert!(m.contains("pip install componentize-py==0.25.1"), "{m}");
        assert!(m.contains("scripts/guests/build-python-exec.sh"), "{m}");
        match PYTHON_EXEC_ABSENT {
            None => assert!(resolve("tool", Path::new("python-exec")).is_ok()),
            Some(why) => {
                let e = resolve("tool", Path::new("python-exec")).expect_err("absent");
                assert_eq!(e.to_string(), not_built_in(why));
            }
        }
    }
}
