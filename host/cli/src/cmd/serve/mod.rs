//! `rollbox serve`: the rollout controller over HTTP, for a trainer in another process.
//!
//! * `POST /v1/episodes` with `{"rows": [{...}, ...]}` (and optionally `"workflow": NAME`,
//!   one of `--extra-workflow` or `default`, `"n_samples": N` and `"config": {...}`, whose
//!   keys replace the server's `--config` keys for this request):
//!   runs each row's group and answers with one safetensors batch (`application/octet-stream`, loadable with
//!   `safetensors.torch.load`); its metadata holds `trajectories`, `rows`, `stats` and the
//!   provenance.
//! * `POST /v1/version` with `{"version": N}`: sets the policy version stamped on new tokens
//!   (with tenants, only an `operator` tenant may: the version is the server's, stamped on every
//!   tenant's tokens; 403 for others).
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
//! * `GET /metrics`: Prometheus text (with tenants: an `operator` tenant reads everything, any
//!   other tenant only its own `rollbox_tenant_*` series and the policy version).
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

mod answer;
mod brought;
mod callers;
mod connections;
mod episodes;
mod held;
mod rewards;
mod run_code;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Args;
use rollbox_host::process;
use rollbox_rollout::{Rollout, RolloutOptions};

use super::rollout::SetupArgs;
use crate::fair_gate::FairGate;
use crate::request_components::RequestComponents;
use crate::tenants::{Quota, Registered, Tenants};
use brought::valid_component_name;
use callers::{authorize, reload_on_sighup, set_apart_episode_cores};
use connections::{read_body, serve_connections, shutdown_signal, tls_acceptor};
use episodes::episodes;
use rewards::{get_reward, rewards};
use run_code::run_code;

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

/// What the server allows any one request: a tenant's [`Quota`] is at most this.
pub const SERVER_QUOTA: Quota = Quota {
    requests_in_flight: MAX_CONNECTIONS,
    episodes_in_flight: MAX_EPISODES_IN_FLIGHT,
    reward_calls_in_flight: MAX_REWARD_SAMPLES,
    sandbox_seconds_per_minute: None,
    body_bytes: MAX_BODY_BYTES,
    rows_per_request: MAX_ROWS_PER_REQUEST,
};

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

/// Largest `POST /v1/version` body.
const MAX_VERSION_BODY_BYTES: usize = 4 << 10;

fn error(status: StatusCode, message: String) -> Response {
    (status, axum::Json(serde_json::json!({"error": message}))).into_response()
}

/// `parse` run on the blocking pool (one of the parse slots): parsing megabytes is CPU work,
/// kept off the async workers that answer health probes and other clients. Its error is the
/// status and message to answer with.
async fn parse_on_pool<U: Send + 'static>(
    app: &AppState,
    parse: impl FnOnce() -> Result<U, (StatusCode, String)> + Send + 'static,
) -> Result<U, Response> {
    let Ok(_slot) = app.parse_slots.acquire().await else {
        return Err(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "shutting down".into(),
        ));
    };
    match tokio::task::spawn_blocking(parse).await {
        Ok(Ok(r)) => Ok(r),
        Ok(Err((status, message))) => Err(error(status, message)),
        Err(e) => Err(error(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("parsing the body failed: {e}"),
        )),
    }
}

/// `body` parsed as `T` on the blocking pool ([`parse_on_pool`]), then `then` (there too);
/// a parse error is a 400 after `expected`. The body's bytes are given back once parsed.
async fn parse_json<T: serde::de::DeserializeOwned, U: Send + 'static>(
    app: &AppState,
    body: held::HeldBody,
    expected: &'static str,
    then: impl FnOnce(T) -> Result<U, (StatusCode, String)> + Send + 'static,
) -> Result<U, Response> {
    parse_on_pool(app, move || {
        let parsed = serde_json::from_slice::<T>(&body.bytes)
            .map_err(|e| (StatusCode::BAD_REQUEST, format!("expected {expected}: {e}")));
        drop(body);
        then(parsed?)
    })
    .await
}

/// A JSON value of a request (a row, an answer, a label) parsed within what is `left` of the
/// request's [`MAX_PARSED_BYTES`] (and a row's text and parsed caps), never straight into a
/// `Value` ([`rollbox_rollout::dataset::parse_value`]); `what` names it in the error.
fn budgeted_value(
    raw: &serde_json::value::RawValue,
    left: &mut usize,
    what: &str,
) -> Result<serde_json::Value, (StatusCode, String)> {
    use rollbox_rollout::dataset::{MAX_ROW_BYTES, MAX_ROW_PARSED_BYTES, parse_value};
    let text = raw.get();
    if text.len() > MAX_ROW_BYTES {
        return Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{what} is {} bytes of JSON; at most {MAX_ROW_BYTES}",
                text.len()
            ),
        ));
    }
    let budget = (*left).min(MAX_ROW_PARSED_BYTES);
    match parse_value(text, budget) {
        Ok((value, charged)) => {
            *left -= charged;
            Ok(value)
        }
        Err(e) if budget < MAX_ROW_PARSED_BYTES && e.contains("once parsed") => Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "the request's values take over {} MiB parsed: send fewer or smaller rows per request",
                MAX_PARSED_BYTES >> 20
            ),
        )),
        Err(e) => Err((StatusCode::BAD_REQUEST, format!("{what}: {e}"))),
    }
}

async fn version(
    State(app): State<Arc<AppState>>,
    caller: callers::Caller,
    body: axum::body::Body,
) -> Response {
    if let Some(axum::extract::Extension(t)) = &caller
        && !t.operator
    {
        return error(
            StatusCode::FORBIDDEN,
            format!(
                "tenant `{}` may not set the policy version: it is stamped on every tenant's tokens, so only a tenant with `operator = true` in the tenants file may",
                t.name
            ),
        );
    }
    let body = match read_body(body, MAX_VERSION_BODY_BYTES).await {
        Ok(b) => b.bytes,
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

async fn metrics(State(app): State<Arc<AppState>>, caller: callers::Caller) -> Response {
    let m = &app.metrics;
    let mut text = String::new();
    // A tenant that is not an operator sees its own series only: the server-wide counters and
    // the other tenants' names and usage are not its to read.
    let own = caller
        .as_ref()
        .filter(|axum::extract::Extension(t)| !t.operator)
        .map(|axum::extract::Extension(t)| t.name.clone());
    let server_wide = [
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
    ];
    for (name, help, v) in server_wide.into_iter().filter(|_| own.is_none()) {
        let v = v.load(Ordering::Relaxed);
        text.push_str(&format!(
            "# HELP rollbox_{name} {help}\n# TYPE rollbox_{name} counter\nrollbox_{name} {v}\n"
        ));
    }
    if own.is_none() {
        text.push_str(&format!(
            "# HELP rollbox_unauthorized_total Requests refused for want of a valid API key.\n# TYPE rollbox_unauthorized_total counter\nrollbox_unauthorized_total {}\n",
            m.unauthorized.load(Ordering::Relaxed)
        ));
        text.push_str(&format!(
            "# HELP rollbox_request_body_bytes_held Bytes of request bodies held now (being received or not yet parsed), of at most {}.\n# TYPE rollbox_request_body_bytes_held gauge\nrollbox_request_body_bytes_held {}\n",
            held::MAX_BODY_BYTES_IN_FLIGHT,
            held::body_bytes_held()
        ));
        text.push_str(&format!(
            "# HELP rollbox_request_bodies_refused_total Requests answered 503 because their body would pass the server's total or the host's memory budget.\n# TYPE rollbox_request_bodies_refused_total counter\nrollbox_request_bodies_refused_total {}\n",
            held::bodies_refused()
        ));
    }
    if let Some(tenants) = &app.tenants {
        let all: Vec<_> = tenants
            .all()
            .iter()
            .filter(|t| own.as_ref().is_none_or(|own| *own == t.name))
            .cloned()
            .collect();
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
                    "tenant_sandbox_seconds_total" => u.meter.used().as_secs_f64().to_string(),
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

/// `GET /readyz`: `ready`, or 503 while draining.
async fn readyz(State(app): State<Arc<AppState>>) -> Response {
    if app.draining.load(Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
    }
    "ready".into_response()
}
