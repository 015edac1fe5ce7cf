//! Components a tenant's request names by path (beneath its `component_dirs`) or content hash
//! (`sha256:HEX`), read and compiled on the tenant's threads, and the rewards and tools its
//! episodes and calls reach.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::Extension;
use axum::http::StatusCode;
use axum::response::Response;

use super::callers::Caller;
use super::{AppState, error};
use crate::request_components::Brought;

pub(super) fn valid_component_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Whether `path` may name a component file: absolute, at most 4,096 bytes, no NUL.
pub(super) fn valid_component_path(path: &str) -> bool {
    path.starts_with('/') && path.len() <= 4096 && !path.contains('\0')
}

/// Whether `named` is `sha256:` and 64 hex digits.
pub(super) fn valid_component_hash(named: &str) -> bool {
    named
        .strip_prefix(crate::request_components::HASH_PREFIX)
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Rewards, and tools, one `/v1/episodes` request may bring.
pub(super) const MAX_BROUGHT: usize = 8;

/// The component a tenant's request brings as `named`: a path beneath its `component_dirs`,
/// or `sha256:HEX` among its `component_sha256` (one the server compiled: `own` finds those
/// it started with, then those requests brought; see [`crate::request_components`]). `None`
/// when `named` is neither (a name the caller looks up); the answer refusing it otherwise.
/// A file's reading and compiling run on the tenant's threads, their time charged to it.
pub(super) async fn brought<C: Brought>(
    app: &Arc<AppState>,
    caller: &Caller,
    named: &str,
    own: impl FnOnce(&str) -> Option<Arc<C>>,
) -> Result<Option<Arc<C>>, Response> {
    use crate::request_components::{HASH_PREFIX, beneath};
    let kind = C::KIND;
    let by_path = named.starts_with('/');
    let by_hash = named.strip_prefix(HASH_PREFIX);
    if !by_path && by_hash.is_none() {
        return Ok(None);
    }
    let Some(Extension(t)) = caller else {
        return Err(error(
            StatusCode::BAD_REQUEST,
            format!(
                "the {kind} {named:?} is named by path or hash, which a server takes from tenants only (`component_dirs`, `component_sha256` in --tenants); name one of the server's {kind}s instead"
            ),
        ));
    };
    if let Some(sha) = by_hash {
        let sha = sha.to_ascii_lowercase();
        if !t.component_sha256.contains(&sha) {
            return Err(error(
                StatusCode::FORBIDDEN,
                format!(
                    "tenant `{}` may not use the {kind} {named} (it is not among its component_sha256); the operator adds the hash to the tenant's entry in the --tenants file",
                    t.name
                ),
            ));
        }
        return match own(&sha).or_else(|| app.request_components.by_hash(&sha)) {
            Some(c) => Ok(Some(c)),
            None => Err(error(
                StatusCode::NOT_FOUND,
                format!(
                    "no {kind} with sha256 {sha} is compiled on this server: name its file by path (beneath a tenant's component_dirs) once first"
                ),
            )),
        };
    }
    let path = std::path::PathBuf::from(named);
    let Some((dir, relative)) = beneath(&t.component_dirs, &path) else {
        let dirs: Vec<String> = t
            .component_dirs
            .iter()
            .map(|d| d.display().to_string())
            .collect();
        return Err(error(
            StatusCode::FORBIDDEN,
            format!(
                "tenant `{}` may not load {named}: a path must be beneath one of its component_dirs ({}), without `..`; the operator lists them in the --tenants file",
                t.name,
                if dirs.is_empty() {
                    "none".into()
                } else {
                    dirs.join(", ")
                }
            ),
        ));
    };
    let (runtime, kept) = (app.rollout.runtime.clone(), app.request_components.clone());
    let bringer = t.name.clone();
    let dir = dir.to_path_buf();
    let Some(permit) = app.request_components.load_turn(&t.usage.load_turn).await else {
        return Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down".into(),
        ));
    };
    // The permit goes with the work: held until the file is read and compiled, even if the
    // request is gone by then.
    let load = move || {
        let start = Instant::now();
        let loaded = kept.load::<C>(&runtime, (&dir, &relative, &path), &bringer);
        drop(permit);
        (loaded, start.elapsed())
    };
    let loaded = match t.threads() {
        Some(threads) => threads.handle().spawn_blocking(load).await,
        None => tokio::task::spawn_blocking(load).await,
    };
    match loaded {
        Ok((loaded, took)) => {
            t.charge(took);
            loaded.map(Some).map_err(|e| {
                error(
                    StatusCode::UNPROCESSABLE_ENTITY,
                    format!("the {kind} {named} cannot be loaded: {e:#}"),
                )
            })
        }
        Err(e) => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("loading {named} failed: {e}"),
        )),
    }
}

/// The registered reward or tool of kind `C` whose bytes hash to `sha` (a request names it
/// by hash).
fn registered_by_hash<C: Clone>(
    names: Vec<String>,
    get: impl Fn(&str) -> Option<Arc<rollbox_runtime::Registered<C>>>,
    sha: &str,
    info: impl Fn(&C) -> &rollbox_runtime::component::ComponentInfo,
) -> Option<Arc<C>> {
    names
        .iter()
        .filter_map(|n| get(n))
        .find(|r| info(r.component()).sha256 == sha)
        .map(|r| Arc::new(r.component().clone()))
}

/// The registered reward whose bytes hash to `sha`, if any.
pub(super) fn registered_reward(
    registries: &rollbox_runtime::Registries,
    sha: &str,
) -> Option<Arc<rollbox_runtime::RewardComponent>> {
    registered_by_hash(
        registries.reward_names(),
        |n| registries.reward(n),
        sha,
        rollbox_runtime::RewardComponent::info,
    )
}

/// The registered tool whose bytes hash to `sha`, if any.
pub(super) fn registered_tool(
    registries: &rollbox_runtime::Registries,
    sha: &str,
) -> Option<Arc<rollbox_runtime::ToolComponent>> {
    registered_by_hash(
        registries.tool_names(),
        |n| registries.tool(n),
        sha,
        rollbox_runtime::ToolComponent::info,
    )
}

/// The 400 for a `rewards` or `tools` entry that is neither a path nor a hash.
pub(super) fn not_brought(key: &str, name: &str, named: &str) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        format!(
            "`{key}.{name}` is {named:?}: give an absolute path beneath one of the tenant's component_dirs or sha256:HEX (a registered one is reached by its own name, without listing it)"
        ),
    )
}
