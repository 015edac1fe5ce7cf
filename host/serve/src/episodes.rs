//! `POST /v1/episodes`: the rows parsed within their budgets off the async workers, the
//! workflow, rewards and tools the request names, and the groups' batch as safetensors.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{Extension, State};
use axum::http::StatusCode;
use axum::response::Response;
use rollbox_rollout::dataset::{Dataset, Row};
use rollbox_rollout::{MemorySink, Rollout, RunScope};
use rollbox_runtime::Scope;

use super::answer::batch_answer;
use super::brought::{
    MAX_BROUGHT, brought, not_brought, registered_reward, registered_tool, valid_component_hash,
    valid_component_name, valid_component_path,
};
use super::callers::{Caller, allowed_list, rows_cap, tenant_scope};
use super::connections::read_body;
use super::held::reserve_parsed;
use super::{
    AppState, DEFAULT_WORKFLOW, MAX_BODY_BYTES, MAX_EPISODES_PER_REQUEST, MAX_PARSED_BYTES,
    MAX_REQUEST_CONFIG_BYTES, MAX_REQUEST_N_SAMPLES, MAX_ROWS_PER_REQUEST, error, parse_on_pool,
};

/// Bookkeeping counted per parsed row beyond its text.
const ROW_OVERHEAD_BYTES: usize = 64;

pub(super) async fn episodes(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    body: axum::body::Body,
) -> Response {
    app.metrics.requests.fetch_add(1, Ordering::Relaxed);
    let body = match read_body(body, MAX_BODY_BYTES, app.budget()).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    // The body's bytes are given back once parsed; the rows are held while they run.
    let parsed = match parse_on_pool(&app, move || parse_rows(&body.bytes)).await {
        Ok(parsed) => parsed,
        Err(r) => return r,
    };
    let _rows = match reserve_parsed(
        app.budget(),
        parsed.parsed_bytes,
        "the request's parsed rows",
    ) {
        Ok(r) => r,
        Err(busy) => return busy.into(),
    };
    let cap = rows_cap(&caller, MAX_ROWS_PER_REQUEST);
    if parsed.rows.len() > cap {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{} rows; this tenant may send at most {cap} per request (max_rows_per_request): split them over several requests",
                parsed.rows.len()
            ),
        );
    }
    // A request's own group size multiplies its rows: bound the episodes (and the batch the
    // server holds for the answer) before any runs.
    let n_samples = parsed.n_samples.unwrap_or(app.rollout.options.n_samples);
    let episodes = (parsed.rows.len() as u64).checked_mul(u64::from(n_samples));
    if episodes.is_none_or(|e| e > MAX_EPISODES_PER_REQUEST) {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{} rows x {n_samples} samples; at most {MAX_EPISODES_PER_REQUEST} episodes per request: send fewer rows or samples per request",
                parsed.rows.len()
            ),
        );
    }
    let mut rollout = app.rollout.clone();
    let workflow = parsed.workflow.as_deref().unwrap_or(DEFAULT_WORKFLOW);
    match chosen_workflow(&app, &caller, workflow).await {
        Ok(None) => {}
        Ok(Some(component)) => {
            rollout
                .provenance
                .insert("workflow_sha256".into(), component.info().sha256.clone());
            rollout
                .provenance
                .insert("workflow".into(), workflow.to_string());
            rollout.workflow = component;
        }
        Err(answer) => return answer,
    }
    // The episodes reach the tenant's allowed rewards and tools, and any the request brings,
    // under the tenant's caps; they share the tenant's episode budget with its other requests.
    let who = match episode_scope(&app, &caller, &parsed.rewards, &parsed.tools).await {
        Ok(scope) => RunScope {
            scope,
            shared: caller.as_ref().map(|Extension(t)| t.shared_episodes()),
        },
        Err(answer) => return answer,
    };
    if let Some(config) = parsed.config {
        let mut merged = match rollout.config {
            serde_json::Value::Object(m) => m,
            _ => serde_json::Map::new(),
        };
        merged.extend(config);
        rollout.config = serde_json::Value::Object(merged);
    }
    if let Some(n) = parsed.n_samples {
        rollout.options.n_samples = n;
    }
    match run_rows(&app, &rollout, &who, parsed.rows).await {
        Ok(answer) => answer,
        Err(refused) => {
            app.metrics.errors.fetch_add(1, Ordering::Relaxed);
            refused
        }
    }
}

/// The workflow a `/v1/episodes` request names, if not the server's own (`None`): an
/// `--extra-workflow` name, or one it brings by path or hash ([`brought`]); or the answer
/// refusing it.
async fn chosen_workflow(
    app: &Arc<AppState>,
    caller: &Caller,
    workflow: &str,
) -> Result<Option<Arc<rollbox_runtime::WorkflowComponent>>, Response> {
    let own = |sha: &str| {
        std::iter::once(&app.rollout.workflow)
            .chain(app.workflows.values())
            .find(|w| w.info().sha256 == sha)
            .cloned()
    };
    if let Some(w) = brought(app, caller, workflow, own).await? {
        return Ok(Some(w));
    }
    if let Some(Extension(t)) = caller
        && !t.may_workflow(workflow)
    {
        return Err(error(
            StatusCode::FORBIDDEN,
            format!(
                "tenant `{}` may not run the workflow `{workflow}` (its workflows: {}); the operator adds it to the tenant's `workflows` in the --tenants file",
                t.name,
                allowed_list(&t.workflows)
            ),
        ));
    }
    if workflow == DEFAULT_WORKFLOW {
        return Ok(None);
    }
    match app.workflows.get(workflow) {
        Some(named) => Ok(Some(named.clone())),
        None => {
            let mut names = vec![DEFAULT_WORKFLOW.to_string()];
            names.extend(app.workflows.keys().cloned());
            Err(error(
                StatusCode::NOT_FOUND,
                format!(
                    "no workflow named `{workflow}` (this server has: {}; the operator adds one with --extra-workflow NAME=PATH, a tenant's request may name a file beneath its component_dirs)",
                    names.join(", ")
                ),
            ))
        }
    }
}

/// [`tenant_scope`] with the rewards and tools an episodes request brings (`{"NAME":
/// "/path" | "sha256:HEX"}` each), under the names it gives them, each called with the
/// defaults of a registration (rewards: 15 s, 256 MiB, 3 retries; tools: 5 s, 128 MiB, none)
/// under the tenant's caps; or the answer refusing one.
async fn episode_scope(
    app: &Arc<AppState>,
    caller: &Caller,
    rewards: &BTreeMap<String, String>,
    tools: &BTreeMap<String, String>,
) -> Result<Scope, Response> {
    let runtime = &app.rollout.runtime;
    let registries = runtime.registries();
    let mut scope = tenant_scope(caller);
    let refused = |kind: &str, name: &str, e: anyhow::Error| {
        error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("the {kind} `{name}` cannot be brought: {e:#}"),
        )
    };
    for (name, named) in rewards {
        let own = |sha: &str| registered_reward(registries, sha);
        let c = brought(app, caller, named, own)
            .await?
            .ok_or_else(|| not_brought("rewards", name, named))?;
        let reg = runtime
            .checked(name, (*c).clone(), rollbox_runtime::CallPolicy::default())
            .map_err(|e| refused("reward", name, e))?;
        scope.bring_reward(name.clone(), reg);
    }
    for (name, named) in tools {
        let own = |sha: &str| registered_tool(registries, sha);
        let c = brought(app, caller, named, own)
            .await?
            .ok_or_else(|| not_brought("tools", name, named))?;
        let reg = runtime
            .checked(name, (*c).clone(), rollbox_runtime::CallPolicy::tool())
            .map_err(|e| refused("tool", name, e))?;
        scope.bring_tool(name.clone(), reg);
    }
    Ok(scope)
}

/// The message a row count past [`MAX_ROWS_PER_REQUEST`] stops the parse with.
const TOO_MANY_ROWS: &str = "too many rows";

/// `{"rows": [...], "config": {...}, "n_samples": N}`, each row kept as its text until the
/// count is known.
#[derive(serde::Deserialize)]
struct EpisodesRequest<'a> {
    #[serde(borrow, deserialize_with = "counted_rows")]
    rows: Vec<&'a serde_json::value::RawValue>,
    #[serde(borrow, default)]
    config: Option<&'a serde_json::value::RawValue>,
    #[serde(default)]
    n_samples: Option<u32>,
    #[serde(default)]
    workflow: Option<String>,
    #[serde(default)]
    rewards: BTreeMap<String, String>,
    #[serde(default)]
    tools: BTreeMap<String, String>,
}

/// The rows array, counted as it is read: the parse stops at row [`MAX_ROWS_PER_REQUEST`] + 1
/// rather than after building them all.
fn counted_rows<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<Vec<&'de serde_json::value::RawValue>, D::Error> {
    struct Counted;
    impl<'de> serde::de::Visitor<'de> for Counted {
        type Value = Vec<&'de serde_json::value::RawValue>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("an array of rows")
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(
            self,
            mut seq: A,
        ) -> Result<Self::Value, A::Error> {
            let mut rows = Vec::new();
            while let Some(row) = seq.next_element()? {
                if rows.len() == MAX_ROWS_PER_REQUEST {
                    return Err(serde::de::Error::custom(TOO_MANY_ROWS));
                }
                rows.push(row);
            }
            Ok(rows)
        }
    }
    d.deserialize_seq(Counted)
}

/// A `POST /v1/episodes` request, parsed.
struct ParsedEpisodes {
    rows: Vec<Row>,
    /// What the rows take parsed, bytes (their text and bookkeeping, [`ROW_OVERHEAD_BYTES`]).
    parsed_bytes: usize,
    /// Keys of the workflow config that replace the server's (`--config`) for this request.
    config: Option<serde_json::Map<String, serde_json::Value>>,
    /// Episodes per row for this request (the server's `--n-samples` otherwise).
    n_samples: Option<u32>,
    /// The workflow to run, by name (`--workflow` otherwise).
    workflow: Option<String>,
    /// Rewards and tools the request brings, by the name its workflow calls them by: a path
    /// or `sha256:HEX` each.
    rewards: BTreeMap<String, String>,
    tools: BTreeMap<String, String>,
}

/// A `POST /v1/episodes` body's rows, config and group size, within the request's budgets;
/// else the status and message to answer with.
fn parse_rows(body: &[u8]) -> Result<ParsedEpisodes, (StatusCode, String)> {
    let request: EpisodesRequest = serde_json::from_slice(body).map_err(|e| {
        if e.to_string().starts_with(TOO_MANY_ROWS) {
            (
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "more than {MAX_ROWS_PER_REQUEST} rows in one request; at most {MAX_ROWS_PER_REQUEST}: split them over several requests"
                ),
            )
        } else {
            (
                StatusCode::BAD_REQUEST,
                format!(r#"expected {{"rows": [{{...}}, ...]}}: {e}"#),
            )
        }
    })?;
    if let Some(n) = request.n_samples
        && !(1..=MAX_REQUEST_N_SAMPLES).contains(&n)
    {
        return Err((
            StatusCode::BAD_REQUEST,
            format!("`n_samples` is {n}; give 1 to {MAX_REQUEST_N_SAMPLES} episodes per row"),
        ));
    }
    let config = match request.config {
        None => None,
        Some(raw) if raw.get().len() > MAX_REQUEST_CONFIG_BYTES => {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "`config` is {} bytes of JSON; at most {MAX_REQUEST_CONFIG_BYTES}",
                    raw.get().len()
                ),
            ));
        }
        Some(raw) => match serde_json::from_str::<serde_json::Value>(raw.get()) {
            Ok(serde_json::Value::Object(m)) => Some(m),
            _ => {
                return Err((
                    StatusCode::BAD_REQUEST,
                    r#"`config` must be a JSON object (keys that replace the server's --config for this request, e.g. {"gconfig": {"temperature": 0.7}})"#.into(),
                ));
            }
        },
    };
    let mut parsed = 0usize;
    let mut rows = Vec::with_capacity(request.rows.len());
    for (index, raw) in request.rows.into_iter().enumerate() {
        let data = rollbox_rollout::dataset::parse_row(raw.get())
            .map_err(|e| (StatusCode::BAD_REQUEST, format!("rows[{index}]: {e}")))?;
        parsed += data.as_str().len() + ROW_OVERHEAD_BYTES;
        if parsed > MAX_PARSED_BYTES {
            return Err((
                StatusCode::PAYLOAD_TOO_LARGE,
                format!(
                    "the rows take over {} MiB parsed: send fewer rows per request",
                    MAX_PARSED_BYTES >> 20
                ),
            ));
        }
        rows.push(Row { index, data });
    }
    if let Some(w) = &request.workflow
        && !valid_component_name(w)
        && !valid_component_path(w)
        && !valid_component_hash(w)
    {
        return Err((
            StatusCode::BAD_REQUEST,
            "`workflow` must be a name of 1 to 64 letters, digits, '-', '_' or '.', an absolute path of at most 4096 bytes, or sha256: and 64 hex digits".into(),
        ));
    }
    for (key, brought) in [("rewards", &request.rewards), ("tools", &request.tools)] {
        if brought.len() > MAX_BROUGHT {
            return Err((
                StatusCode::BAD_REQUEST,
                format!(
                    "`{key}` brings {} components; at most {MAX_BROUGHT} of each kind per request",
                    brought.len()
                ),
            ));
        }
        for (name, named) in brought {
            if !valid_component_name(name)
                || !(valid_component_path(named) || valid_component_hash(named))
            {
                return Err((
                    StatusCode::BAD_REQUEST,
                    format!(
                        r#"`{key}` maps a name (1 to 64 letters, digits, '-', '_' or '.') to an absolute path of at most 4096 bytes or sha256: and 64 hex digits, e.g. {{"math": "/srv/team/reward.wasm"}}"#
                    ),
                ));
            }
        }
    }
    Ok(ParsedEpisodes {
        rows,
        parsed_bytes: parsed,
        config,
        n_samples: request.n_samples,
        workflow: request.workflow,
        rewards: request.rewards,
        tools: request.tools,
    })
}

/// Run the rows as one batch in memory and answer with it as safetensors
/// ([`batch_answer`]): the batches the controller had to split are joined again, and the stats
/// added to the header. Else the answer saying what failed.
async fn run_rows(
    app: &AppState,
    r: &Rollout,
    who: &RunScope,
    rows: Vec<Row>,
) -> Result<Response, Response> {
    let n = rows.len();
    let mut sink = MemorySink::new();
    let stats = r
        .run_for(who, Dataset::from_rows(rows), &mut sink, &mut |_| {})
        .await
        .map_err(|e| error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")))?;
    let m = &app.metrics;
    m.rows.fetch_add(n as u64, Ordering::Relaxed);
    m.episodes.fetch_add(
        stats.episodes.values().sum::<usize>() as u64,
        Ordering::Relaxed,
    );
    m.accepted.fetch_add(
        stats.episodes.get("accepted").copied().unwrap_or(0) as u64,
        Ordering::Relaxed,
    );
    m.trajectories
        .fetch_add(stats.trajectories as u64, Ordering::Relaxed);
    batch_answer(sink, r.provenance.clone(), &stats, app.budget())
        .map_err(|(status, message)| error(status, message))
}
