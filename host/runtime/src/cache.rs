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
//! * the entry carries a MAC (HMAC-SHA256) under a per-user secret key kept owner-only in the
//!   directory (`key`), over the engine tag, the component's sha256 and the compiled bytes. An
//!   entry planted by anyone without the key, or copied from another component's entry, fails
//!   the check: it can neither run native code nor pass itself off under another sha256.
//!
//! The directory is bounded: after each new entry, the least recently used entries (an entry's
//! modification time is set when it is used) are removed until at most [`MAX_CACHE_BYTES`] and
//! [`MAX_CACHE_ENTRIES`] are left (a shared server compiling what tenants bring grew it by 75
//! MiB in one run, without end, issue 52).

use std::hash::{Hash, Hasher};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};

use anyhow::{Context as _, bail};
use hmac::{Hmac, Mac};
use sha2::Sha256;
use wasmtime::Engine;
use wasmtime::component::Component;

/// First bytes of a cache entry; the version changes when the entry format does.
const ENTRY_MAGIC: &[u8; 8] = b"rbxcwv1\0";
/// MAC length (HMAC-SHA256).
const MAC_BYTES: usize = 32;
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

type HmacSha256 = Hmac<Sha256>;

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

    /// Compile `bytes` (whose sha256 is `sha256`), or load the cached compilation.
    pub(crate) fn load(
        &self,
        engine: &Engine,
        sha256: &str,
        bytes: &[u8],
    ) -> anyhow::Result<Component> {
        let Some(dir) = &self.dir else {
            return Ok(Component::from_binary(engine, bytes)?);
        };
        let key = match open_cache_dir(dir) {
            Ok(key) => key,
            Err(e) => {
                tracing::warn!("not using the component cache: {e:#}");
                return Ok(Component::from_binary(engine, bytes)?);
            }
        };
        let path = dir.join(format!("{sha256}-{}.cwasm", self.engine_tag));
        match read_entry(&path, &key, &self.engine_tag, sha256) {
            Ok(Some(compiled)) => {
                // Used now: the last to be removed when the cache is over its bounds.
                if let Ok(f) = open_nofollow(&path) {
                    let _ = f.set_modified(std::time::SystemTime::now());
                }
                // SAFETY: the bytes are authenticated with this user's secret key as the output
                // of `Engine::precompile_component` stored by `store_entry` below for this
                // engine tag and sha256; nobody else can produce a valid MAC. wasmtime also
                // checks the artefact's header against this engine before using it.
                match unsafe { Component::deserialize(engine, &compiled) } {
                    Ok(c) => return Ok(c),
                    Err(e) => {
                        tracing::warn!("ignoring unusable cache entry {}: {e}", path.display());
                        let _ = std::fs::remove_file(&path);
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!("ignoring cache entry {}: {e:#}", path.display());
                let _ = std::fs::remove_file(&path);
            }
        }
        let compiled = engine
            .precompile_component(bytes)
            .map_err(anyhow::Error::from)?;
        if let Err(e) = store_entry(dir, &path, &key, &self.engine_tag, sha256, &compiled) {
            tracing::warn!("could not write the component cache ({e:#}); continuing without it");
        } else if let Err(e) = evict(dir, &path, MAX_CACHE_BYTES, MAX_CACHE_ENTRIES) {
            tracing::warn!("could not trim the component cache: {e:#}");
        }
        // SAFETY: `compiled` was produced just above by this engine.
        Ok(unsafe { Component::deserialize(engine, &compiled) }?)
    }
}

/// The MAC of an entry: engine tag, component sha256 and compiled bytes, under `key`.
fn entry_mac(key: &[u8], engine_tag: &str, sha256: &str, compiled: &[u8]) -> HmacSha256 {
    let mut mac = HmacSha256::new_from_slice(key).expect("HMAC takes keys of any length");
    mac.update(b"rollbox component cache v1\0");
    mac.update(engine_tag.as_bytes());
    mac.update(b"\0");
    mac.update(sha256.as_bytes());
    mac.update(b"\0");
    mac.update(compiled);
    mac
}

/// The authenticated compiled bytes of an entry; `None` when there is no entry.
fn read_entry(
    path: &Path,
    key: &[u8],
    engine_tag: &str,
    sha256: &str,
) -> anyhow::Result<Option<Vec<u8>>> {
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
    let mut data = Vec::with_capacity(meta.len() as usize);
    file.take(MAX_ENTRY_BYTES)
        .read_to_end(&mut data)
        .context("reading")?;
    let header = ENTRY_MAGIC.len() + MAC_BYTES;
    if data.len() < header || &data[..ENTRY_MAGIC.len()] != ENTRY_MAGIC {
        bail!("not a rollbox cache entry (no header)");
    }
    let tag = data[ENTRY_MAGIC.len()..header].to_vec();
    let compiled = data.split_off(header);
    entry_mac(key, engine_tag, sha256, &compiled)
        .verify_slice(&tag)
        .map_err(|_| {
            anyhow::anyhow!("its MAC does not match: it was not written by this user's rollbox for this component")
        })?;
    Ok(Some(compiled))
}

fn store_entry(
    dir: &Path,
    path: &Path,
    key: &[u8],
    engine_tag: &str,
    sha256: &str,
    compiled: &[u8],
) -> anyhow::Result<()> {
    let tag = entry_mac(key, engine_tag, sha256, compiled)
        .finalize()
        .into_bytes();
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id()
    ));
    let _ = std::fs::remove_file(&tmp);
    let mut f = create_private_file(&tmp)?;
    f.write_all(ENTRY_MAGIC)
        .and_then(|()| f.write_all(&tag))
        .and_then(|()| f.write_all(compiled))
        .with_context(|| format!("writing {}", tmp.display()))?;
    drop(f);
    std::fs::rename(&tmp, path).with_context(|| format!("renaming into {}", path.display()))?;
    Ok(())
}

/// Remove the least recently used entries (`*.cwasm`, oldest modification time first) of
/// `dir` but `keep` until at most `max_bytes` and `max_entries` are left. Only regular files
/// are counted and removed (removing a name never follows a link).
fn evict(dir: &Path, keep: &Path, max_bytes: u64, max_entries: usize) -> anyhow::Result<()> {
    let mut entries = Vec::new();
    for e in std::fs::read_dir(dir).with_context(|| format!("listing {}", dir.display()))? {
        let e = e?;
        let path = e.path();
        if path.extension().is_none_or(|x| x != "cwasm") {
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
fn open_cache_dir(dir: &Path) -> anyhow::Result<Vec<u8>> {
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

fn read_or_create_key(path: &Path) -> anyhow::Result<Vec<u8>> {
    for _ in 0..3 {
        match read_key(path) {
            Ok(Some(key)) => return Ok(key),
            Ok(None) => {}
            Err(e) => return Err(e),
        }
        // Write the key beside, then link it into place: a concurrent process either links
        // first (we read its key) or finds ours complete.
        let mut key = vec![0u8; KEY_BYTES];
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

fn read_key(path: &Path) -> anyhow::Result<Option<Vec<u8>>> {
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
    Ok(Some(key))
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
