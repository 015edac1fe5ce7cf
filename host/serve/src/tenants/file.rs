//! Reading the tenants file: its TOML entries checked one by one (keys, components, caps,
//! quotas, cores) into [`Tenant`]s, from a file no other user could have written.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use rollbox_runtime::{Caps, LimitSpec};
use serde::Deserialize;

use super::{Quota, Tenant, Usage};

/// Largest tenants file, bytes.
pub const MAX_FILE_BYTES: u64 = 1 << 20;

/// A tenant as the file gives it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantEntry {
    name: String,
    key_sha256: Vec<String>,
    rewards: Option<Vec<String>>,
    tools: Option<Vec<String>>,
    workflows: Option<Vec<String>>,
    #[serde(default)]
    component_dirs: Vec<PathBuf>,
    #[serde(default)]
    component_sha256: Vec<String>,
    timeout: Option<String>,
    max_memory: Option<String>,
    #[serde(default)]
    limits: LimitSpec,
    max_requests_in_flight: Option<usize>,
    max_episodes_in_flight: Option<usize>,
    max_reward_calls_in_flight: Option<usize>,
    sandbox_seconds_per_minute: Option<u64>,
    max_body_bytes: Option<usize>,
    max_rows_per_request: Option<usize>,
    episode_cpus: Option<String>,
    #[serde(default)]
    operator: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct TenantsFile {
    #[serde(default)]
    tenant: Vec<TenantEntry>,
}

/// Largest `sandbox_seconds_per_minute`: a day of sandbox time a minute (1,440 cores).
pub const MAX_SANDBOX_SECONDS_PER_MINUTE: usize = 86_400;

/// The components a server registers, which a tenant's `rewards` and `tools` may name.
#[derive(Debug, Clone, Default)]
pub struct Registered {
    pub rewards: Vec<String>,
    pub tools: Vec<String>,
    /// `default` (the server's `--workflow`) and its `--extra-workflow`s.
    pub workflows: Vec<String>,
}

pub(super) fn read(
    path: &Path,
    server: Quota,
    registered: &Registered,
    usage: &HashMap<String, Arc<Usage>>,
) -> anyhow::Result<Vec<Arc<Tenant>>> {
    let text = read_trusted(path)?;
    let what = path.display();
    let file: TenantsFile =
        toml::from_str(&text).with_context(|| format!("{what}: not a valid tenants file"))?;
    if file.tenant.is_empty() {
        bail!("{what} has no [[tenant]]: add one with a name and key_sha256 (see docs/serve.md)");
    }
    let mut names = HashMap::new();
    let mut owners: HashMap<[u8; 32], String> = HashMap::new();
    let mut tenants = Vec::with_capacity(file.tenant.len());
    for t in file.tenant {
        let name = t.name;
        if name.is_empty()
            || name.len() > 64
            || !name
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        {
            bail!("{what}: tenant name {name:?} must be 1 to 64 letters, digits, '-', '_' or '.'");
        }
        if names.insert(name.clone(), ()).is_some() {
            bail!("{what}: tenant {name:?} is named twice");
        }
        if t.key_sha256.is_empty() {
            bail!("{what}: tenant {name:?} has no key_sha256 (printf %s \"$KEY\" | sha256sum)");
        }
        let mut keys = Vec::with_capacity(t.key_sha256.len());
        for (i, h) in t.key_sha256.iter().enumerate() {
            let mut digest = [0u8; 32];
            if hex::decode_to_slice(h.trim(), &mut digest).is_err() {
                bail!(
                    "{what}: tenant {name:?} key_sha256[{i}] is not 64 hex digits: store the SHA-256 of the key (printf %s \"$KEY\" | sha256sum), never the key"
                );
            }
            if let Some(other) = owners.insert(digest, name.clone()) {
                bail!("{what}: tenants {other:?} and {name:?} share a key; give each its own");
            }
            keys.push(digest);
        }
        let capped = |field: &str, v: Option<usize>, default: usize, cap: usize| {
            let v = v.unwrap_or(default);
            if v == 0 || v > cap {
                bail!("{what}: tenant {name:?} {field} is {v}; it must be from 1 to {cap}");
            }
            Ok(v)
        };
        let quota = Quota {
            requests_in_flight: capped(
                "max_requests_in_flight",
                t.max_requests_in_flight,
                4.min(server.requests_in_flight),
                server.requests_in_flight,
            )?,
            episodes_in_flight: capped(
                "max_episodes_in_flight",
                t.max_episodes_in_flight,
                server.episodes_in_flight,
                server.episodes_in_flight,
            )?,
            reward_calls_in_flight: capped(
                "max_reward_calls_in_flight",
                t.max_reward_calls_in_flight,
                server.reward_calls_in_flight,
                server.reward_calls_in_flight,
            )?,
            sandbox_seconds_per_minute: match t.sandbox_seconds_per_minute {
                None => None,
                Some(v) => Some(capped(
                    "sandbox_seconds_per_minute",
                    usize::try_from(v).ok(),
                    0,
                    MAX_SANDBOX_SECONDS_PER_MINUTE,
                )? as u64),
            },
            body_bytes: capped(
                "max_body_bytes",
                t.max_body_bytes,
                server.body_bytes,
                server.body_bytes,
            )?,
            rows_per_request: capped(
                "max_rows_per_request",
                t.max_rows_per_request,
                server.rows_per_request,
                server.rows_per_request,
            )?,
        };
        for (what_list, list, known) in [
            ("rewards", &t.rewards, &registered.rewards),
            ("tools", &t.tools, &registered.tools),
            ("workflows", &t.workflows, &registered.workflows),
        ] {
            for n in list.iter().flatten() {
                if !known.contains(n) {
                    let flag = match what_list {
                        "workflows" => "extra-workflow",
                        "rewards" => "reward",
                        _ => "tool",
                    };
                    let known = if known.is_empty() {
                        "none".into()
                    } else {
                        known.join(", ")
                    };
                    bail!(
                        "{what}: tenant {name:?} lists {what_list} entry {n:?}, which this server does not register (it registers: {known}); register it with --{flag} {n}=... or take it out"
                    );
                }
            }
        }
        let mut limits = t.limits.clone();
        for (key, text) in [("timeout", &t.timeout), ("max_memory", &t.max_memory)] {
            let Some(text) = text else { continue };
            if limits.get(key).is_some() {
                bail!(
                    "{what}: tenant {name:?} gives {key} twice (as `{key}` and in `limits`): give it once"
                );
            }
            limits
                .set_text(key, text)
                .map_err(|e| anyhow::anyhow!("{what}: tenant {name:?} {e}"))?;
        }
        let zero = |key| match limits.get(key) {
            Some(rollbox_runtime::limits::LimitValue::Number(n)) => n == 0,
            Some(rollbox_runtime::limits::LimitValue::Duration(d)) => d.is_zero(),
            None => false,
        };
        if zero("timeout") || zero("max_memory") {
            bail!(
                "{what}: tenant {name:?} has a zero timeout or max_memory: give a positive one (or leave it out)"
            );
        }
        let caps = Caps {
            limits,
            retries: None,
        };
        for d in &t.component_dirs {
            let plain = d
                .components()
                .all(|c| !matches!(c, std::path::Component::ParentDir));
            if !d.is_absolute() || !plain {
                bail!(
                    "{what}: tenant {name:?} component_dirs entry {} must be an absolute path without `..`",
                    d.display()
                );
            }
        }
        let mut component_sha256 = Vec::with_capacity(t.component_sha256.len());
        for h in &t.component_sha256 {
            let h = h.trim().to_ascii_lowercase();
            if h.len() != 64 || !h.bytes().all(|b| b.is_ascii_hexdigit()) {
                bail!(
                    "{what}: tenant {name:?} component_sha256 entry {h:?} is not 64 hex digits: give a component's sha256 (`rollbox inspect FILE` prints it)"
                );
            }
            component_sha256.push(h);
        }
        let episode_cpus = t
            .episode_cpus
            .as_deref()
            .map(crate::threads::CpuSet::parse)
            .transpose()
            .map_err(|e| anyhow::anyhow!("{what}: tenant {name:?} episode_cpus {e}"))?;
        let usage = usage.get(&name).cloned().unwrap_or_default();
        usage.meter.set_quota(quota.sandbox_seconds_per_minute);
        if let Some(Some(running)) = usage.episode_threads.get()
            && running.cpus() != episode_cpus.as_ref()
        {
            // Its episode threads may hold episodes now: they stay as they are.
            let shown =
                |c: Option<&crate::threads::CpuSet>| c.map_or("any".into(), |c| c.to_string());
            tracing::warn!(
                "tenant {name:?}: episode_cpus is now {} but its episode threads keep cores {} until the server restarts",
                shown(episode_cpus.as_ref()),
                shown(running.cpus())
            );
        }
        tenants.push(Arc::new(Tenant {
            name,
            keys,
            rewards: t.rewards,
            tools: t.tools,
            workflows: t.workflows,
            component_dirs: t.component_dirs,
            component_sha256,
            caps,
            quota,
            episode_cpus,
            operator: t.operator,
            usage,
        }));
    }
    Ok(tenants)
}

/// The file's text, if another user could not have written it: a regular file owned by the
/// current user or root, writable by nobody else (checked on the opened file), at most
/// [`MAX_FILE_BYTES`].
fn read_trusted(path: &Path) -> anyhow::Result<String> {
    use std::io::Read as _;
    let what = path.display();
    // A regular file, checked on what was opened (a FIFO under the name cannot block it).
    let file = rollbox_runtime::file::open_regular(path)
        .with_context(|| format!("opening the tenants file {what}"))?;
    let meta = file.metadata()?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        // SAFETY: geteuid has no preconditions and cannot fail.
        let me = unsafe { libc::geteuid() };
        if meta.uid() != me && meta.uid() != 0 {
            bail!(
                "the tenants file {what} is owned by uid {}, neither the current user (uid {me}) nor root: another user could give themselves a key",
                meta.uid()
            );
        }
        if meta.mode() & 0o022 != 0 {
            bail!(
                "the tenants file {what} has mode {:o}, which lets other users add keys to it; chmod go-w it",
                meta.mode() & 0o7777
            );
        }
    }
    if meta.len() > MAX_FILE_BYTES {
        bail!(
            "the tenants file {what} is {} bytes; at most {MAX_FILE_BYTES}",
            meta.len()
        );
    }
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("reading the tenants file {what} (UTF-8 TOML)"))?;
    Ok(text)
}
