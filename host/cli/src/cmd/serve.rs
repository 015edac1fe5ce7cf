//! `rollbox serve`: the rollout controller over HTTP, for a trainer in another process.
//!
//! * `POST /v1/episodes` with `{"rows": [{...}, ...]}` (and optionally `"workflow": NAME`,
//!   one of `--extra-workflow` or `default`, `"n_samples": N` and `"config": {...}`, whose
//!   keys replace the server's `--config` keys for this request):
//!   runs each row's group and answers with one safetensors batch (`application/octet-stream`, loadable with
//!   `safetensors.torch.load`); its metadata holds `trajectories`, `rows`, `stats` and the
//!   provenance.
//! * `POST /v1/version` with `{"version": N}`: sets the policy version stamped on new tokens.
//! * `POST /get_reward[?reward=NAME]`: OpenRLHF's remote reward protocol (`--reward.remote_url`):
//!   `{"query": [...], "prompts": [...], "labels": [...]}` in, `{"rewards": [...], "scores":
//!   [...], "extra_logs": {...}}` out, each sample scored by a registered reward component in
//!   its own sandbox (at most [`MAX_REWARD_SAMPLES`] per request).
//! * `POST /v1/rewards`: `{"reward": NAME, "items": [{"completion", "answer" | "reference",
//!   "prompt", "row"}, ...]}` in, `{"scores": [...], "results": [{"score", "fault", "ms",
//!   "attempts", "fuel", "peak_memory_bytes"}, ...]}` out: each item scored in its own sandbox,
//!   a fault typed (`{"kind": "timeout", "message": ...}`) and scored 0.0 in `scores`.
//! * `POST /run_code`: SandboxFusion's API for Python (what verl's `reward.sandbox_fusion.url`
//!   posts): `{"code", "stdin", "run_timeout", "memory_limit_MB", "language": "python", ...}`
//!   in, `{"status", "run_result": {"status", "return_code", "stdout", "stderr",
//!   "execution_time"}, ...}` out; the program runs in a fresh instance of the tool registered
//!   as `python` (python-exec), within the request's limits and never past the tool's own.
//! * `GET /healthz`: `ok`.
//! * `GET /readyz`: `ready`, or 503 once the server drains (SIGTERM): a load balancer stops
//!   sending it requests.
//! * `GET /metrics`: Prometheus text.
//!
//! HTTPS with `--tls-cert` and `--tls-key` (rustls; the handshake must finish within
//! [`HEADER_READ_TIMEOUT`]).
//!
//! Tenants (`--tenants FILE`, [`crate::tenants`]): every request but `GET /healthz` must carry
//! `Authorization: Bearer KEY` with a tenant's key (401 with nothing run otherwise); each tenant
//! has the components it may use (403 for others), its own requests, episodes and reward calls
//! in flight, sandbox time a minute (429 with `Retry-After` past it), body size and rows per
//! request, its counters in `/metrics`, and one access-log line per request naming the tenant,
//! never the key; `SIGHUP` reads the file again. Without `--tenants` the server listens on a
//! loopback address only, unless `--insecure-no-auth` says otherwise.
//!
//! Hostile clients: a request's headers must arrive within [`HEADER_READ_TIMEOUT`] (which also
//! closes a keep-alive connection left idle that long) and its body within
//! [`BODY_READ_TIMEOUT`] (at most [`MAX_BODY_BYTES`], else 413; a larger `Content-Length` is
//! refused before reading); at most [`MAX_CONNECTIONS`] connections are open at once and
//! `--max-connections-per-ip` from one address (more are closed on accept), so one client
//! cannot take the slots a health probe or another trainer needs. A body is parsed on the
//! blocking pool, never on the async workers that answer `/healthz`: rows are counted as they
//! are read (at most [`MAX_ROWS_PER_REQUEST`]), each row is parsed within the dataset's
//! per-row budget ([`rollbox_rollout::dataset::parse_row`]) and all of them within
//! [`MAX_PARSED_BYTES`]; nothing is built from the body beyond the rows themselves.
//! Malformed requests get a 4xx naming the problem.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::Context as _;
use axum::Router;
use axum::extract::{Extension, RawQuery, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Args;
use rollbox_host::process;
use rollbox_rollout::dataset::{Dataset, Row};
use rollbox_rollout::{MAX_BATCH_TENSOR_BYTES, MemorySink, Rollout, RolloutOptions};
use rollbox_runtime::Catalog;

use super::rollout::SetupArgs;
use crate::request_components::{Brought, RequestComponents};
use crate::tenants::{FairGate, Quota, Registered, Tenant, Tenants};
use crate::threads::CpuSet;

/// Flags of `rollbox serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Connections one client address may hold open at once; more are closed as they are
    /// accepted (the rest of the slots stay free for other clients and health probes).
    #[arg(long, default_value_t = 128, value_name = "N")]
    max_connections_per_ip: usize,
    /// Tenants (TOML): their API keys, as SHA-256 hashes, and quotas. Every request but
    /// `GET /healthz` and `/readyz` must then carry `Authorization: Bearer KEY` (or the key
    /// as a URL's password); SIGHUP reads the file again. See docs/serve.md.
    #[arg(long, value_name = "FILE")]
    tenants: Option<PathBuf>,
    /// Listen on an address other than loopback with no --tenants: anyone who reaches the
    /// port can run episodes, rewards and code.
    #[arg(long)]
    insecure_no_auth: bool,
    /// On SIGTERM or SIGINT: stop accepting connections, let requests in flight finish for
    /// this long, then cancel the rest (their episodes and engine requests with them) and exit.
    #[arg(long, default_value = "30s", value_parser = rollbox_runtime::parse_duration, value_name = "DURATION")]
    drain_timeout: Duration,
    /// Serve HTTPS with this certificate chain (PEM, leaf first); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Another workflow a `/v1/episodes` request may name with `"workflow": "NAME"` (a `.wasm`
    /// path or a built-in's name; repeatable). `--workflow` is the one a request that names
    /// none runs, named `default`.
    #[arg(long, value_name = "NAME=WORKFLOW", value_parser = parse_named_workflow)]
    extra_workflow: Vec<(String, PathBuf)>,
    #[command(flatten)]
    pub setup: SetupArgs,
}

/// `NAME=WORKFLOW` of `--extra-workflow`.
fn parse_named_workflow(s: &str) -> Result<(String, PathBuf), String> {
    let (name, spec) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: give NAME=WORKFLOW (a .wasm path or a built-in's name)"))?;
    if !valid_component_name(name) || name == DEFAULT_WORKFLOW {
        return Err(format!(
            "`{name}`: a workflow's name is 1 to 64 letters, digits, '-', '_' or '.', and not `{DEFAULT_WORKFLOW}` (the --workflow's)"
        ));
    }
    if spec.is_empty() {
        return Err(format!("`{s}`: the workflow after `=` is empty"));
    }
    Ok((name.to_string(), PathBuf::from(spec)))
}

/// The name a request gives `--workflow` by.
pub const DEFAULT_WORKFLOW: &str = "default";

fn valid_component_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

/// Whether `path` may name a component file: absolute, at most 4,096 bytes, no NUL.
fn valid_component_path(path: &str) -> bool {
    path.starts_with('/') && path.len() <= 4096 && !path.contains('\0')
}

/// Whether `named` is `sha256:` and 64 hex digits.
fn valid_component_hash(named: &str) -> bool {
    named
        .strip_prefix(crate::request_components::HASH_PREFIX)
        .is_some_and(|h| h.len() == 64 && h.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// Rewards, and tools, one `/v1/episodes` request may bring.
const MAX_BROUGHT: usize = 8;

#[derive(Default)]
struct Metrics {
    requests: AtomicU64,
    rows: AtomicU64,
    episodes: AtomicU64,
    accepted: AtomicU64,
    trajectories: AtomicU64,
    errors: AtomicU64,
    reward_samples: AtomicU64,
    reward_faults: AtomicU64,
    run_code_requests: AtomicU64,
    run_code_failures: AtomicU64,
    unauthorized: AtomicU64,
}

struct AppState {
    rollout: Rollout,
    metrics: Metrics,
    /// Bodies parsed at once: one core fewer than the machine has (at least one), so parsing
    /// never takes every core from the workers that answer health probes.
    parse_slots: tokio::sync::Semaphore,
    tenants: Option<Arc<Tenants>>,
    /// Set on SIGTERM or SIGINT: `/readyz` answers 503 from then on.
    draining: std::sync::atomic::AtomicBool,
    /// Turns between tenants for `/get_reward`, `/v1/rewards` and `/run_code` calls, as many
    /// at once as the sandbox pool runs.
    gate: Arc<FairGate>,
    /// `--extra-workflow`s by name, compiled at start.
    workflows: std::collections::BTreeMap<String, Arc<rollbox_runtime::WorkflowComponent>>,
    /// Components requests named by path or content hash, compiled once per content.
    request_components: Arc<RequestComponents>,
}

/// The tenant a request came from (none without `--tenants`).
type Caller = Option<Extension<Arc<Tenant>>>;

/// The caller's name for the fair gate (`""` without tenants) and the most calls it may have
/// in the sandbox pool at once.
fn gate_key(caller: &Caller) -> (Arc<str>, usize) {
    match caller {
        Some(Extension(t)) => (Arc::from(t.name.as_str()), t.quota.reward_calls_in_flight),
        None => (Arc::from(""), usize::MAX),
    }
}

/// Wait for a place in the sandbox pool for one of the caller's calls; the wait counts in its
/// tenant's metrics.
async fn take_turn(gate: &Arc<FairGate>, caller: &Caller) -> crate::tenants::GatePass {
    let (key, cap) = gate_key(caller);
    let start = Instant::now();
    let pass = gate.enter(&key, cap).await;
    if let Some(Extension(t)) = caller {
        let us = u64::try_from(start.elapsed().as_micros()).unwrap_or(u64::MAX);
        t.usage.queue_wait_us.fetch_add(us, Ordering::Relaxed);
    }
    pass
}

/// Run `work` (sandbox calls and their turns) on the caller's tenant's threads
/// ([`crate::threads`]), or where the request is handled without tenants; stopped if the
/// request is.
async fn on_tenant_threads<T: Send + 'static>(
    caller: &Caller,
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, tokio::task::JoinError> {
    /// Aborts the task if the request is dropped (its client went away) before it ends.
    struct Aborting<T>(tokio::task::JoinHandle<T>);
    impl<T> Drop for Aborting<T> {
        fn drop(&mut self) {
            self.0.abort();
        }
    }
    match caller.as_ref().and_then(|Extension(t)| t.threads()) {
        Some(threads) => {
            let mut task = Aborting(threads.spawn(work));
            (&mut task.0).await
        }
        None => Ok(work.await),
    }
}

/// The caller's tenant limits: each episode's and call's timeout and memory, at most.
fn tenant_limits(caller: &Caller) -> (Option<Duration>, Option<u64>) {
    caller
        .as_ref()
        .map_or((None, None), |Extension(t)| (t.timeout, t.max_memory_bytes))
}

/// The tighter of two optional limits.
fn tighter<T: Ord>(a: Option<T>, b: Option<T>) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Count a call's sandbox time against the caller's tenant.
fn charge(caller: &Caller, wall: Duration) {
    if let Some(Extension(t)) = caller {
        t.charge(wall);
    }
}

/// What the server allows any one request: a tenant's [`Quota`] is at most this.
pub const SERVER_QUOTA: Quota = Quota {
    requests_in_flight: MAX_CONNECTIONS,
    episodes_in_flight: MAX_EPISODES_IN_FLIGHT,
    reward_calls_in_flight: MAX_REWARD_SAMPLES,
    sandbox_seconds_per_minute: None,
    body_bytes: MAX_BODY_BYTES,
    rows_per_request: MAX_ROWS_PER_REQUEST,
};

/// `--tenants`: who the request is from, and whether it may run now. Answers 401 without a
/// valid key, 429 (with `Retry-After`) when the tenant is at its requests in flight, 413 when
/// the body declares more than its `max_body_bytes` (a body that turns out longer is cut at
/// that size and refused as it is read); logs one line per request with the tenant's name.
async fn authorize(State(app): State<Arc<AppState>>, req: Request, next: Next) -> Response {
    let Some(tenants) = app.tenants.as_ref() else {
        return next.run(req).await;
    };
    if matches!(req.uri().path(), "/healthz" | "/readyz") {
        return next.run(req).await;
    }
    let start = Instant::now();
    let (method, path) = (req.method().clone(), req.uri().path().to_owned());
    let key = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.as_bytes());
    let Some(tenant) = tenants.authenticate(key) else {
        app.metrics.unauthorized.fetch_add(1, Ordering::Relaxed);
        tracing::info!(target: "rollbox::access", tenant = "-", %method, path, status = 401);
        let mut r = error(
            StatusCode::UNAUTHORIZED,
            "no valid API key: send `Authorization: Bearer KEY` with a key of this server's --tenants file".into(),
        );
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            header::HeaderValue::from_static("Bearer"),
        );
        return r;
    };
    let quota = tenant.quota;
    if let Some(wait) = tenant.out_of_time() {
        tracing::info!(target: "rollbox::access", tenant = %tenant.name, %method, path, status = 429);
        let secs = wait.as_secs_f64().ceil() as u64;
        let mut r = error(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "tenant `{}` has used its sandbox time ({} s a minute, sandbox_seconds_per_minute): retry in {secs} s",
                tenant.name,
                quota.sandbox_seconds_per_minute.unwrap_or_default()
            ),
        );
        if let Ok(v) = header::HeaderValue::from_str(&secs.to_string()) {
            r.headers_mut().insert(header::RETRY_AFTER, v);
        }
        return r;
    }
    let Some(in_flight) = tenant.admit() else {
        tracing::info!(target: "rollbox::access", tenant = %tenant.name, %method, path, status = 429);
        let mut r = error(
            StatusCode::TOO_MANY_REQUESTS,
            format!(
                "tenant `{}` has {} requests in flight, its max_requests_in_flight: retry when one has finished",
                tenant.name, quota.requests_in_flight
            ),
        );
        r.headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
        return r;
    };
    let declared = req
        .headers()
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > quota.body_bytes as u64) {
        tracing::info!(target: "rollbox::access", tenant = %tenant.name, %method, path, status = 413);
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "a body of {} bytes; tenant `{}` may send at most {} (max_body_bytes)",
                declared.unwrap_or_default(),
                tenant.name,
                quota.body_bytes
            ),
        );
    }
    let (parts, body) = req.into_parts();
    let body = axum::body::Body::new(http_body_util::Limited::new(body, quota.body_bytes));
    let mut req = Request::from_parts(parts, body);
    req.extensions_mut().insert(tenant.clone());
    let response = next.run(req).await;
    drop(in_flight);
    tracing::info!(
        target: "rollbox::access",
        tenant = %tenant.name,
        %method,
        path,
        status = response.status().as_u16(),
        ms = start.elapsed().as_secs_f64() * 1e3,
    );
    response
}

/// The rows (or samples) the caller may send in one request: the server's `cap` without
/// tenants.
fn rows_cap(caller: &Caller, cap: usize) -> usize {
    caller
        .as_ref()
        .map_or(cap, |Extension(t)| t.quota.rows_per_request.min(cap))
}

/// 403 naming what the caller's tenant may not use, if it may not.
fn forbidden(caller: &Caller, kind: &str, name: &str) -> Option<Response> {
    let Extension(t) = caller.as_ref()?;
    let (allowed, list) = match kind {
        "reward" => (t.may_reward(name), &t.rewards),
        _ => (t.may_tool(name), &t.tools),
    };
    (!allowed).then(|| {
        error(
            StatusCode::FORBIDDEN,
            format!(
                "tenant `{}` may not use the {kind} `{name}` (its {kind}s: {}); the operator adds it to the tenant's `{kind}s` in the --tenants file",
                t.name,
                allowed_list(list)
            ),
        )
    })
}

/// A tenant's list of allowed names as a 403 names it: `all` when it has none, `none` when
/// it is empty.
fn allowed_list(list: &Option<Vec<String>>) -> String {
    match list.as_deref() {
        None => "all".into(),
        Some([]) => "none".into(),
        Some(l) => l.join(", "),
    }
}

/// Time a client has to send a request's headers.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(10);
/// Time a client has to send a request's body.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(60);
/// Largest request body, bytes.
pub const MAX_BODY_BYTES: usize = 64 << 20;
/// Connections open at once; more are closed as they are accepted.
pub const MAX_CONNECTIONS: usize = 1024;
/// Rows in one `POST /v1/episodes` (each is a group of episodes run for this request).
pub const MAX_ROWS_PER_REQUEST: usize = 16_384;
/// A tenant's `max_episodes_in_flight`, at most.
pub const MAX_EPISODES_IN_FLIGHT: usize = 65_536;
/// A `/v1/episodes` request's `config`, at most, bytes of JSON.
pub const MAX_REQUEST_CONFIG_BYTES: usize = 1 << 20;
/// Episodes (rows x samples) of one `/v1/episodes` request, at most.
pub const MAX_EPISODES_PER_REQUEST: u64 = 65_536;
/// A `/v1/episodes` request's `n_samples`, at most.
pub const MAX_REQUEST_N_SAMPLES: u32 = 1024;
/// What one request's rows may take once parsed (their JSON text and each row's bookkeeping):
/// 4× the body cap.
pub const MAX_PARSED_BYTES: usize = 4 * MAX_BODY_BYTES;
/// Samples in one `POST /get_reward`.
pub const MAX_REWARD_SAMPLES: usize = 4096;
/// Largest `POST /run_code` body: the program (python-exec takes 64 Ki characters) and its
/// stdin (16 Mi).
pub const MAX_RUN_CODE_BODY_BYTES: usize = 80 << 20;
/// The tool `POST /run_code` runs programs with.
pub const RUN_CODE_TOOL: &str = "python";
/// stdout and stderr kept per `POST /run_code`, characters each.
const RUN_CODE_OUTPUT_CHARS: u64 = 1 << 20;
/// Largest `POST /v1/version` body.
const MAX_VERSION_BODY_BYTES: usize = 4 << 10;
/// Bookkeeping counted per parsed row beyond its text.
const ROW_OVERHEAD_BYTES: usize = 64;

fn error(status: StatusCode, message: String) -> Response {
    (status, axum::Json(serde_json::json!({"error": message}))).into_response()
}

/// The request body, read within [`BODY_READ_TIMEOUT`] and `cap` bytes.
async fn read_body(body: axum::body::Body, cap: usize) -> Result<axum::body::Bytes, Response> {
    use axum::body::HttpBody as _;
    // A declared Content-Length over the cap is refused before anything is read.
    let declared = body.size_hint().lower();
    if declared > cap as u64 {
        return Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("a body of {declared} bytes; at most {cap}: send fewer rows per request"),
        ));
    }
    match tokio::time::timeout(BODY_READ_TIMEOUT, collect_capped(body, cap, declared)).await {
        Ok(result) => result,
        Err(_) => Err(error(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the body did not arrive within {} s",
                BODY_READ_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// The body's bytes, appended frame by frame into one buffer (no collect-then-concatenate:
/// a 64 MiB body is never copied whole in one go on an async worker, nor held twice).
async fn collect_capped(
    mut body: axum::body::Body,
    cap: usize,
    declared: u64,
) -> Result<axum::body::Bytes, Response> {
    use http_body_util::BodyExt as _;
    let mut buf = Vec::with_capacity(declared.min(1 << 20) as usize);
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(err) = source {
                if err.is::<http_body_util::LengthLimitError>() {
                    return error(
                        StatusCode::PAYLOAD_TOO_LARGE,
                        "the body is over this tenant's max_body_bytes".into(),
                    );
                }
                source = err.source();
            }
            error(
                StatusCode::BAD_REQUEST,
                format!("cannot read the body: {e}"),
            )
        })?;
        let Ok(data) = frame.into_data() else {
            continue;
        };
        if buf.len() + data.len() > cap {
            return Err(error(
                StatusCode::PAYLOAD_TOO_LARGE,
                format!("the body is over {cap} bytes: send fewer rows per request"),
            ));
        }
        buf.extend_from_slice(&data);
    }
    Ok(buf.into())
}

async fn episodes(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    body: axum::body::Body,
) -> Response {
    app.metrics.requests.fetch_add(1, Ordering::Relaxed);
    let body = match read_body(body, MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    // Parsing megabytes is CPU work: on the blocking pool, so the async workers stay free to
    // answer health probes and other clients.
    let Ok(slot) = app.parse_slots.acquire().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "shutting down".into());
    };
    let parsed = match tokio::task::spawn_blocking(move || parse_rows(&body)).await {
        Ok(Ok(parsed)) => parsed,
        Ok(Err((status, message))) => return error(status, message),
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("parsing the body failed: {e}"),
            );
        }
    };
    // Held for the parse only: the episodes run without it.
    drop(slot);
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
    // The episodes reach the tenant's allowed rewards and tools, and any the request brings.
    if caller.is_some() || !parsed.rewards.is_empty() || !parsed.tools.is_empty() {
        match episode_catalog(&app, &caller, &parsed.rewards, &parsed.tools).await {
            Ok(catalog) => rollout.options.catalog = Some(Arc::new(catalog)),
            Err(answer) => return answer,
        }
    }
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
    if let Some(Extension(t)) = &caller {
        rollout.options.shared = Some(t.shared_episodes());
        if t.timeout.is_some() || t.max_memory_bytes.is_some() {
            rollout.limits = Arc::new(rollout.limits.tightened(t.timeout, t.max_memory_bytes));
        }
    }
    match run_rows(&app, &rollout, parsed.rows).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(e) => {
            app.metrics.errors.fetch_add(1, Ordering::Relaxed);
            error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}"))
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

/// The component a tenant's request brings as `named`: a path beneath its `component_dirs`,
/// or `sha256:HEX` among its `component_sha256` (one the server compiled: `own` finds those
/// it started with, then those requests brought; see [`crate::request_components`]). `None`
/// when `named` is neither (a name the caller looks up); the answer refusing it otherwise.
/// A file's reading and compiling run on the tenant's threads, their time charged to it.
async fn brought<C: Brought>(
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
    let dir = dir.to_path_buf();
    let Ok(permit) = app.request_components.loading.clone().acquire_owned().await else {
        return Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down".into(),
        ));
    };
    // The permit goes with the work: held until the file is read and compiled, even if the
    // request is gone by then.
    let load = move || {
        let start = Instant::now();
        let loaded = kept.load::<C>(&runtime, &dir, &relative, &path);
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

/// The rewards and tools a caller's episodes and reward calls reach: every registered one
/// without tenants; a tenant's allowed ones (its `rewards` and `tools`) otherwise.
fn tenant_catalog(caller: &Caller) -> Catalog {
    let mut catalog = Catalog::default();
    if let Some(Extension(t)) = caller {
        if let Some(r) = &t.rewards {
            catalog = catalog.only_rewards(r.iter().cloned());
        }
        if let Some(tools) = &t.tools {
            catalog = catalog.only_tools(tools.iter().cloned());
        }
    }
    catalog
}

/// The registered reward or tool of kind `C` whose bytes hash to `sha` (a request names it
/// by hash).
fn registered_by_hash<C: Clone>(
    names: Vec<String>,
    get: impl Fn(&str) -> Option<Arc<rollbox_runtime::Registered<C>>>,
    sha: &str,
    info: impl Fn(&C) -> &rollbox_runtime::ComponentInfo,
) -> Option<Arc<C>> {
    names
        .iter()
        .filter_map(|n| get(n))
        .find(|r| info(r.component()).sha256 == sha)
        .map(|r| Arc::new(r.component().clone()))
}

/// The registered reward whose bytes hash to `sha`, if any.
fn registered_reward(
    services: &rollbox_runtime::Services,
    sha: &str,
) -> Option<Arc<rollbox_runtime::RewardComponent>> {
    registered_by_hash(
        services.reward_names(),
        |n| services.reward(n),
        sha,
        rollbox_runtime::RewardComponent::info,
    )
}

/// The registered tool whose bytes hash to `sha`, if any.
fn registered_tool(
    services: &rollbox_runtime::Services,
    sha: &str,
) -> Option<Arc<rollbox_runtime::ToolComponent>> {
    registered_by_hash(
        services.tool_names(),
        |n| services.tool(n),
        sha,
        rollbox_runtime::ToolComponent::info,
    )
}

/// [`tenant_catalog`] with the rewards and tools an episodes request brings (`{"NAME":
/// "/path" | "sha256:HEX"}` each), under the names it gives them, each called with the
/// defaults of a registration (rewards: 15 s, 256 MiB, 3 retries; tools: 5 s, 128 MiB, none)
/// tightened to the tenant's limits; or the answer refusing one.
async fn episode_catalog(
    app: &Arc<AppState>,
    caller: &Caller,
    rewards: &BTreeMap<String, String>,
    tools: &BTreeMap<String, String>,
) -> Result<Catalog, Response> {
    let runtime = &app.rollout.runtime;
    let services = runtime.services();
    let mut catalog = tenant_catalog(caller);
    let (timeout, memory) = tenant_limits(caller);
    let tightened = |mut policy: rollbox_runtime::CallPolicy| {
        policy.limits = Arc::new(policy.limits.tightened(timeout, memory));
        policy
    };
    let refused = |kind: &str, name: &str, e: anyhow::Error| {
        error(
            StatusCode::UNPROCESSABLE_ENTITY,
            format!("the {kind} `{name}` cannot be brought: {e:#}"),
        )
    };
    for (name, named) in rewards {
        let own = |sha: &str| registered_reward(services, sha);
        let c = brought(app, caller, named, own)
            .await?
            .ok_or_else(|| not_brought("rewards", name, named))?;
        let reg = runtime
            .reward_for_catalog(
                name,
                (*c).clone(),
                tightened(rollbox_runtime::CallPolicy::default()),
            )
            .map_err(|e| refused("reward", name, e))?;
        catalog.bring_reward(name.clone(), reg);
    }
    for (name, named) in tools {
        let own = |sha: &str| registered_tool(services, sha);
        let c = brought(app, caller, named, own)
            .await?
            .ok_or_else(|| not_brought("tools", name, named))?;
        let reg = runtime
            .tool_for_catalog(
                name,
                (*c).clone(),
                tightened(rollbox_runtime::CallPolicy::tool()),
            )
            .map_err(|e| refused("tool", name, e))?;
        catalog.bring_tool(name.clone(), reg);
    }
    Ok(catalog)
}

/// The 400 for a `rewards` or `tools` entry that is neither a path nor a hash.
fn not_brought(key: &str, name: &str, named: &str) -> Response {
    error(
        StatusCode::BAD_REQUEST,
        format!(
            "`{key}.{name}` is {named:?}: give an absolute path beneath one of the tenant's component_dirs or sha256:HEX (a registered one is reached by its own name, without listing it)"
        ),
    )
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
        config,
        n_samples: request.n_samples,
        workflow: request.workflow,
        rewards: request.rewards,
        tools: request.tools,
    })
}

/// Run the rows as one batch in memory and return it as safetensors bytes: the batches the
/// controller had to split are joined again, and the stats added to the header.
async fn run_rows(app: &AppState, r: &Rollout, rows: Vec<Row>) -> anyhow::Result<Vec<u8>> {
    let n = rows.len();
    let mut sink = MemorySink::new();
    let stats = r
        .run(Dataset::from_rows(rows), &mut sink, &mut |_| {})
        .await?;
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
    let batch = sink.join(r.provenance.clone(), MAX_BATCH_TENSOR_BYTES)?;
    let mut header = batch.header()?;
    header.insert("stats".into(), serde_json::to_string(&stats)?);
    Ok(rollbox_tensor::to_safetensors_bytes(
        &batch.tensors,
        &header,
    )?)
}

/// SandboxFusion's `RunCodeRequest`, the fields verl sends (others are ignored).
#[derive(serde::Deserialize)]
struct RunCodeRequest {
    code: String,
    #[serde(default)]
    stdin: Option<String>,
    #[serde(default)]
    run_timeout: Option<f64>,
    #[serde(default, rename = "memory_limit_MB")]
    memory_limit_mb: Option<i64>,
    #[serde(default)]
    language: Option<String>,
    #[serde(default)]
    files: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    fetch_files: Option<Vec<serde_json::Value>>,
}

/// `POST /run_code`: run a Python program on its stdin in a fresh python-exec instance and
/// answer as SandboxFusion does: `status` `Success` (it exited 0), `Failed` (a non-zero exit,
/// an exception, a time limit, a sandbox fault), `run_result.status` `Finished` or
/// `TimeLimitExceeded`. The request's `run_timeout` and `memory_limit_MB` tighten the limits
/// the operator registered the tool with; they never loosen them.
async fn run_code(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    body: axum::body::Body,
) -> Response {
    app.metrics
        .run_code_requests
        .fetch_add(1, Ordering::Relaxed);
    let body = match read_body(body, MAX_RUN_CODE_BODY_BYTES).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let runtime = app.rollout.runtime.clone();
    if runtime.services().tool(RUN_CODE_TOOL).is_none() {
        return error(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "POST /run_code runs programs with the tool `{RUN_CODE_TOOL}`: start rollbox serve with --tool {RUN_CODE_TOOL}=python_exec.wasm,timeout=10s,memory=1GiB,max_boundary_bytes=16MiB"
            ),
        );
    }
    if let Some(r) = forbidden(&caller, "tool", RUN_CODE_TOOL) {
        return r;
    }
    let Ok(slot) = app.parse_slots.acquire().await else {
        return error(StatusCode::SERVICE_UNAVAILABLE, "shutting down".into());
    };
    let parsed =
        tokio::task::spawn_blocking(move || serde_json::from_slice::<RunCodeRequest>(&body)).await;
    drop(slot);
    let request = match parsed {
        Ok(Ok(r)) => r,
        Ok(Err(e)) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!(
                    r#"expected {{"code": "...", "stdin": "...", "language": "python", ...}}: {e}"#
                ),
            );
        }
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("parsing the body failed: {e}"),
            );
        }
    };
    let language = request.language.as_deref().unwrap_or("python");
    if !matches!(language, "python" | "python3") {
        return error(
            StatusCode::BAD_REQUEST,
            format!("`language` is `{language}`: rollbox's /run_code runs Python only (`python`)"),
        );
    }
    if request.files.as_ref().is_some_and(|f| !f.is_empty())
        || request.fetch_files.as_ref().is_some_and(|f| !f.is_empty())
    {
        return error(
            StatusCode::BAD_REQUEST,
            "`files` and `fetch_files` are not supported: the sandbox has no file system".into(),
        );
    }
    let timeout = match request.run_timeout {
        None => None,
        Some(t) if t.is_finite() && t > 0.0 => Some(Duration::from_secs_f64(t.min(86_400.0))),
        Some(t) => {
            return error(
                StatusCode::BAD_REQUEST,
                format!("`run_timeout` is {t}: give a positive number of seconds"),
            );
        }
    };
    // SandboxFusion's default of -1 (and verl's null) means no limit of the request's own.
    let memory = request
        .memory_limit_mb
        .filter(|&m| m > 0)
        .map(|m| (m as u64).saturating_mul(1 << 20));
    let args = serde_json::json!({
        "code": request.code,
        "stdin": request.stdin.unwrap_or_default(),
        "max_output_chars": RUN_CODE_OUTPUT_CHARS,
    });
    let (tenant_timeout, tenant_memory) = tenant_limits(&caller);
    let (timeout, memory) = (
        tighter(timeout, tenant_timeout),
        tighter(memory, tenant_memory),
    );
    let (gate, who) = (app.gate.clone(), caller.clone());
    let call = async move {
        let turn = take_turn(&gate, &who).await;
        let called = runtime
            .call_registered_tool_within(RUN_CODE_TOOL, args.to_string(), timeout, memory)
            .await;
        drop(turn);
        called
    };
    let called = match on_tenant_threads(&caller, call).await {
        Ok(Ok(c)) => c,
        Ok(Err(e)) => return error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}")),
        Err(e) => {
            return error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("the program's call failed: {e}"),
            );
        }
    };
    charge(&caller, called.wall);
    let seconds = called.wall.as_secs_f64();
    let answer = run_code_answer(called.result, seconds);
    if answer["status"] != "Success" {
        app.metrics
            .run_code_failures
            .fetch_add(1, Ordering::Relaxed);
    }
    axum::Json(answer).into_response()
}

/// SandboxFusion's answer for one python-exec program-mode call (or its fault).
fn run_code_answer(
    result: Result<String, rollbox_runtime::GuestFault>,
    seconds: f64,
) -> serde_json::Value {
    use serde_json::{Value, json};
    let run = |status: &str, code: Option<i64>, stdout: &str, stderr: &str| {
        json!({
            "status": status,
            "execution_time": seconds,
            "return_code": code,
            "stdout": stdout,
            "stderr": stderr,
        })
    };
    let (status, run_result) = match result {
        Err(rollbox_runtime::GuestFault::Timeout { .. }) => {
            ("Failed", run("TimeLimitExceeded", None, "", ""))
        }
        Err(fault) => (
            "Failed",
            run("Finished", Some(1), "", &format!("rollbox: {fault}")),
        ),
        Ok(text) => match serde_json::from_str::<Value>(&text) {
            Err(e) => (
                "SandboxError",
                run(
                    "Error",
                    None,
                    "",
                    &format!("rollbox: the runner's reply is not JSON: {e}"),
                ),
            ),
            Ok(out) => {
                let code = out["exit_code"].as_i64().unwrap_or(1);
                let mut stderr = out["stderr"].as_str().unwrap_or("").to_string();
                if let Some(e) = out["error"].as_str() {
                    if !stderr.is_empty() && !stderr.ends_with('\n') {
                        stderr.push('\n');
                    }
                    stderr.push_str(e);
                }
                let stdout = out["stdout"].as_str().unwrap_or("");
                let status = if code == 0 { "Success" } else { "Failed" };
                (status, run("Finished", Some(code), stdout, &stderr))
            }
        },
    };
    json!({
        "status": status,
        "message": "",
        "compile_result": Value::Null,
        "run_result": run_result,
        "executor_pod_name": Value::Null,
        "files": {},
    })
}

/// OpenRLHF's remote reward request: the decoded prompt + response of each sample, its prompt
/// and its label (the dataset's `--data.label_key` value).
#[derive(serde::Deserialize)]
struct RewardRequest {
    query: Vec<String>,
    #[serde(default)]
    prompts: Option<Vec<String>>,
    #[serde(default)]
    labels: Option<Vec<serde_json::Value>>,
}

/// The reward a request names (`None`: the only one registered), or the answer refusing it;
/// `how` says how a request names one.
fn pick_reward(
    app: &AppState,
    named: Option<String>,
    how: &str,
) -> Result<String, (StatusCode, String)> {
    let names = app.rollout.runtime.services().reward_names();
    match named {
        Some(n) if names.contains(&n) => Ok(n),
        Some(n) => Err((
            StatusCode::NOT_FOUND,
            format!(
                "no reward named `{n}` is registered (registered: {}; add one with --reward NAME=PATH)",
                names.join(", ")
            ),
        )),
        None if names.len() == 1 => Ok(names[0].clone()),
        None => Err((
            StatusCode::BAD_REQUEST,
            format!(
                "several rewards are registered ({}): name one with {how}",
                names.join(", ")
            ),
        )),
    }
}

/// The name a reward a request brings is reached by in its catalog.
const BROUGHT_REWARD: &str = "brought";

/// The reward a `/v1/rewards` or `/get_reward` request names and the catalog it is reached
/// through: a registered one by name (`None`: the only one registered), which the tenant must
/// be allowed, or one a tenant brings by path or hash ([`brought`], called with the defaults
/// of a registration), reached as [`BROUGHT_REWARD`]; or the answer refusing it.
async fn chosen_reward(
    app: &Arc<AppState>,
    caller: &Caller,
    named: Option<String>,
    how: &str,
) -> Result<(String, Arc<Catalog>), Response> {
    let runtime = &app.rollout.runtime;
    if let Some(n) = &named {
        let services = runtime.services();
        let own = |sha: &str| registered_reward(services, sha);
        if let Some(c) = brought(app, caller, n, own).await? {
            let reg = runtime
                .reward_for_catalog(
                    BROUGHT_REWARD,
                    (*c).clone(),
                    rollbox_runtime::CallPolicy::default(),
                )
                .map_err(|e| {
                    error(
                        StatusCode::UNPROCESSABLE_ENTITY,
                        format!("the reward {n} cannot be used: {e:#}"),
                    )
                })?;
            let mut catalog = tenant_catalog(caller);
            catalog.bring_reward(BROUGHT_REWARD.into(), reg);
            return Ok((BROUGHT_REWARD.into(), Arc::new(catalog)));
        }
    }
    let name = pick_reward(app, named, how).map_err(|(status, m)| error(status, m))?;
    if let Some(r) = forbidden(caller, "reward", &name) {
        return Err(r);
    }
    Ok((name, Arc::new(tenant_catalog(caller))))
}

/// `body` parsed as `T` on the blocking pool (one of the parse slots); a parse error is a 400
/// after `expected`.
async fn parse_json<T: serde::de::DeserializeOwned + Send + 'static>(
    app: &AppState,
    body: axum::body::Bytes,
    expected: &'static str,
) -> Result<T, Response> {
    let Ok(_slot) = app.parse_slots.acquire().await else {
        return Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down".into(),
        ));
    };
    match tokio::task::spawn_blocking(move || serde_json::from_slice::<T>(&body)).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err(e)) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("expected {expected}: {e}"),
        )),
        Err(e) => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("parsing the body failed: {e}"),
        )),
    }
}

/// Score every call with the reward `name`, all at once (each in its own sandbox), in order,
/// on the caller's tenant's threads; counted in the metrics. A call that faults is in its
/// [`Called`]; the whole fails only when the host does.
async fn score_all(
    app: &AppState,
    caller: &Caller,
    name: &str,
    catalog: Arc<Catalog>,
    calls: Vec<rollbox_runtime::RewardCall>,
) -> Result<Vec<rollbox_runtime::Called<f64>>, Response> {
    let n = calls.len();
    let work = score_each(
        app.rollout.runtime.clone(),
        app.gate.clone(),
        caller.clone(),
        (name.to_string(), catalog),
        calls,
    );
    // One task on the tenant's threads, which spawns the calls there: a hop per request, not
    // one per call.
    let out = match on_tenant_threads(caller, work).await {
        Ok(Ok(out)) => out,
        Ok(Err(message)) => return Err(error(StatusCode::INTERNAL_SERVER_ERROR, message)),
        Err(e) => {
            return Err(error(
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("a reward call failed: {e}"),
            ));
        }
    };
    let m = &app.metrics;
    m.reward_samples.fetch_add(n as u64, Ordering::Relaxed);
    m.reward_faults.fetch_add(
        out.iter().filter(|c| c.result.is_err()).count() as u64,
        Ordering::Relaxed,
    );
    Ok(out)
}

/// Score each call in a task of its own on this runtime, each taking its turn at the gate;
/// the results in the calls' order, or what failed in the host.
async fn score_each(
    runtime: Arc<rollbox_runtime::Runtime>,
    gate: Arc<FairGate>,
    caller: Caller,
    (name, catalog): (String, Arc<Catalog>),
    calls: Vec<rollbox_runtime::RewardCall>,
) -> Result<Vec<rollbox_runtime::Called<f64>>, String> {
    let n = calls.len();
    let mut set = tokio::task::JoinSet::new();
    for (i, call) in calls.into_iter().enumerate() {
        let (runtime, name, catalog) = (runtime.clone(), name.clone(), catalog.clone());
        let (gate, caller) = (gate.clone(), caller.clone());
        set.spawn(async move {
            let (timeout, memory) = tenant_limits(&caller);
            let turn = take_turn(&gate, &caller).await;
            let called = runtime
                .score_in(&catalog, &name, call, timeout, memory)
                .await;
            drop(turn);
            if let Ok(c) = &called {
                charge(&caller, c.wall);
            }
            (i, called)
        });
    }
    let mut out: Vec<Option<rollbox_runtime::Called<f64>>> = (0..n).map(|_| None).collect();
    while let Some(joined) = set.join_next().await {
        match joined {
            Ok((i, Ok(called))) => out[i] = Some(called),
            Ok((_, Err(e))) => return Err(format!("{e:#}")),
            Err(e) => return Err(format!("a reward call failed: {e}")),
        }
    }
    Ok(out.into_iter().flatten().collect())
}

/// `POST /get_reward`: each sample scored by the reward named in `?reward=NAME` (or the only
/// one registered). The completion is the query after its prompt (OpenRLHF sends the prompt and
/// response decoded together), the label is the row's `answer` (and `label`). A call that
/// faults scores 0.0 and counts in `extra_logs.rollbox_fault`; the request still succeeds.
async fn get_reward(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    RawQuery(query): RawQuery,
    body: axum::body::Body,
) -> Response {
    let body = match read_body(body, MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let named = match reward_param(query.as_deref()) {
        Ok(named) => named,
        Err(m) => return error(StatusCode::BAD_REQUEST, m),
    };
    let (name, catalog) = match chosen_reward(&app, &caller, named, "?reward=NAME").await {
        Ok(chosen) => chosen,
        Err(r) => return r,
    };
    let request: RewardRequest = match parse_json(
        &app,
        body,
        r#"{"query": [...], "prompts": [...], "labels": [...]}"#,
    )
    .await
    {
        Ok(r) => r,
        Err(r) => return r,
    };
    let n = request.query.len();
    let cap = rows_cap(&caller, MAX_REWARD_SAMPLES);
    if n > cap {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("{n} samples; at most {cap} per request"),
        );
    }
    for (what, len) in [
        ("prompts", request.prompts.as_ref().map(Vec::len)),
        ("labels", request.labels.as_ref().map(Vec::len)),
    ] {
        if let Some(len) = len.filter(|&l| l != n) {
            return error(
                StatusCode::BAD_REQUEST,
                format!("{len} {what} for {n} queries: give one per query (or none)"),
            );
        }
    }
    let calls = request
        .query
        .into_iter()
        .enumerate()
        .map(|(i, query)| {
            let prompt = request
                .prompts
                .as_ref()
                .map(|p| p[i].clone())
                .unwrap_or_default();
            let label = request
                .labels
                .as_ref()
                .map(|l| l[i].clone())
                .unwrap_or(serde_json::Value::Null);
            let completion = query
                .strip_prefix(prompt.as_str())
                .map(str::to_string)
                .unwrap_or(query);
            rollbox_runtime::RewardCall {
                prompt,
                completion,
                prompt_ids: vec![],
                completion_ids: vec![],
                data: serde_json::json!({"answer": label, "label": label}),
            }
        })
        .collect();
    let called = match score_all(&app, &caller, &name, catalog, calls).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let rewards: Vec<f64> = called
        .iter()
        .map(|c| *c.result.as_ref().unwrap_or(&0.0))
        .collect();
    let faults: Vec<f64> = called
        .iter()
        .map(|c| if c.result.is_err() { 1.0 } else { 0.0 })
        .collect();
    let millis: Vec<f64> = called.iter().map(|c| c.wall.as_secs_f64() * 1e3).collect();
    axum::Json(serde_json::json!({
        "rewards": rewards,
        "scores": rewards,
        "extra_logs": {"rollbox_fault": faults, "rollbox_reward_ms": millis},
    }))
    .into_response()
}

/// `POST /v1/rewards`: `{"reward": NAME, "items": [...]}`, each item scored in its own sandbox.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RewardsRequest {
    /// The registered reward (optional when one is).
    #[serde(default)]
    reward: Option<String>,
    items: Vec<RewardItem>,
}

/// One completion to score: the reward sees `row` (the dataset row, an object) with `answer`
/// set to `answer` (or `reference`) when given.
#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct RewardItem {
    completion: String,
    #[serde(default)]
    prompt: String,
    #[serde(default)]
    answer: Option<serde_json::Value>,
    #[serde(default)]
    reference: Option<serde_json::Value>,
    #[serde(default)]
    row: Option<serde_json::Map<String, serde_json::Value>>,
}

/// `POST /v1/rewards`: every item scored by the named reward at once, answered in order with
/// `scores` and per item `result`s: the score (0.0 when the call faulted), the typed fault
/// (`{"kind": "timeout", "message": ..., ...}`, else null) and the call's accounting (wall
/// time, attempts, fuel, peak memory). Faults never fail the request.
async fn rewards(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    body: axum::body::Body,
) -> Response {
    let body = match read_body(body, MAX_BODY_BYTES).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let request: RewardsRequest = match parse_json(
        &app,
        body,
        r#"{"reward": "NAME", "items": [{"completion": "...", "answer": ...}, ...]}"#,
    )
    .await
    {
        Ok(r) => r,
        Err(r) => return r,
    };
    let named = request.reward;
    let (name, catalog) =
        match chosen_reward(&app, &caller, named.clone(), r#""reward": "NAME""#).await {
            Ok(chosen) => chosen,
            Err(r) => return r,
        };
    let label = named.unwrap_or_else(|| name.clone());
    let n = request.items.len();
    let cap = rows_cap(&caller, MAX_REWARD_SAMPLES);
    if n > cap {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("{n} items; at most {cap} per request"),
        );
    }
    let mut calls = Vec::with_capacity(n);
    for (i, item) in request.items.into_iter().enumerate() {
        let mut data = item.row.unwrap_or_default();
        let answer = match (item.answer, item.reference) {
            (Some(_), Some(_)) => {
                return error(
                    StatusCode::BAD_REQUEST,
                    format!("items[{i}] has both `answer` and `reference`: give one"),
                );
            }
            (a, r) => a.or(r),
        };
        if let Some(answer) = answer {
            data.insert("answer".into(), answer);
        }
        calls.push(rollbox_runtime::RewardCall {
            prompt: item.prompt,
            completion: item.completion,
            prompt_ids: vec![],
            completion_ids: vec![],
            data: serde_json::Value::Object(data),
        });
    }
    let called = match score_all(&app, &caller, &name, catalog, calls).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let scores: Vec<f64> = called
        .iter()
        .map(|c| *c.result.as_ref().unwrap_or(&0.0))
        .collect();
    let results: Vec<serde_json::Value> = called
        .iter()
        .map(|c| {
            let fault = c.result.as_ref().err().map(|f| {
                let mut v = serde_json::to_value(f).unwrap_or_default();
                if let Some(o) = v.as_object_mut() {
                    o.insert("message".into(), f.to_string().into());
                }
                v
            });
            serde_json::json!({
                "score": c.result.as_ref().ok(),
                "fault": fault,
                "ms": c.wall.as_secs_f64() * 1e3,
                "attempts": c.attempts,
                "fuel": c.fuel_consumed,
                "peak_memory_bytes": c.peak_memory_bytes,
            })
        })
        .collect();
    axum::Json(serde_json::json!({"reward": label, "scores": scores, "results": results}))
        .into_response()
}

/// The `reward=NAME` parameter of a query string, if any; any other parameter, or `reward`
/// twice, is refused.
fn reward_param(query: Option<&str>) -> Result<Option<String>, String> {
    let mut reward = None;
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "reward" {
            return Err(format!(
                "unknown query parameter `{key}`; the one accepted is `reward`"
            ));
        }
        let ok = !value.is_empty()
            && value.len() <= 128
            && value
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-' || b == b'.');
        if !ok && !valid_component_hash(value) {
            return Err(
                "`reward` must be a registered reward's name or sha256: and 64 hex digits".into(),
            );
        }
        if reward.replace(value.to_string()).is_some() {
            return Err("`reward` is given twice; name one reward".into());
        }
    }
    Ok(reward)
}

async fn version(State(app): State<Arc<AppState>>, body: axum::body::Body) -> Response {
    let body = match read_body(body, MAX_VERSION_BODY_BYTES).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    #[derive(serde::Deserialize)]
    struct VersionRequest {
        version: i64,
    }
    let expected = r#"expected {"version": N} with an i32 N"#;
    let n = match serde_json::from_slice::<VersionRequest>(&body) {
        Ok(v) => v.version,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("{expected}: {e}")),
    };
    let Ok(n) = i32::try_from(n) else {
        return error(StatusCode::BAD_REQUEST, format!("{expected}; got {n}"));
    };
    if n < 0 {
        return error(
            StatusCode::BAD_REQUEST,
            format!("version {n} is negative; policy versions count weight updates from 0"),
        );
    }
    app.rollout.runtime.services().set_version(n);
    axum::Json(serde_json::json!({"version": n})).into_response()
}

async fn metrics(State(app): State<Arc<AppState>>) -> Response {
    let m = &app.metrics;
    let mut text = String::new();
    for (name, help, v) in [
        ("requests_total", "POST /v1/episodes requests.", &m.requests),
        ("rows_total", "Rows run.", &m.rows),
        ("episodes_total", "Episodes finished.", &m.episodes),
        ("episodes_accepted_total", "Episodes accepted.", &m.accepted),
        (
            "trajectories_total",
            "Trajectories returned.",
            &m.trajectories,
        ),
        ("request_errors_total", "Requests that failed.", &m.errors),
        (
            "reward_samples_total",
            "Samples scored by POST /get_reward.",
            &m.reward_samples,
        ),
        (
            "reward_faults_total",
            "POST /get_reward samples whose reward call faulted (scored 0.0).",
            &m.reward_faults,
        ),
        (
            "run_code_requests_total",
            "POST /run_code requests.",
            &m.run_code_requests,
        ),
        (
            "run_code_failed_total",
            "POST /run_code programs that did not succeed (non-zero exit, time limit, fault).",
            &m.run_code_failures,
        ),
    ] {
        let v = v.load(Ordering::Relaxed);
        text.push_str(&format!(
            "# HELP rollbox_{name} {help}\n# TYPE rollbox_{name} counter\nrollbox_{name} {v}\n"
        ));
    }
    text.push_str(&format!(
        "# HELP rollbox_unauthorized_total Requests refused for want of a valid API key.\n# TYPE rollbox_unauthorized_total counter\nrollbox_unauthorized_total {}\n",
        m.unauthorized.load(Ordering::Relaxed)
    ));
    if let Some(tenants) = &app.tenants {
        let all = tenants.all();
        for (name, kind, help) in [
            (
                "tenant_requests_total",
                "counter",
                "Requests let through, per tenant.",
            ),
            (
                "tenant_throttled_total",
                "counter",
                "Requests answered 429 at the tenant's max_requests_in_flight.",
            ),
            (
                "tenant_requests_in_flight",
                "gauge",
                "Requests of the tenant in flight.",
            ),
            (
                "tenant_episodes_in_flight",
                "gauge",
                "Episodes of the tenant running now (max_episodes_in_flight).",
            ),
            (
                "tenant_reward_calls_in_flight",
                "gauge",
                "Reward and /run_code calls of the tenant in the sandbox pool now (max_reward_calls_in_flight).",
            ),
            (
                "tenant_out_of_time_total",
                "counter",
                "Requests answered 429 for want of sandbox time (sandbox_seconds_per_minute).",
            ),
            (
                "tenant_sandbox_seconds_total",
                "counter",
                "Wall time the tenant's reward, tool and episode sandboxes ran, seconds.",
            ),
            (
                "tenant_queue_wait_seconds_total",
                "counter",
                "Time the tenant's reward and tool calls waited for the sandbox pool, seconds.",
            ),
        ] {
            text.push_str(&format!(
                "# HELP rollbox_{name} {help}\n# TYPE rollbox_{name} {kind}\n"
            ));
            for t in all.iter() {
                let u = &t.usage;
                let v = match name {
                    "tenant_requests_total" => u.requests.load(Ordering::Relaxed).to_string(),
                    "tenant_throttled_total" => u.throttled.load(Ordering::Relaxed).to_string(),
                    "tenant_out_of_time_total" => u.out_of_time.load(Ordering::Relaxed).to_string(),
                    "tenant_sandbox_seconds_total" => {
                        (u.sandbox_us.load(Ordering::Relaxed) as f64 / 1e6).to_string()
                    }
                    "tenant_queue_wait_seconds_total" => {
                        (u.queue_wait_us.load(Ordering::Relaxed) as f64 / 1e6).to_string()
                    }
                    "tenant_episodes_in_flight" => t.episodes_in_flight().to_string(),
                    "tenant_reward_calls_in_flight" => app.gate.holding(&t.name).to_string(),
                    _ => t.in_flight().to_string(),
                };
                text.push_str(&format!("rollbox_{name}{{tenant=\"{}\"}} {v}\n", t.name));
            }
        }
    }
    let v = app.rollout.runtime.services().version();
    text.push_str(&format!(
        "# HELP rollbox_policy_version Policy version stamped on new tokens.\n# TYPE rollbox_policy_version gauge\nrollbox_policy_version {v}\n"
    ));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// Keep the server's threads off the cores tenants' episodes are pinned to (`episode_cpus`),
/// before the engine and the components start theirs.
fn set_apart_episode_cores(tenants: &Tenants) -> anyhow::Result<()> {
    let all = tenants.all();
    let Some(reserved) = CpuSet::union(all.iter().filter_map(|t| t.episode_cpus.as_ref())) else {
        return Ok(());
    };
    match crate::threads::set_apart(&reserved)? {
        Some(left) => tracing::info!(
            "cores {reserved} are set apart for tenants' episodes (episode_cpus): the server, the calls and other episodes run on cores {left}"
        ),
        None => tracing::warn!(
            "the tenants' episode_cpus name every core ({reserved}): the server's threads and the calls share them with those episodes"
        ),
    }
    Ok(())
}

/// Serve until killed.
pub async fn run(a: ServeArgs) -> anyhow::Result<()> {
    let spec = a.setup.spec()?;
    let tenants = match &a.tenants {
        Some(path) => {
            let registered = Registered {
                rewards: spec.rewards.keys().cloned().collect(),
                tools: spec.tools.keys().cloned().collect(),
                workflows: std::iter::once(DEFAULT_WORKFLOW.to_string())
                    .chain(a.extra_workflow.iter().map(|(n, _)| n.clone()))
                    .collect(),
            };
            Some(Arc::new(Tenants::load(path, SERVER_QUOTA, registered)?))
        }
        None => None,
    };
    if let Some(tenants) = &tenants {
        set_apart_episode_cores(tenants)?;
    }
    let tls = match (&a.tls_cert, &a.tls_key) {
        (Some(cert), Some(key)) => Some(tls_acceptor(cert, key)?),
        _ => None,
    };
    // Before the model and components load: a refused address fails at once.
    let listener = tokio::net::TcpListener::bind(&a.listen)
        .await
        .map_err(|e| anyhow::anyhow!("listening on {}: {e}", a.listen))?;
    let local = listener.local_addr()?;
    if tenants.is_none() && !local.ip().is_loopback() && !a.insecure_no_auth {
        anyhow::bail!(
            "{local} is reachable from other machines and no --tenants file gives API keys: anyone could run episodes, rewards and code here. Give --tenants FILE (docs/serve.md), listen on 127.0.0.1, or pass --insecure-no-auth"
        );
    }
    process::prefer_small_pages(&a.setup.engine());
    spec.ensure_model().await?;
    // Built once: every request runs against the same host and controller. A request's rows
    // are one batch (the controller splits only what is over the tensor cap; the sink joins
    // it again).
    let rollout = spec.build()?.rollout(RolloutOptions {
        batch_size: MAX_ROWS_PER_REQUEST,
        ..a.setup.options()
    });
    let mut workflows = std::collections::BTreeMap::new();
    for (name, path) in &a.extra_workflow {
        let source = rollbox_host::builtin::resolve("workflow", path)?;
        let component = rollout
            .runtime
            .load_workflow(&source)
            .with_context(|| format!("loading the workflow {name}={}", path.display()))?;
        if workflows
            .insert(name.clone(), Arc::new(component))
            .is_some()
        {
            anyhow::bail!("--extra-workflow {name} is given twice: give each workflow one name");
        }
    }
    crate::alloc::release_setup_memory();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let pool = rollout.runtime.services().untrusted_pool_size();
    let app = Arc::new(AppState {
        rollout,
        metrics: Metrics::default(),
        parse_slots: tokio::sync::Semaphore::new(cores.saturating_sub(1).max(1)),
        tenants: tenants.clone(),
        draining: std::sync::atomic::AtomicBool::new(false),
        gate: FairGate::new(pool),
        workflows,
        request_components: Default::default(),
    });
    if let Some(tenants) = tenants {
        reload_on_sighup(tenants, app.gate.clone())?;
    }
    let router = Router::new()
        .route("/v1/episodes", post(episodes))
        .route("/v1/version", post(version))
        .route("/get_reward", post(get_reward))
        .route("/v1/rewards", post(rewards))
        .route("/run_code", post(run_code))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz))
        .route("/metrics", get(metrics))
        .layer(axum::middleware::from_fn_with_state(app.clone(), authorize))
        .with_state(app.clone());
    let app_for_drain = app;
    let scheme = if tls.is_some() { "https" } else { "http" };
    println!("listening on {scheme}://{local}");
    use std::io::Write as _;
    std::io::stdout().flush()?;
    let drain = {
        let app = app_for_drain;
        async move {
            shutdown_signal().await;
            app.draining.store(true, Ordering::Release);
        }
    };
    serve_connections(
        listener,
        router,
        a.max_connections_per_ip.max(1),
        tls,
        drain,
        a.drain_timeout,
    )
    .await
}

/// Largest `--tls-cert` or `--tls-key` file, bytes.
const MAX_TLS_FILE_BYTES: u64 = 1 << 20;

/// The TLS side of `--tls-cert` and `--tls-key` (rustls with *ring*; TLS 1.2 and 1.3; HTTP/1.1).
fn tls_acceptor(
    cert: &std::path::Path,
    key: &std::path::Path,
) -> anyhow::Result<tokio_rustls::TlsAcceptor> {
    use rustls_pki_types::pem::PemObject as _;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    use std::io::Read as _;
    use tokio_rustls::rustls;
    let read = |path: &std::path::Path, flag: &str| -> anyhow::Result<Vec<u8>> {
        let file = std::fs::File::open(path)
            .map_err(|e| anyhow::anyhow!("{flag} {}: {e}", path.display()))?;
        if !file.metadata()?.is_file() {
            anyhow::bail!("{flag} {} is not a regular file", path.display());
        }
        let mut bytes = Vec::new();
        file.take(MAX_TLS_FILE_BYTES + 1).read_to_end(&mut bytes)?;
        if bytes.len() as u64 > MAX_TLS_FILE_BYTES {
            anyhow::bail!(
                "{flag} {} is over {MAX_TLS_FILE_BYTES} bytes",
                path.display()
            );
        }
        Ok(bytes)
    };
    let certs = CertificateDer::pem_slice_iter(&read(cert, "--tls-cert")?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| anyhow::anyhow!("--tls-cert {}: {e}", cert.display()))?;
    if certs.is_empty() {
        anyhow::bail!("--tls-cert {} holds no PEM CERTIFICATE", cert.display());
    }
    let private = PrivateKeyDer::from_pem_slice(&read(key, "--tls-key")?).map_err(|e| {
        anyhow::anyhow!(
            "--tls-key {}: no PEM private key ({e}); give the key of --tls-cert",
            key.display()
        )
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, private)
        .map_err(|e| anyhow::anyhow!("--tls-cert and --tls-key do not go together: {e}"))?;
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

/// `GET /readyz`: `ready`, or 503 while draining.
async fn readyz(State(app): State<Arc<AppState>>) -> Response {
    if app.draining.load(Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
    }
    "ready".into_response()
}

/// The first SIGTERM or SIGINT.
async fn shutdown_signal() {
    use tokio::signal::unix::{SignalKind, signal};
    match (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) {
        (Ok(mut term), Ok(mut int)) => {
            tokio::select! {
                _ = term.recv() => {}
                _ = int.recv() => {}
            }
        }
        _ => std::future::pending().await,
    }
}

/// Serve one connection's requests until it closes; when `stop` changes (drain), finish the
/// request in flight and close.
async fn serve_io<I>(
    io: I,
    service: hyper_util::service::TowerToHyperService<Router>,
    mut stop: tokio::sync::watch::Receiver<bool>,
) -> Result<(), String>
where
    I: hyper::rt::Read + hyper::rt::Write + Unpin + Send + 'static,
{
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT)
        .serve_connection(io, service);
    tokio::pin!(conn);
    let result = tokio::select! {
        r = conn.as_mut() => r,
        _ = stop.changed() => {
            conn.as_mut().graceful_shutdown();
            conn.await
        }
    };
    result.map_err(|e| e.to_string())
}

/// Read the tenants file again on every SIGHUP (a broken file leaves the tenants as they were).
fn reload_on_sighup(tenants: Arc<Tenants>, gate: Arc<FairGate>) -> anyhow::Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut hangups =
        signal(SignalKind::hangup()).map_err(|e| anyhow::anyhow!("listening for SIGHUP: {e}"))?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            match tenants.reload() {
                Ok(n) => {
                    let names: Vec<String> = tenants.all().iter().map(|t| t.name.clone()).collect();
                    gate.forget_all_but(&names);
                    tracing::info!("SIGHUP: the tenants file read again, {n} tenants");
                }
                Err(e) => tracing::warn!("SIGHUP: {e:#}; the tenants stay as they were"),
            }
        }
    });
    Ok(())
}

/// Connections open per client address.
#[derive(Default)]
struct PerIp(std::sync::Mutex<std::collections::HashMap<std::net::IpAddr, usize>>);

/// One connection counted against its address; uncounted when dropped.
struct IpSlot {
    table: Arc<PerIp>,
    ip: std::net::IpAddr,
}

impl PerIp {
    fn take(self: &Arc<Self>, ip: std::net::IpAddr, cap: usize) -> Option<IpSlot> {
        let mut t = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = t.entry(ip).or_default();
        if *n >= cap {
            return None;
        }
        *n += 1;
        Some(IpSlot {
            table: self.clone(),
            ip,
        })
    }
}

impl Drop for IpSlot {
    fn drop(&mut self) {
        let mut t = self.table.0.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = t.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                t.remove(&self.ip);
            }
        }
    }
}

/// Accept connections and serve each on its own task, with a header-read timeout and caps on
/// open connections, in all and per client address (`axum::serve` has none of these:
/// half-open connections were held forever).
async fn serve_connections(
    listener: tokio::net::TcpListener,
    router: Router,
    per_ip_cap: usize,
    tls: Option<tokio_rustls::TlsAcceptor>,
    drain: impl std::future::Future<Output = ()>,
    drain_timeout: Duration,
) -> anyhow::Result<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    let per_ip = Arc::new(PerIp::default());
    let (draining, _) = tokio::sync::watch::channel(false);
    let mut refused_logged = std::time::Instant::now() - Duration::from_secs(60);
    tokio::pin!(drain);
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = &mut drain => break,
        };
        let (stream, peer) = match accepted {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Some(ip_slot) = per_ip.take(peer.ip(), per_ip_cap) else {
            // A flood would log a line per connection: at most one a second.
            if refused_logged.elapsed() >= Duration::from_secs(1) {
                refused_logged = std::time::Instant::now();
                tracing::warn!(
                    "{} has {per_ip_cap} connections open (--max-connections-per-ip); closing new ones",
                    peer.ip()
                );
            }
            continue;
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            if refused_logged.elapsed() >= Duration::from_secs(1) {
                refused_logged = std::time::Instant::now();
                tracing::warn!("{MAX_CONNECTIONS} connections open; closing new ones");
            }
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        let stop = draining.subscribe();
        let tls = tls.clone();
        tokio::spawn(async move {
            let result = match tls {
                None => serve_io(hyper_util::rt::TokioIo::new(stream), service, stop).await,
                // The handshake within the header time: a client that opens a connection
                // and never finishes it holds its slot no longer than a slow request would.
                Some(acceptor) => {
                    match tokio::time::timeout(HEADER_READ_TIMEOUT, acceptor.accept(stream)).await {
                        Ok(Ok(tls)) => {
                            serve_io(hyper_util::rt::TokioIo::new(tls), service, stop).await
                        }
                        Ok(Err(e)) => Err(format!("TLS handshake: {e}")),
                        Err(_) => Err("TLS handshake timed out".into()),
                    }
                }
            };
            if let Err(e) = result {
                tracing::debug!("connection from {peer}: {e}");
            }
            drop((slot, ip_slot));
        });
    }
    // Draining: no new connections; open ones finish their request and close.
    drop(listener);
    let _ = draining.send(true);
    let open = MAX_CONNECTIONS - slots.available_permits();
    tracing::info!(
        "draining: {open} connections open, waiting up to {} s",
        drain_timeout.as_secs_f64()
    );
    let all = u32::try_from(MAX_CONNECTIONS).unwrap_or(u32::MAX);
    match tokio::time::timeout(drain_timeout, slots.acquire_many(all)).await {
        Ok(_) => tracing::info!("drained: every request answered"),
        Err(_) => tracing::warn!(
            "drain timeout: {} connections still open are cancelled with their episodes",
            MAX_CONNECTIONS - slots.available_permits()
        ),
    }
    Ok(())
}
