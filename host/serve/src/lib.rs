//! `rollbox-serve`: the rollout controller over HTTP (`rollbox serve`), for a trainer in another
//! process. The CLI turns its flags into a [`ServeSpec`]; [`Server::start`] builds the host and
//! binds the address, [`Server::run`] answers until a signal drains it.
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
//! Tenants (`--tenants FILE`, [`tenants`]): every request but `GET /healthz` must carry
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
pub mod fair_gate;
mod held;
pub mod request_components;
mod rewards;
mod run_code;
mod status;
pub mod tenants;
pub mod threads;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use rollbox_host::{HostSpec, process};
use rollbox_rollout::{Rollout, RolloutOptions};

use crate::fair_gate::FairGate;
use crate::request_components::RequestComponents;
use crate::tenants::{Quota, Registered, Tenants};
use brought::valid_component_name;
use callers::{authorize, reload_on_sighup, set_apart_episode_cores};
use connections::{serve_connections, shutdown_signal, tls_acceptor};
use episodes::episodes;
use rewards::{get_reward, rewards};
use run_code::run_code;

/// The name a request gives `--workflow` by.
pub const DEFAULT_WORKFLOW: &str = "default";

/// Whether `name` may name another workflow ([`HostSpec::workflows`]): 1 to 64 letters,
/// digits, '-', '_' or '.', and not [`DEFAULT_WORKFLOW`].
pub fn check_workflow_name(name: &str) -> Result<(), String> {
    if !valid_component_name(name) || name == DEFAULT_WORKFLOW {
        return Err(format!(
            "`{name}`: a workflow's name is 1 to 64 letters, digits, '-', '_' or '.', and not `{DEFAULT_WORKFLOW}` (the --workflow's)"
        ));
    }
    Ok(())
}

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

impl AppState {
    /// The host's memory budget, which request bodies, parsed values and answers reserve from.
    fn budget(&self) -> &Arc<rollbox_runtime::HostMemory> {
        self.rollout.runtime.services().host_memory()
    }
}

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

/// Everything a server is built from: the host (its workflow, `default`; any other workflows
/// a request may name, [`HostSpec::workflows`]; engine, rewards, tools, limits), how episodes run,
/// and how the server listens.
#[derive(Debug, Clone)]
pub struct ServeSpec {
    /// The host every request runs against.
    pub host: HostSpec,
    /// Episodes per row, concurrency, normalisation, seeds; the batch size is the request's.
    pub options: RolloutOptions,
    /// Address to listen on (port 0 picks a free port; [`Server::address`] says which).
    pub listen: String,
    /// Connections one client address may hold open at once.
    pub max_connections_per_ip: usize,
    /// The tenants file (TOML): API keys as SHA-256 hashes, and quotas; `None`: no keys asked.
    pub tenants: Option<PathBuf>,
    /// Listen on an address other than loopback without tenants.
    pub insecure_no_auth: bool,
    /// On SIGTERM or SIGINT, how long requests in flight may finish before they are cancelled.
    pub drain_timeout: Duration,
    /// HTTPS: the certificate chain and its private key (PEM).
    pub tls: Option<Tls>,
}

/// The PEM files of `--tls-cert` and `--tls-key`.
#[derive(Debug, Clone)]
pub struct Tls {
    /// The certificate chain, leaf first.
    pub cert: PathBuf,
    /// Its private key (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
}

impl ServeSpec {
    /// A server of `host` on `listen` with the defaults of `rollbox serve`'s flags.
    pub fn new(host: HostSpec, listen: impl Into<String>) -> Self {
        ServeSpec {
            host,
            options: RolloutOptions::default(),
            listen: listen.into(),
            max_connections_per_ip: 128,
            tenants: None,
            insecure_no_auth: false,
            drain_timeout: Duration::from_secs(30),
            tls: None,
        }
    }
}

/// A server bound to its address with its host built, not yet answering.
pub struct Server {
    app: Arc<AppState>,
    listener: tokio::net::TcpListener,
    tls: Option<tokio_rustls::TlsAcceptor>,
    tenants: Option<Arc<Tenants>>,
    max_connections_per_ip: usize,
    drain_timeout: Duration,
}

impl Server {
    /// Read the tenants file, bind the address (before the model and components load, so a
    /// refused address fails at once), fetch the model if it is missing and build the host.
    pub async fn start(spec: ServeSpec) -> anyhow::Result<Server> {
        for name in spec.host.workflows.keys() {
            check_workflow_name(name).map_err(anyhow::Error::msg)?;
        }
        let tenants = match &spec.tenants {
            Some(path) => {
                let registered = Registered {
                    rewards: spec.host.rewards.keys().cloned().collect(),
                    tools: spec.host.tools.keys().cloned().collect(),
                    workflows: std::iter::once(DEFAULT_WORKFLOW.to_string())
                        .chain(spec.host.workflows.keys().cloned())
                        .collect(),
                };
                Some(Arc::new(Tenants::load(path, SERVER_QUOTA, registered)?))
            }
            None => None,
        };
        if let Some(tenants) = &tenants {
            set_apart_episode_cores(tenants)?;
        }
        let tls = match &spec.tls {
            Some(t) => Some(tls_acceptor(&t.cert, &t.key)?),
            None => None,
        };
        let listener = tokio::net::TcpListener::bind(&spec.listen)
            .await
            .map_err(|e| anyhow::anyhow!("listening on {}: {e}", spec.listen))?;
        let local = listener.local_addr()?;
        if tenants.is_none() && !local.ip().is_loopback() && !spec.insecure_no_auth {
            anyhow::bail!(
                "{local} is reachable from other machines and no --tenants file gives API keys: anyone could run episodes, rewards and code here. Give --tenants FILE (docs/serve.md), listen on 127.0.0.1, or pass --insecure-no-auth"
            );
        }
        if let Some(engine) = &spec.host.engine {
            process::prefer_small_pages(engine);
        }
        spec.host.ensure_model().await?;
        // Built once: every request runs against the same host and controller. A request's
        // rows are one batch (the controller splits only what is over the tensor cap; the sink
        // joins it again).
        let host = spec.host.build()?;
        let workflows = host.workflows().clone();
        let rollout = host.rollout(RolloutOptions {
            batch_size: MAX_ROWS_PER_REQUEST,
            ..spec.options
        });
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
        Ok(Server {
            app,
            listener,
            tls,
            tenants,
            max_connections_per_ip: spec.max_connections_per_ip.max(1),
            drain_timeout: spec.drain_timeout,
        })
    }

    /// The address the server listens on.
    pub fn address(&self) -> std::io::Result<std::net::SocketAddr> {
        self.listener.local_addr()
    }

    /// Answer until SIGTERM or SIGINT, then drain; prints `listening on URL` first.
    pub async fn run(self) -> anyhow::Result<()> {
        let Server {
            app,
            listener,
            tls,
            tenants,
            max_connections_per_ip,
            drain_timeout,
        } = self;
        if let Some(tenants) = tenants {
            reload_on_sighup(tenants, app.gate.clone())?;
        }
        let router = Router::new()
            .route("/v1/episodes", post(episodes))
            .route("/v1/version", post(status::version))
            .route("/get_reward", post(get_reward))
            .route("/v1/rewards", post(rewards))
            .route("/run_code", post(run_code))
            .route("/healthz", get(|| async { "ok" }))
            .route("/readyz", get(status::readyz))
            .route("/metrics", get(status::metrics))
            .layer(axum::middleware::from_fn_with_state(app.clone(), authorize))
            .with_state(app.clone());
        let scheme = if tls.is_some() { "https" } else { "http" };
        println!("listening on {scheme}://{}", listener.local_addr()?);
        use std::io::Write as _;
        std::io::stdout().flush()?;
        let drain = async move {
            shutdown_signal().await;
            app.draining.store(true, Ordering::Release);
        };
        serve_connections(
            listener,
            router,
            max_connections_per_ip,
            tls,
            drain,
            drain_timeout,
        )
        .await
    }
}
