//! Components a request brings by name (`rollbox serve --tenants`): the workflow of a
//! `/v1/episodes` request, the rewards and tools its episodes reach, the reward of a
//! `/v1/rewards` or `/get_reward` request. Each is a path under one of its tenant's
//! `component_dirs`, or `sha256:HEX`, the content hash of one the server has compiled, when the
//! hash is among the tenant's `component_sha256`.
//!
//! A path is opened one component at a time from the directory the operator listed, each with
//! `O_NOFOLLOW` (a symlink anywhere below the directory is refused, so a link planted in a
//! directory others can write cannot point the server at another file), a `..` refused before
//! anything is opened; the file is read through that one descriptor (a regular file,
//! at most [`rollbox_runtime::component::MAX_COMPONENT_FILE_BYTES`]) and what was read is what is hashed
//! and compiled. A file is read again on every request that names it, so a new build is
//! picked up; its compilation is kept by content hash (in memory, and in the compiled-component
//! cache on disk), shared by every tenant, so the same bytes are compiled once. Instances are
//! never shared: each episode and call gets a fresh one.
//!
//! What is kept in memory is bounded per tenant and charged to the host: each tenant keeps at
//! most [`MAX_KEPT_PER_TENANT`] of each kind it brought (its least recently named dropped
//! first, never another tenant's: one tenant's churn once evicted another's hash-named
//! workflow, issue 52), and each compilation holds [`KEPT_BYTES_PER_FILE_BYTE`] times its
//! file's size of the host budget (the host's `max_host_memory`) while kept; a load the
//! budget cannot hold drops the bringer's own oldest first, then is refused naming
//! `max_host_memory`.

use std::collections::HashMap;
use std::path::{Component, Path, PathBuf};
use std::sync::{Arc, Mutex};

use rollbox_runtime::component::ComponentSource;
use rollbox_runtime::{
    HostMemory, Reservation, RewardComponent, Runtime, ToolComponent, WorkflowComponent,
};
use sha2::{Digest, Sha256};

/// Compiled components of each kind one tenant keeps in memory; past this its least recently
/// named is dropped (a request running it keeps its copy).
pub const MAX_KEPT_PER_TENANT: usize = 8;

/// Host memory a kept compilation is charged per byte of its file: its code and the images of
/// its data segments (a component's data is part of its file), an estimate with room.
pub const KEPT_BYTES_PER_FILE_BYTE: u64 = 2;

/// The `sha256:` prefix of a component named by content hash.
pub const HASH_PREFIX: &str = "sha256:";

/// Files read and compiled at once, server-wide: each holds up to 256 MiB read and its
/// compilation's memory, so many requests naming large files wait their turn rather than
/// holding them all at once. One tenant holds at most one of them ([`OwnTurn`]).
pub const MAX_LOADING: usize = 2;

/// The compiled components requests named, by the sha256 of their bytes.
pub struct RequestComponents {
    workflows: Mutex<Kept<WorkflowComponent>>,
    rewards: Mutex<Kept<RewardComponent>>,
    tools: Mutex<Kept<ToolComponent>>,
    /// Taken for each file read and compiled ([`MAX_LOADING`]).
    loading: Arc<tokio::sync::Semaphore>,
}

/// A tenant's own turn to load files: one file at a time, whatever its requests in flight, so
/// its requests hold at most one of the server's [`MAX_LOADING`] places and another tenant's
/// file never waits behind all of them (a tenant naming large files again and again is read
/// and hashed each time).
#[derive(Debug)]
pub struct OwnTurn(Arc<tokio::sync::Semaphore>);

impl Default for OwnTurn {
    fn default() -> Self {
        OwnTurn(Arc::new(tokio::sync::Semaphore::new(1)))
    }
}

/// A turn to read and compile one file: the tenant's own and one of the server's places, held
/// until dropped.
#[derive(Debug)]
pub struct LoadTurn {
    _own: tokio::sync::OwnedSemaphorePermit,
    _server: tokio::sync::OwnedSemaphorePermit,
}

impl Default for RequestComponents {
    fn default() -> Self {
        RequestComponents {
            workflows: Mutex::default(),
            rewards: Mutex::default(),
            tools: Mutex::default(),
            loading: Arc::new(tokio::sync::Semaphore::new(MAX_LOADING)),
        }
    }
}

/// A kind of component a request may bring.
pub trait Brought: rollbox_runtime::Load + Send + Sync + 'static {
    /// `workflow`, `reward` or `tool`, for messages.
    const KIND: &'static str;
    /// This kind's compilations kept.
    fn kept(all: &RequestComponents) -> &Mutex<Kept<Self>>;
    /// Its file's size, bytes.
    fn file_bytes(&self) -> u64;
}

impl Brought for WorkflowComponent {
    const KIND: &'static str = "workflow";
    fn kept(all: &RequestComponents) -> &Mutex<Kept<Self>> {
        &all.workflows
    }
    fn file_bytes(&self) -> u64 {
        self.info().size_bytes
    }
}

impl Brought for RewardComponent {
    const KIND: &'static str = "reward";
    fn kept(all: &RequestComponents) -> &Mutex<Kept<Self>> {
        &all.rewards
    }
    fn file_bytes(&self) -> u64 {
        self.info().size_bytes
    }
}

impl Brought for ToolComponent {
    const KIND: &'static str = "tool";
    fn kept(all: &RequestComponents) -> &Mutex<Kept<Self>> {
        &all.tools
    }
    fn file_bytes(&self) -> u64 {
        self.info().size_bytes
    }
}

/// One kind's compilations: each with when it was last named, the tenant that brought it and
/// its share of the host budget.
pub struct Kept<C> {
    by_sha256: HashMap<String, KeptOne<C>>,
    /// Counts requests; an entry's number is when it was last named.
    clock: u64,
}

struct KeptOne<C> {
    component: Arc<C>,
    used: u64,
    bringer: String,
    _held: Reservation,
}

impl<C> Default for Kept<C> {
    fn default() -> Self {
        Kept {
            by_sha256: HashMap::new(),
            clock: 0,
        }
    }
}

impl<C> Kept<C> {
    fn get(&mut self, sha256: &str) -> Option<Arc<C>> {
        self.clock += 1;
        let clock = self.clock;
        self.by_sha256.get_mut(sha256).map(|k| {
            k.used = clock;
            k.component.clone()
        })
    }

    /// Drop `bringer`'s least recently named compilation; whether it had one.
    fn drop_oldest_of(&mut self, bringer: &str) -> bool {
        let oldest = self
            .by_sha256
            .iter()
            .filter(|(_, k)| k.bringer == bringer)
            .min_by_key(|(_, k)| k.used)
            .map(|(sha, _)| sha.clone());
        oldest.is_some_and(|sha| self.by_sha256.remove(&sha).is_some())
    }

    /// Keep `c` (compiled from a file of `file_bytes`) for `bringer`, within its share and the
    /// host budget; else what the budget said.
    fn keep(
        &mut self,
        sha256: String,
        c: Arc<C>,
        bringer: &str,
        file_bytes: u64,
        host: &Arc<HostMemory>,
    ) -> Result<(), String> {
        self.clock += 1;
        if self.by_sha256.contains_key(&sha256) {
            return Ok(());
        }
        while self
            .by_sha256
            .values()
            .filter(|k| k.bringer == bringer)
            .count()
            >= MAX_KEPT_PER_TENANT
            && self.drop_oldest_of(bringer)
        {}
        let bytes = usize::try_from(file_bytes.saturating_mul(KEPT_BYTES_PER_FILE_BYTE))
            .unwrap_or(usize::MAX);
        let held = loop {
            if let Some(held) = host.try_reserve_bulk(bytes) {
                break held;
            }
            if !self.drop_oldest_of(bringer) {
                return Err(host.exhausted("keeping the compiled component", bytes));
            }
        };
        self.by_sha256.insert(
            sha256,
            KeptOne {
                component: c,
                used: self.clock,
                bringer: bringer.to_string(),
                _held: held,
            },
        );
        Ok(())
    }
}

impl RequestComponents {
    /// Wait for a turn to load a file for the tenant whose turns `own` are: its own first, then
    /// one of the server's, each in the order asked. `None` once the server's are closed.
    pub async fn load_turn(&self, own: &OwnTurn) -> Option<LoadTurn> {
        let own = own.0.clone().acquire_owned().await.ok()?;
        let server = self.loading.clone().acquire_owned().await.ok()?;
        Some(LoadTurn {
            _own: own,
            _server: server,
        })
    }

    /// The component of kind `C` whose bytes hash to `sha256` (lowercase hex), if one is kept.
    pub fn by_hash<C: Brought>(&self, sha256: &str) -> Option<Arc<C>> {
        lock(C::kept(self)).get(sha256)
    }

    /// Read the component at `relative` beneath `dir` (found by [`beneath`]; `path` is the
    /// whole, for messages) and compile it as a `C`, kept for `bringer` (a tenant's name), or
    /// take the compilation kept for the same bytes. Blocking: file reads and compiling (hold a
    /// [`RequestComponents::load_turn`] around it).
    pub fn load<C: Brought>(
        &self,
        runtime: &Runtime,
        (dir, relative, path): (&Path, &Path, &Path),
        bringer: &str,
    ) -> anyhow::Result<Arc<C>> {
        let file = open_beneath(dir, relative).map_err(|e| match e.raw_os_error() {
            Some(libc::ELOOP | libc::ENOTDIR) => anyhow::anyhow!(
                "{} is or passes through a symbolic link, refused below {} (or a file stands where a directory should)",
                path.display(),
                dir.display()
            ),
            _ => anyhow::anyhow!("cannot open {}: {e}", path.display()),
        })?;
        let bytes = rollbox_runtime::component::read_component(file, path)?;
        let sha256 = hex::encode(Sha256::digest(&bytes));
        if let Some(c) = self.by_hash(&sha256) {
            return Ok(c);
        }
        let c = Arc::new(runtime.load::<C>(ComponentSource::Read {
            name: path.to_path_buf(),
            bytes,
        })?);
        let file_bytes = c.file_bytes();
        lock(C::kept(self))
            .keep(
                sha256,
                c.clone(),
                bringer,
                file_bytes,
                runtime.services().host_memory(),
            )
            .map_err(anyhow::Error::msg)?;
        Ok(c)
    }
}

fn lock<C>(kept: &Mutex<Kept<C>>) -> std::sync::MutexGuard<'_, Kept<C>> {
    kept.lock().unwrap_or_else(|p| p.into_inner())
}

/// The directory of `dirs` that `path` lies beneath and the rest of `path` after it: only
/// plain names (no `..`), at least one.
pub fn beneath<'a>(dirs: &'a [PathBuf], path: &Path) -> Option<(&'a Path, PathBuf)> {
    dirs.iter().find_map(|dir| {
        let rest = path.strip_prefix(dir).ok()?;
        let plain = rest.components().all(|c| matches!(c, Component::Normal(_)));
        (plain && rest.components().next().is_some()).then(|| (dir.as_path(), rest.to_path_buf()))
    })
}

/// Open `relative` (plain names only) beneath `dir`: each directory below `dir` and the file
/// itself opened from the one before with `O_NOFOLLOW`, the file non-blocking.
fn open_beneath(dir: &Path, relative: &Path) -> std::io::Result<std::fs::File> {
    use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
    use std::os::unix::ffi::OsStrExt;
    let mut at: OwnedFd = std::fs::File::open(dir)?.into();
    let names: Vec<_> = relative.components().collect();
    for (i, name) in names.iter().enumerate() {
        let last = i + 1 == names.len();
        let name = std::ffi::CString::new(name.as_os_str().as_bytes())
            .map_err(|_| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        let flags = libc::O_RDONLY
            | libc::O_NOFOLLOW
            | libc::O_CLOEXEC
            | if last {
                libc::O_NONBLOCK
            } else {
                libc::O_DIRECTORY
            };
        // SAFETY: `at` is an open descriptor and `name` a NUL-terminated string; the result
        // is checked before it is owned.
        let fd = unsafe { libc::openat(at.as_raw_fd(), name.as_ptr(), flags) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just opened and is owned by nothing else.
        at = unsafe { OwnedFd::from_raw_fd(fd) };
    }
    Ok(at.into())
}

#[cfg(test)]
mod tests;
