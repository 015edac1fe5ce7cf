//! The on-disk cache of compiled components, keyed by the component file's sha256 and the
//! engine's compatibility hash. Only artefacts this host wrote (into a directory it created
//! with owner-only permissions) are ever deserialized.

use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use anyhow::Context as _;
use wasmtime::Engine;
use wasmtime::component::Component;

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
        let path = dir.join(format!("{sha256}-{}.cwasm", self.engine_tag));
        if path.is_file() {
            // SAFETY: the file lives in our owner-only cache directory and was written by
            // `store` below from `Engine::precompile_component` output of this engine
            // configuration (the engine tag is part of its name). wasmtime additionally checks
            // the artefact's header against this engine before using it.
            match unsafe { Component::deserialize_file(engine, &path) } {
                Ok(c) => return Ok(c),
                Err(e) => {
                    tracing::warn!("ignoring unusable cache entry {}: {e}", path.display());
                    let _ = std::fs::remove_file(&path);
                }
            }
        }
        let compiled = engine
            .precompile_component(bytes)
            .map_err(anyhow::Error::from)?;
        if let Err(e) = store(dir, &path, &compiled) {
            tracing::warn!("could not write the component cache ({e:#}); continuing without it");
        }
        // SAFETY: `compiled` was produced just above by this engine.
        Ok(unsafe { Component::deserialize(engine, &compiled) }?)
    }
}

fn store(dir: &Path, path: &Path, compiled: &[u8]) -> anyhow::Result<()> {
    create_private_dir(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().and_then(|n| n.to_str()).unwrap_or("entry"),
        std::process::id()
    ));
    std::fs::write(&tmp, compiled).with_context(|| format!("writing {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("renaming into {}", path.display()))?;
    Ok(())
}

fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
            .with_context(|| format!("restricting {}", dir.display()))?;
    }
    Ok(())
}
