//! Loading components by path: read, hash, check the world they target, compile (cached) and
//! pre-instantiate. A component for the wrong world, a core module, or an import rollbox does
//! not provide fails here, at load time, with a message naming what is missing or extra.
//!
//! A file is read once, through one descriptor, and the bytes read are the ones hashed,
//! compiled and recorded: a file swapped between a check and a load cannot run under another
//! component's hash. A component already in memory ([`ComponentSource::Bytes`], the host's
//! built-ins) is never written to disk and read back.

use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};

use crate::bindings;
use crate::state::{CallCtx, StoreState};
use crate::world::{WIT_PACKAGE, WIT_VERSION, WorldKind};

/// Size of a component file accepted for loading. Guards compile time and memory against
/// a huge file; Python components are ~20 MiB.
pub const MAX_COMPONENT_FILE_BYTES: u64 = 256 << 20;

/// Where a component's bytes come from.
#[derive(Debug, Clone)]
pub enum ComponentSource {
    /// A file, read once.
    File(PathBuf),
    /// Bytes in memory (a component built into the host), shown as `name`.
    Bytes {
        /// What messages and [`ComponentInfo::path`] call it, e.g. `builtin:rlvr`.
        name: PathBuf,
        /// The component.
        bytes: &'static [u8],
        /// The sha256 (hex) the bytes must have, e.g. a built-in's recorded at build: other
        /// bytes are refused at load, naming the component.
        sha256: Option<&'static str>,
    },
    /// Bytes already read (with [`read_component`] from a descriptor the caller opened), shown
    /// as `name`.
    Read {
        /// The file they were read from, for messages and [`ComponentInfo::path`].
        name: PathBuf,
        /// The component.
        bytes: Vec<u8>,
    },
}

impl ComponentSource {
    /// The file, or the name of the bytes, for messages.
    pub fn name(&self) -> &Path {
        match self {
            ComponentSource::File(p) => p,
            ComponentSource::Bytes { name, .. } | ComponentSource::Read { name, .. } => name,
        }
    }
}

impl From<&Path> for ComponentSource {
    fn from(p: &Path) -> Self {
        ComponentSource::File(p.to_path_buf())
    }
}

impl From<&PathBuf> for ComponentSource {
    fn from(p: &PathBuf) -> Self {
        ComponentSource::File(p.clone())
    }
}

impl From<PathBuf> for ComponentSource {
    fn from(p: PathBuf) -> Self {
        ComponentSource::File(p)
    }
}

impl From<&ComponentSource> for ComponentSource {
    fn from(s: &ComponentSource) -> Self {
        s.clone()
    }
}

/// What `rollbox inspect` prints and every trajectory records about its component.
#[derive(Debug, Clone, serde::Serialize)]
pub struct ComponentInfo {
    /// The file it was loaded from (or the name of the bytes, e.g. `builtin:rlvr`).
    pub path: PathBuf,
    /// sha256 of the file, hex.
    pub sha256: String,
    /// File size, bytes.
    pub size_bytes: u64,
    /// The world it targets, when its exports identify one.
    pub world: Option<WorldKind>,
    /// Import names (instances and functions).
    pub imports: Vec<String>,
    /// Export names.
    pub exports: Vec<String>,
}

/// A compiled, type-checked reward component.
#[derive(Clone)]
pub struct RewardComponent {
    pub(crate) info: ComponentInfo,
    pub(crate) pre: bindings::reward::RewardPre<StoreState<CallCtx>>,
}

impl RewardComponent {
    /// Where it came from, its hash, imports and exports.
    pub fn info(&self) -> &ComponentInfo {
        &self.info
    }
}

/// A compiled, type-checked environment component (the `environment` world), opened per
/// episode as a session ([`crate::Runtime::open_session`]).
#[derive(Clone)]
pub struct EnvironmentComponent {
    pub(crate) info: ComponentInfo,
    pub(crate) pre: bindings::environment::EnvironmentPre<StoreState<CallCtx>>,
}

impl EnvironmentComponent {
    /// Where it came from, its hash, imports and exports.
    pub fn info(&self) -> &ComponentInfo {
        &self.info
    }
}

/// A compiled, linked tool component. Its exports are looked up per call rather than through
/// generated bindings, because `describe` is optional: components built against the WIT
/// package before 0.1.1 export `call` only.
#[derive(Clone)]
pub struct ToolComponent {
    pub(crate) info: ComponentInfo,
    pub(crate) pre: wasmtime::component::InstancePre<StoreState<CallCtx>>,
    /// The description `describe` returned, once it answered (the first `schemas` call).
    pub(crate) description: std::sync::Arc<tokio::sync::OnceCell<String>>,
}

impl ToolComponent {
    /// Where it came from, its hash, imports and exports.
    pub fn info(&self) -> &ComponentInfo {
        &self.info
    }

    /// Whether it exports `describe` (its OpenAI function schema).
    pub fn describes(&self) -> bool {
        self.info.exports.iter().any(|e| e == "describe")
    }
}

/// Open a component file: a regular file (a symlink to one is followed) of at most
/// [`MAX_COMPONENT_FILE_BYTES`], with its metadata. A directory, FIFO, socket or device
/// (`/dev/zero`) is refused without reading from it: the file is opened non-blocking (a FIFO
/// with no writer would block the open) and checked on the open descriptor.
pub(crate) fn open_component_file(
    path: &Path,
) -> anyhow::Result<(std::fs::File, std::fs::Metadata)> {
    let file = rollbox_tokenizer::file::open_regular(path).map_err(|e| match e.kind() {
        // A directory, FIFO, socket or device: check_component_file names what to pass instead.
        std::io::ErrorKind::InvalidInput => anyhow::anyhow!("{} {e}", path.display()),
        _ => anyhow::anyhow!("cannot read component {}: {e}", path.display()),
    })?;
    let meta = check_component_file(&file, path)?;
    Ok((file, meta))
}

/// Read a component from `file`, already open (`path` names it in messages): it must be a
/// regular file of at most [`MAX_COMPONENT_FILE_BYTES`], checked on the descriptor; the read
/// is bounded even if the file grows. Open it non-blocking (`O_NONBLOCK`), so a FIFO put in
/// its place cannot block the open.
pub fn read_component(file: std::fs::File, path: &Path) -> anyhow::Result<Vec<u8>> {
    check_component_file(&file, path)?;
    read_open_component(&file, path)
}

/// The metadata of `file` if it is a regular file within [`MAX_COMPONENT_FILE_BYTES`].
fn check_component_file(file: &std::fs::File, path: &Path) -> anyhow::Result<std::fs::Metadata> {
    let meta = file
        .metadata()
        .with_context(|| format!("cannot read component {}", path.display()))?;
    if meta.is_dir() {
        bail!(
            "{} is a directory; pass the component's .wasm file",
            path.display()
        );
    }
    if !meta.is_file() {
        bail!(
            "{} is not a regular file (a device, FIFO or socket); pass the component's .wasm file",
            path.display()
        );
    }
    if meta.len() > MAX_COMPONENT_FILE_BYTES {
        return Err(too_big(path));
    }
    Ok(meta)
}

fn too_big(path: &Path) -> anyhow::Error {
    anyhow::anyhow!(
        "{} is over the {MAX_COMPONENT_FILE_BYTES} byte limit for a component file",
        path.display()
    )
}

/// The bytes of `file` (checked by [`check_component_file`]), bounded even if it grows.
pub(crate) fn read_open_component(file: &std::fs::File, path: &Path) -> anyhow::Result<Vec<u8>> {
    use std::io::Read as _;
    let len = file.metadata().map(|m| m.len()).unwrap_or(0);
    let mut bytes = Vec::with_capacity(len.min(MAX_COMPONENT_FILE_BYTES) as usize);
    file.take(MAX_COMPONENT_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .with_context(|| format!("cannot read component {}", path.display()))?;
    if bytes.len() as u64 > MAX_COMPONENT_FILE_BYTES {
        return Err(too_big(path));
    }
    Ok(bytes)
}

/// The first 8 bytes of `file` (fewer when it is shorter), for [`check_header`].
#[cfg(unix)]
pub(crate) fn read_header(file: &std::fs::File, path: &Path) -> anyhow::Result<Vec<u8>> {
    use std::os::unix::fs::FileExt as _;
    let mut head = [0u8; 8];
    let mut got = 0;
    while got < head.len() {
        match file.read_at(&mut head[got..], got as u64) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => {
                return Err(e).with_context(|| format!("cannot read component {}", path.display()));
            }
        }
    }
    Ok(head[..got].to_vec())
}

pub(crate) fn check_name(what: &str, name: &str) -> anyhow::Result<()> {
    if name.is_empty()
        || name.len() > 128
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
    {
        bail!("{what} name `{name}` is invalid: use 1-128 letters, digits, `-`, `_` or `.`");
    }
    Ok(())
}

pub(crate) fn check_header(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    const MAGIC: &[u8] = b"\0asm";
    if bytes.len() < 8 || &bytes[..4] != MAGIC {
        bail!(
            "{} is not a WebAssembly file (no `\\0asm` header); build the component with `cargo build --target wasm32-wasip2`",
            path.display()
        );
    }
    // Core modules have layer 0 (version 1); components have layer 1.
    if bytes[6..8] == [0, 0] {
        bail!(
            "{} is a core WebAssembly module, not a component; build with `--target wasm32-wasip2` or wrap it with `wasm-tools component new`",
            path.display()
        );
    }
    Ok(())
}

/// Check exports and imports against `expected`, naming what is missing or extra.
pub(crate) fn check_world(info: &ComponentInfo, expected: WorldKind) -> anyhow::Result<()> {
    let name = info.path.display();
    if !info.exports.iter().any(|e| e == expected.export_name()) {
        // A Rust `bin` target also exports `wasi:cli/run`; it is not part of any rollbox world.
        let own: Vec<&String> = info
            .exports
            .iter()
            .filter(|e| !e.starts_with("wasi:"))
            .collect();
        let found = if own.is_empty() {
            "nothing".to_string()
        } else {
            own.iter()
                .map(|e| format!("`{e}`"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let hint = match info.world {
            Some(actual) if actual != expected => {
                format!(": is this a {actual} component? {}", actual.load_hint())
            }
            _ => format!(
                "; a {expected} component exports `{}` from the {} world",
                expected.export_name(),
                expected.qualified_name()
            ),
        };
        bail!(
            "{name} exports {found}, expected `{}`{hint}",
            expected.export_name()
        );
    }
    for import in &info.imports {
        if import.starts_with("wasi:") {
            continue;
        }
        let Some(rest) = import
            .strip_prefix(WIT_PACKAGE)
            .and_then(|r| r.strip_prefix('/'))
        else {
            bail!(
                "{name} imports `{import}`, which rollbox does not provide: only WASI 0.2 and the {WIT_PACKAGE} interfaces are linked"
            );
        };
        let iface = rest.split('@').next().unwrap_or(rest);
        if !expected.allowed_interfaces().contains(&iface) {
            let allowed = expected.allowed_interfaces().join(", ");
            bail!(
                "{name} imports `{import}`, but {expected} components may import only: {allowed} (and WASI, which grants nothing); if it was built in one cargo invocation with a workflow crate, cargo unified rollbox-sdk's features: build it on its own"
            );
        }
    }
    Ok(())
}

pub(crate) fn link_error(info: &ComponentInfo, e: wasmtime::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "{} does not match the {WIT_PACKAGE}@{WIT_VERSION} contract: {e:#}; rebuild it against this version of wit/",
        info.path.display()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(exports: &[&str], imports: &[&str]) -> ComponentInfo {
        let exports: Vec<String> = exports.iter().map(|s| s.to_string()).collect();
        let world = WorldKind::ALL
            .into_iter()
            .find(|w| exports.iter().any(|e| e == w.export_name()));
        ComponentInfo {
            path: "x.wasm".into(),
            sha256: String::new(),
            size_bytes: 0,
            world,
            imports: imports.iter().map(|s| s.to_string()).collect(),
            exports,
        }
    }

    #[test]
    fn wrong_world_names_the_export_and_the_fix() {
        let err = check_world(&info(&["score"], &[]), WorldKind::Workflow).expect_err("reward");
        assert_eq!(
            err.to_string(),
            "x.wasm exports `score`, expected `run-episode`: is this a reward component? register it as a reward"
        );
        let err = check_world(&info(&[], &[]), WorldKind::Reward).expect_err("nothing");
        assert!(
            err.to_string()
                .contains("exports nothing, expected `score`"),
            "{err}"
        );
    }

    #[test]
    fn imports_outside_the_world_are_named() {
        let ok = info(
            &["score"],
            &["wasi:cli/stdout@0.2.6", "rollbox:workflow/log@0.1.0"],
        );
        check_world(&ok, WorldKind::Reward).expect("allowed");
        let bad = info(&["score"], &["rollbox:workflow/engine@0.1.0"]);
        let err = check_world(&bad, WorldKind::Reward).expect_err("engine in reward");
        assert!(
            err.to_string()
                .contains("may import only: types, log, tools"),
            "{err}"
        );
        let alien = info(&["run-episode"], &["acme:net/http@1.0.0"]);
        let err = check_world(&alien, WorldKind::Workflow).expect_err("alien");
        assert!(
            err.to_string()
                .contains("`acme:net/http@1.0.0`, which rollbox does not provide"),
            "{err}"
        );
    }

    #[test]
    fn core_modules_and_garbage_are_refused() {
        let err = check_header(Path::new("m.wasm"), b"\0asm\x01\0\0\0").expect_err("core");
        assert!(err.to_string().contains("core WebAssembly module"), "{err}");
        let err = check_header(Path::new("t.txt"), b"hello world").expect_err("text");
        assert!(err.to_string().contains("not a WebAssembly file"), "{err}");
        check_header(Path::new("c.wasm"), b"\0asm\x0d\0\x01\0").expect("component");
    }
}
