//! The on-disk cache of compiled components, keyed by the component file's sha256 and the
//! engine's compatibility hash.
//!
//! Deserializing a compiled artefact runs its native code in the host, so a cache entry is
//! trusted only when all of these hold (otherwise it is ignored and the component compiled
//! afresh; see the README's sandbox section):
//!
//! * the cache directory is a directory owned by the current user and not writable by group or
//!   others (a shared or group-writable `ROLLBOX_CACHE_DIR` disables the cache, with a warning);
//! * the entry is a regular file (not a symlink) owned by the current user and not writable by
//!   group or others;
//! * the entry carries a MAC (keyed BLAKE3) under a per-user secret key kept owner-only in the
//!   directory (`key`), over the engine tag, the component's sha256 and the compiled bytes. An
//!   entry planted by anyone without the key, or copied from another component's entry, fails
//!   the check: it can neither run native code nor pass itself off under another sha256.
//!
//! An entry is the compiled artefact as wasmtime wrote it, then a trailer (MAC, length,
//! magic): the file is checked through a read-only mapping and then mapped by wasmtime itself
//! through the same open file (`/proc/self/fd`), so a cached load copies nothing.
//!
//! A component file that was loaded before is not read again: `<id>.src` entries record the
//! sha256 of a file by its identity (device, inode, size, modification and change times,
//! under the same key). Any write to the file changes its change time, which no user can set
//! back, so a changed file misses and is read and hashed afresh. A file is recorded only when
//! it did not change while it was read and its change time is over a second old, so a write
//! within the file system's timestamp granularity cannot go unseen.
//!
//! The directory is bounded: after each new entry, the least recently used entries (an entry's
//! modification time is set when it is used) are removed until at most [`MAX_CACHE_BYTES`] and
//! [`MAX_CACHE_ENTRIES`] are left (a shared server compiling what tenants bring grew it by 75
//! MiB in one run, without end, issue 52), and at most [`MAX_SOURCE_ENTRIES`] file identities.

use std::hash::{Hash, Hasher};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use wasmtime::Engine;
use wasmtime::component::Component;

/// Last bytes of a cache entry; the version changes when the entry format does.
const ENTRY_MAGIC: &[u8; 8] = b"rbxcwv2\0";
/// MAC length (keyed BLAKE3).
const MAC_BYTES: usize = 32;
/// An entry's trailer: MAC, the artefact's length (u64, little-endian), [`ENTRY_MAGIC`].
const TRAILER_BYTES: usize = MAC_BYTES + 8 + ENTRY_MAGIC.len();
/// The suffix of entry names; entries of older formats (`.cwasm` without it) are never read,
/// only evicted.
const ENTRY_SUFFIX: &str = "v2.cwasm";
/// Artefacts at least this large are authenticated on several threads.
const PARALLEL_MAC_BYTES: usize = 4 << 20;
/// The secret key's file name in the cache directory, and its length.
const KEY_FILE: &str = "key";
const KEY_BYTES: usize = 32;
/// Largest cache entry read back. Compiled components are a few times their wasm size, and a
/// component file is at most [`crate::MAX_COMPONENT_FILE_BYTES`].
const MAX_ENTRY_BYTES: u64 = 4 << 30;

/// Bytes of entries the cache directory keeps at most.
pub(crate) const MAX_CACHE_BYTES: u64 = 2 << 30;

/// Entries the cache directory keeps at most.
pub(crate) const MAX_CACHE_ENTRIES: usize = 1024;

/// File identities (`*.src`) the cache directory keeps at most.
pub(crate) const MAX_SOURCE_ENTRIES: usize = 4096;

/// A component file recorded in the cache only when its change time is at least this old.
const SETTLED: std::time::Duration = std::time::Duration::from_secs(1);

type Key = [u8; KEY_BYTES];

/// Compiled-component cache.
pub(crate) struct ComponentCache {
    dir: Option<PathBuf>,
    engine_tag: String,
}

impl ComponentCache {
    pub(crate) fn new(dir: Option<PathBuf>, engine: &Engine) -> Self {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        engine.precompile_compatibility_hash().hash(&mut h);
        ComponentCache {
            dir,
            engine_tag: format!("{:016x}", h.finish()),
        }
    }

    /// The cache directory and this user's key, or `None` (with a warning) when there is no
    /// usable cache.
    fn open(&self) -> Option<(&Path, Key)> {
        let dir = self.dir.as_deref()?;
        match open_cache_dir(dir) {
            Ok(key) => Some((dir, key)),
            Err(e) => {
                tracing::warn!("not using the component cache: {e:#}");
                None
            }
        }
    }

    fn entry_path(&self, dir: &Path, sha256: &str) -> PathBuf {
        dir.join(format!("{sha256}-{}-{ENTRY_SUFFIX}", self.engine_tag))
    }

    /// Compile `bytes` (whose sha256 is `sha256`), or load the cached compilation.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        sha256: &str,
        bytes: &[u8],
    ) -> anyhow::Result<Component> {
        let Some((dir, key)) = self.open() else {
            return Ok(Component::from_binary(engine, bytes)?);
        };
        let path = self.entry_path(dir, sha256);
        if let Some(component) = self.load_entry(engine, &key, &path, sha256) {
            return Ok(component);
        }
        let compiled = engine
            .precompile_component(bytes)
            .map_err(anyhow::Error::from)?;
        if let Err(e) = store_entry(dir, &path, &key, &self.engine_tag, sha256, &compiled) {
            tracing::warn!("could not write the component cache ({e:#}); continuing without it");
        } else if let Err(e) = evict(dir, &path, "cwasm", MAX_CACHE_BYTES, MAX_CACHE_ENTRIES) {
            tracing::warn!("could not trim the component cache: {e:#}");
        }
        // SAFETY: `compiled` was produced just above by this engine.
        Ok(unsafe { Component::deserialize(engine, &compiled) }?)
    }

    /// The cached compilation of the component whose sha256 is `sha256`, if there is a valid
    /// entry: nothing is compiled.
    pub(crate) fn cached(&self, engine: &Engine, sha256: &str) -> Option<Component> {
        let (dir, key) = self.open()?;
        self.load_entry(engine, &key, &self.entry_path(dir, sha256), sha256)
    }

    /// The entry at `path`, deserialized, or `None` (an invalid one is removed).
    fn load_entry(
        &self,
        engine: &Engine,
        key: &Key,
        path: &Path,
        sha256: &str,
    ) -> Option<Component> {
        let entry = match open_entry(path, key, &self.engine_tag, sha256) {
            Ok(Some(entry)) => entry,
            Ok(None) => return None,
            Err(e) => {
                tracing::warn!("ignoring cache entry {}: {e:#}", path.display());
                let _ = std::fs::remove_file(path);
                return None;
            }
        };
        // Used now: the last to be removed when the cache is over its bounds.
        let _ = entry.file.set_modified(std::time::SystemTime::now());
        // SAFETY: the artefact is authenticated with this user's secret key as the output of
        // `Engine::precompile_component` stored by `store_entry` for this engine tag and
        // sha256; nobody else can produce a valid MAC. wasmtime also checks the artefact's
        // header against this engine before using it.
        match unsafe { entry.deserialize(engine) } {
            Ok(c) => Some(c),
            Err(e) => {
                tracing::warn!("ignoring unusable cache entry {}: {e:#}", path.display());
                let _ = std::fs::remove_file(path);
                None
            }
        }
    }

    /// The sha256 recorded for the component file whose metadata is `meta`, if it was read
    /// before and has not changed since.
    #[cfg(unix)]
    pub(crate) fn known_sha256(&self, meta: &std::fs::Metadata) -> Option<String> {
        let (dir, key) = self.open()?;
        let identity = FileIdentity::of(meta);
        let path = dir.join(identity.entry_name(&key));
        match read_source_entry(&path, &key, &identity) {
            Ok(found) => {
                if found.is_some()
                    && let Ok(f) = open_nofollow(&path)
                {
                    let _ = f.set_modified(std::time::SystemTime::now());
                }
                found
            }
            Err(e) => {
                tracing::warn!("ignoring cache entry {}: {e:#}", path.display());
                let _ = std::fs::remove_file(&path);
                None
            }
        }
    }

    #[cfg(not(unix))]
    pub(crate) fn known_sha256(&self, _meta: &std::fs::Metadata) -> Option<String> {
        None
    }

    /// Record that the component file whose metadata was `before` when it was opened and
    /// `after` once it was read has the sha256 `sha256`, if it did not change meanwhile and
    /// its change time is settled (see the module's documentation).
    #[cfg(unix)]
    pub(crate) fn remember_sha256(
        &self,
        before: &std::fs::Metadata,
        after: &std::fs::Metadata,
        sha256: &str,
    ) {
        let identity = FileIdentity::of(before);
        if identity != FileIdentity::of(after) || !identity.settled() {
            return;
        }
        let Some((dir, key)) = self.open() else {
            return;
        };
        let path = dir.join(identity.entry_name(&key));
        let text = format!("{sha256}\n{}\n", identity.mac(&key, sha256).to_hex());
        if let Err(e) = write_atomically(dir, &path, &[text.as_bytes()]) {
            tracing::warn!("could not write the component cache ({e:#}); continuing without it");
        } else if let Err(e) = evict(dir, &path, "src", u64::MAX, MAX_SOURCE_ENTRIES) {
            tracing::warn!("could not trim the component cache: {e:#}");
        }
    }

    #[cfg(not(unix))]
    pub(crate) fn remember_sha256(
        &self,
        _before: &std::fs::Metadata,
        _after: &std::fs::Metadata,
        _sha256: &str,
    ) {
    }
}

/// What names a component file's contents as long as nobody writes to it: any write changes
/// its change time, which only the system clock moves.
#[cfg(unix)]
#[derive(Debug, PartialEq, Eq)]
struct FileIdentity {
    text: String,
    ctime: std::time::SystemTime,
}

#[cfg(unix)]
impl FileIdentity {
    fn of(meta: &std::fs::Metadata) -> Self {
        use std::os::unix::fs::MetadataExt;
        let ctime = std::time::UNIX_EPOCH
            + std::time::Duration::new(meta.ctime().max(0) as u64, meta.ctime_nsec() as u32);
        FileIdentity {
            text: format!(
                "{}:{}:{}:{}.{:09}:{}.{:09}",
                meta.dev(),
                meta.ino(),
                meta.len(),
                meta.mtime(),
                meta.mtime_nsec(),
                meta.ctime(),
                meta.ctime_nsec()
            ),
            ctime,
        }
    }

    /// Changed over [`SETTLED`] ago: a write now gets a later change time.
    fn settled(&self) -> bool {
        std::time::SystemTime::now()
            .duration_since(self.ctime)
            .is_ok_and(|age| age >= SETTLED)
    }

    /// The entry's file name: the identity under the key, so names say nothing and cannot be
    /// made up.
    fn entry_name(&self, key: &Key) -> String {
        let mut h = blake3::Hasher::new_keyed(key);
        h.update(b"rollbox component file identity v1\0");
        h.update(self.text.as_bytes());
        format!("{}.src", &h.finalize().to_hex()[..32])
    }

    fn mac(&self, key: &Key, sha256: &str) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(key);
        h.update(b"rollbox component file sha256 v1\0");
        h.update(self.text.as_bytes());
        h.update(b"\0");
        h.update(sha256.as_bytes());
        h.finalize()
    }
}

/// The sha256 a `*.src` entry records for `identity`, authenticated; `None` when there is no
/// entry.
#[cfg(unix)]
fn read_source_entry(
    path: &Path,
    key: &Key,
    identity: &FileIdentity,
) -> anyhow::Result<Option<String>> {
    let file = match open_nofollow(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).context("opening"),
    };
    check_private(&file.metadata()?, "the cache entry", false)?;
    let mut text = String::new();
    file.take(256)
        .read_to_string(&mut text)
        .context("reading")?;
    let mut lines = text.lines();
    let (Some(sha256), Some(mac)) = (lines.next(), lines.next()) else {
        bail!("not a rollbox file entry");
    };
    let mac = blake3::Hash::from_hex(mac).context("not a rollbox file entry")?;
    if sha256.len() != 64 || !sha256.bytes().all(|b| b.is_ascii_hexdigit()) {
        bail!("not a rollbox file entry");
    }
    // blake3::Hash compares in constant time.
    if identity.mac(key, sha256) != mac {
        bail!("its MAC does not match: it was not written by this user's rollbox for this file");
    }
    Ok(Some(sha256.to_string()))
}

/// The MAC of an entry: engine tag, component sha256 and compiled bytes, under `key`.
fn entry_mac(key: &Key, engine_tag: &str, sha256: &str, compiled: &[u8]) -> blake3::Hash {
    let mut h = blake3::Hasher::new_keyed(key);
    h.update(b"rollbox component cache v2\0");
    h.update(engine_tag.as_bytes());
    h.update(b"\0");
    h.update(sha256.as_bytes());
    h.update(b"\0");
    if compiled.len() >= PARALLEL_MAC_BYTES {
        h.update_rayon(compiled);
    } else {
        h.update(compiled);
    }
    h.finalize()
}

/// An authenticated entry: the open file, mapped, whose first `len` bytes are the artefact.
struct Entry {
    file: std::fs::File,
    map: memmap2::Mmap,
    len: usize,
}

impl Entry {
    /// The component, mapped from the entry's file where the platform lets wasmtime map it
    /// through the open descriptor (copying nothing), else copied from the mapping.
    ///
    /// # Safety
    ///
    /// The entry must be authenticated (`open_entry`), as `Component::deserialize` requires.
    unsafe fn deserialize(&self, engine: &Engine) -> anyhow::Result<Component> {
        #[cfg(target_os = "linux")]
        {
            use std::os::fd::AsRawFd;
            // The same open file, whatever the name now points to.
            let fd = format!("/proc/self/fd/{}", self.file.as_raw_fd());
            // SAFETY: the caller's contract; the file is the one authenticated, owner-only in
            // an owner-only directory.
            match unsafe { Component::deserialize_file(engine, &fd) } {
                Ok(c) => return Ok(c),
                // A file system mounted noexec, or no /proc: copy instead.
                Err(e) => tracing::debug!("mapping the cache entry failed ({e:#}); copying it"),
            }
        }
        // SAFETY: as above.
        Ok(unsafe { Component::deserialize(engine, &self.map[..self.len]) }?)
    }
}

/// The authenticated entry at `path`; `None` when there is no entry.
fn open_entry(
    path: &Path,
    key: &Key,
    engine_tag: &str,
    sha256: &str,
) -> anyhow::Result<Option<Entry>> {
    let file = match open_nofollow(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).context("opening"),
    };
    let meta = file.metadata().context("reading its metadata")?;
    check_private(&meta, "the cache entry", false)?;
    if meta.len() > MAX_ENTRY_BYTES {
        bail!(
            "{} bytes, over the {MAX_ENTRY_BYTES} byte limit",
            meta.len()
        );
    }
    if meta.len() < TRAILER_BYTES as u64 {
        bail!("not a rollbox cache entry (no trailer)");
    }
    // SAFETY: a read-only private mapping of a regular file owned by this user and writable by
    // nobody else; only this user could change it while it is mapped, and the bytes are only
    // read (a change shows as a failed MAC, or in the artefact as any write by this user
    // would).
    let map = unsafe { memmap2::Mmap::map(&file) }.context("mapping")?;
    let (body, trailer) = map.split_at(map.len() - TRAILER_BYTES);
    let (mac, rest) = trailer.split_at(MAC_BYTES);
    let (len, magic) = rest.split_at(8);
    if magic != ENTRY_MAGIC {
        bail!("not a rollbox cache entry (no trailer)");
    }
    let len = u64::from_le_bytes(len.try_into().expect("8 bytes"));
    if len != body.len() as u64 {
        bail!("its length ({len}) is not its artefact's ({})", body.len());
    }
    let mac: [u8; MAC_BYTES] = mac.try_into().expect("MAC_BYTES");
    // blake3::Hash compares in constant time.
    if entry_mac(key, engine_tag, sha256, body) != blake3::Hash::from_bytes(mac) {
        bail!(
            "its MAC does not match: it was not written by this user's rollbox for this component"
        );
    }
    let len = body.len();
    Ok(Some(Entry { file, map, len }))
}

fn store_entry(
    dir: &Path,
    path: &Path,
    key: &Key,
    engine_tag: &str,
    sha256: &str,
    compiled: &[u8],
) -> anyhow::Result<()> {
    let mac = entry_mac(key, engine_tag, sha256, compiled);
    let len = (compiled.len() as u64).to_le_bytes();
    write_atomically(dir, path, &[compiled, mac.as_bytes(), &len, ENTRY_MAGIC])
}

/// Write `parts` to a new owner-only file beside `path`, then rename it into place.
fn write_atomically(dir: &Path, path: &Path, parts: &[&[u8]]) -> anyhow::Result<()> {
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let mut f = create_private_file(&tmp)?;
    for part in parts {
        f.write_all(part)
            .with_context(|| format!("writing {}", tmp.display()))?;
    }
    drop(f);
    std::fs::rename(&tmp, path).with_context(|| format!("renaming into {}", path.display()))?;
    Ok(())
}

/// Remove the least recently used entries (`*.EXTENSION`, oldest modification time first) of
/// `dir` but `keep` until at most `max_bytes` and `max_entries` are left. Only regular files
/// are counted and removed (removing a name never follows a link).
fn evict(
    dir: &Path,
    keep: &Path,
    extension: &str,
    max_bytes: u64,
    max_entries: usize,
) -> anyhow::Result<()> {
    let mut entries = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let e = e?;
        let path = e.path();
        if path.extension().is_none_or(|x| x != extension) {
            continue;
        }
        let meta = e.metadata()?;
        if !meta.is_file() {
            continue;
        }
        let used = meta.modified().unwrap_or(std::time::UNIX_EPOCH);
        entries.push((used, meta.len(), path));
    }
    entries.sort();
    let mut bytes: u64 = entries.iter().map(|(_, n, _)| n).sum();
    let mut count = entries.len();
    for (_, n, path) in entries {
        if bytes <= max_bytes && count <= max_entries {
            break;
        }
        if path == keep {
            continue;
        }
        std::fs::remove_file(&path).with_context(|| format!("removing {}", path.display()))?;
        bytes -= n;
        count -= 1;
    }
    Ok(())
}

/// Create the cache directory owner-only if missing, check that nobody else can write to it,
/// and return this user's secret key (created on first use).
fn open_cache_dir(dir: &Path) -> anyhow::Result<Key> {
    if !dir.exists() {
        create_private_dir(dir)?;
    }
    let meta = std::fs::metadata(dir).with_context(|| format!("reading {}", dir.display()))?;
    if !meta.is_dir() {
        bail!("{} is not a directory", dir.display());
    }
    check_private(
        &meta,
        &format!("the cache directory {}", dir.display()),
        false,
    )?;
    read_or_create_key(&dir.join(KEY_FILE))
}

fn read_or_create_key(path: &Path) -> anyhow::Result<Key> {
    for _ in 0..3 {
        match read_key(path) {
            Ok(Some(key)) => return Ok(key),
            Ok(None) => {}
            Err(e) => return Err(e),
        }
        // Write the key beside, then link it into place: a concurrent process either links
        // first (we read its key) or finds ours complete.
        let mut key = [0u8; KEY_BYTES];
        std::fs::File::open("/dev/urandom")
            .and_then(|mut r| r.read_exact(&mut key))
            .context("reading random bytes for the cache key")?;
        let tmp = path.with_file_name(format!(".{KEY_FILE}.{}.tmp", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let mut f = create_private_file(&tmp)?;
        f.write_all(&key)
            .with_context(|| format!("writing {}", tmp.display()))?;
        drop(f);
        let linked = std::fs::hard_link(&tmp, path);
        let _ = std::fs::remove_file(&tmp);
        match linked {
            Ok(()) => return Ok(key),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e).with_context(|| format!("creating {}", path.display())),
        }
    }
    bail!("could not create or read the cache key {}", path.display())
}

fn read_key(path: &Path) -> anyhow::Result<Option<Key>> {
    let f = match open_nofollow(path) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e).with_context(|| format!("opening {}", path.display())),
    };
    let meta = f.metadata()?;
    check_private(&meta, &format!("the cache key {}", path.display()), true)?;
    let mut key = Vec::with_capacity(KEY_BYTES);
    f.take(KEY_BYTES as u64 + 1).read_to_end(&mut key)?;
    if key.len() != KEY_BYTES {
        bail!(
            "the cache key {} has {} bytes, expected {KEY_BYTES}; delete it and rollbox makes a new one",
            path.display(),
            key.len()
        );
    }
    Ok(Some(key.try_into().expect("KEY_BYTES")))
}

/// Refuse what another user could have written: owned by someone else, writable by group or
/// others (readable too, for `secret`), or not a regular file or directory.
#[cfg(unix)]
fn check_private(meta: &std::fs::Metadata, what: &str, secret: bool) -> anyhow::Result<()> {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: geteuid has no preconditions and cannot fail.
    let me = unsafe { libc::geteuid() };
    if meta.uid() != me {
        bail!(
            "{what} is owned by uid {}, not by the current user (uid {me}); set ROLLBOX_CACHE_DIR to a directory of your own",
            meta.uid()
        );
    }
    let forbidden = if secret { 0o077 } else { 0o022 };
    if meta.mode() & forbidden != 0 {
        bail!(
            "{what} has mode {:o}, which lets other users {}; make it owner-only (chmod go-rwx) or set ROLLBOX_CACHE_DIR to a private directory",
            meta.mode() & 0o7777,
            if secret { "read it" } else { "write to it" }
        );
    }
    if !(meta.is_file() || meta.is_dir()) {
        bail!("{what} is not a regular file");
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_private(_meta: &std::fs::Metadata, _what: &str, _secret: bool) -> anyhow::Result<()> {
    bail!("the component cache needs a Unix file system (owner and mode checks)")
}

fn open_nofollow(path: &Path) -> std::io::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        // O_NONBLOCK: a FIFO planted under an entry's name must not block the open.
        options.custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK);
    }
    let f = options.open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    Ok(f)
}

fn create_private_file(path: &Path) -> anyhow::Result<std::fs::File> {
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600).custom_flags(libc::O_NOFOLLOW);
    }
    options
        .open(path)
        .with_context(|| format!("creating {}", path.display()))
}

fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    let mut builder = std::fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("restricting {}", dir.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
