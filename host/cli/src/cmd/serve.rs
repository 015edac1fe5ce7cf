//! `rollbox serve`: the rollout controller over HTTP, for a trainer in another process.
//!
//! * `POST /v1/episodes` with `{"rows": [{...}, ...]}`: runs each row's group and answers with
//!   one safetensors batch (`application/octet-stream`, loadable with
//!   `safetensors.torch.load`); its metadata holds `trajectories`, `rows`, `stats` and the
//!   provenance.
//! * `POST /v1/version` with `{"version": N}`: sets the policy version stamped on new tokens.
//! * `GET /healthz`: `ok`.
//! * `GET /metrics`: Prometheus text.
//!
//! Hostile clients: a request's headers must arrive within [`HEADER_READ_TIMEOUT`] and its body
//! within [`BODY_READ_TIMEOUT`] (at most [`MAX_BODY_BYTES`], else 413; a larger
//! `Content-Length` is refused before reading); at most [`MAX_CONNECTIONS`] connections are
//! open at once (more are closed on accept); at most [`MAX_ROWS_PER_REQUEST`] rows per request.
//! Malformed requests get a 4xx naming the problem.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Args;
use rollbox_rollout::dataset::{Dataset, Row};
use rollbox_rollout::{MAX_BATCH_TENSOR_BYTES, MemorySink, Rollout};

use super::rollout::{SetupArgs, build};

/// Flags of `rollbox serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    #[command(flatten)]
    pub setup: SetupArgs,
}

#[derive(Default)]
struct Metrics {
    requests: AtomicU64,
    rows: AtomicU64,
    episodes: AtomicU64,
    accepted: AtomicU64,
    trajectories: AtomicU64,
    errors: AtomicU64,
}

struct AppState {
    rollout: Rollout,
    metrics: Metrics,
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

fn error(status: StatusCode, message: String) -> Response {
    (status, axum::Json(serde_json::json!({"error": message}))).into_response()
}

/// The request body, read within [`BODY_READ_TIMEOUT`] and [`MAX_BODY_BYTES`].
async fn read_body(body: axum::body::Body) -> Result<axum::body::Bytes, Response> {
    use axum::body::HttpBody as _;
    // A declared Content-Length over the cap is refused before anything is read.
    let declared = body.size_hint().lower();
    if declared > MAX_BODY_BYTES as u64 {
        return Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "a body of {declared} bytes; at most {MAX_BODY_BYTES}: send fewer rows per request"
            ),
        ));
    }
    match tokio::time::timeout(
        BODY_READ_TIMEOUT,
        axum::body::to_bytes(body, MAX_BODY_BYTES),
    )
    .await
    {
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) if over_limit(&e) => Err(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the body is over {MAX_BODY_BYTES} bytes: send fewer rows per request"),
        )),
        Ok(Err(e)) => Err(error(
            StatusCode::BAD_REQUEST,
            format!("cannot read the body: {e}"),
        )),
        Err(_) => Err(error(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "the body did not arrive within {} s",
                BODY_READ_TIMEOUT.as_secs()
            ),
        )),
    }
}

/// Whether a body error is the size cap (anything else is a malformed body).
fn over_limit(e: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        if s.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = s.source();
    }
    false
}

async fn episodes(State(app): State<Arc<AppState>>, body: axum::body::Body) -> Response {
    app.metrics.requests.fetch_add(1, Ordering::Relaxed);
    let body = match read_body(body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let request: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("body is not JSON: {e}")),
    };
    let Some(rows) = request["rows"].as_array() else {
        return error(
            StatusCode::BAD_REQUEST,
            r#"expected {"rows": [{...}, ...]}"#.into(),
        );
    };
    if rows.len() > MAX_ROWS_PER_REQUEST {
        return error(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "{} rows in one request; at most {MAX_ROWS_PER_REQUEST}: split them over several requests",
                rows.len()
            ),
        );
    }
    if let Some(bad) = rows.iter().position(|r| !r.is_object()) {
        return error(
            StatusCode::BAD_REQUEST,
            format!("rows[{bad}] is not a JSON object"),
        );
    }
    let rows: Vec<Row> = rows
        .iter()
        .enumerate()
        .map(|(index, data)| Row {
            index,
            data: data.into(),
        })
        .collect();
    match run_rows(&app, rows).await {
        Ok(bytes) => ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response(),
        Err(e) => {
            app.metrics.errors.fetch_add(1, Ordering::Relaxed);
            error(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}"))
        }
    }
}

/// Run the rows as one batch in memory and return it as safetensors bytes: the batches the
/// controller had to split are joined again, and the stats added to the header.
async fn run_rows(app: &AppState, rows: Vec<Row>) -> anyhow::Result<Vec<u8>> {
    let n = rows.len();
    let r = &app.rollout;
    let rollout = Rollout {
        runtime: r.runtime.clone(),
        workflow: r.workflow.clone(),
        tokenizer: r.tokenizer.clone(),
        options: rollbox_rollout::RolloutOptions {
            batch_size: n.max(1),
            ..r.options.clone()
        },
        provenance: r.provenance.clone(),
    };
    let mut sink = MemorySink::new();
    let stats = rollout
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
    let (tensors, mut meta) = sink.join(r.provenance.clone(), MAX_BATCH_TENSOR_BYTES)?;
    meta.insert("stats".into(), serde_json::to_string(&stats)?);
    Ok(rollbox_tensor::to_safetensors_bytes(&tensors, &meta)?)
}

async fn version(State(app): State<Arc<AppState>>, body: axum::body::Body) -> Response {
    let body = match read_body(body).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let v: serde_json::Value = match serde_json::from_slice(&body) {
        Ok(v) => v,
        Err(e) => return error(StatusCode::BAD_REQUEST, format!("body is not JSON: {e}")),
    };
    let Some(n) = v["version"].as_i64().and_then(|n| i32::try_from(n).ok()) else {
        return error(
            StatusCode::BAD_REQUEST,
            r#"expected {"version": N} with an i32 N"#.into(),
        );
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
    ] {
        let v = v.load(Ordering::Relaxed);
        text.push_str(&format!(
            "# HELP rollbox_{name} {help}\n# TYPE rollbox_{name} counter\nrollbox_{name} {v}\n"
        ));
    }
    let v = app.rollout.runtime.services().version();
    text.push_str(&format!(
        "# HELP rollbox_policy_version Policy version stamped on new tokens.\n# TYPE rollbox_policy_version gauge\nrollbox_policy_version {v}\n"
    ));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

/// Serve until killed.
pub async fn run(a: ServeArgs) -> anyhow::Result<()> {
    crate::process::prefer_small_pages(&a.setup.engine());
    crate::model::ensure_for(&a.setup.engine()).await?;
    let rollout = build(&a.setup)?;
    crate::process::release_setup_memory();
    let app = Arc::new(AppState {
        rollout,
        metrics: Metrics::default(),
    });
    let router = Router::new()
        .route("/v1/episodes", post(episodes))
        .route("/v1/version", post(version))
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics))
        .with_state(app);
    let listener = tokio::net::TcpListener::bind(&a.listen)
        .await
        .map_err(|e| anyhow::anyhow!("listening on {}: {e}", a.listen))?;
    println!("listening on http://{}", listener.local_addr()?);
    use std::io::Write as _;
    std::io::stdout().flush()?;
    serve_connections(listener, router).await
}

/// Accept connections and serve each on its own task, with a header-read timeout and a cap on
/// open connections (`axum::serve` has neither: half-open connections were held forever).
async fn serve_connections(
    listener: tokio::net::TcpListener,
    router: Router,
) -> anyhow::Result<()> {
    let slots = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let (stream, peer) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // Out of file descriptors and the like: back off instead of spinning.
                tracing::warn!("accept failed: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(slot) = slots.clone().try_acquire_owned() else {
            tracing::warn!("{MAX_CONNECTIONS} connections open; closing the one from {peer}");
            continue;
        };
        let service = hyper_util::service::TowerToHyperService::new(router.clone());
        tokio::spawn(async move {
            let conn = hyper::server::conn::http1::Builder::new()
                .timer(hyper_util::rt::TokioTimer::new())
                .header_read_timeout(HEADER_READ_TIMEOUT)
                .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
            if let Err(e) = conn.await {
                tracing::debug!("connection from {peer}: {e}");
            }
            drop(slot);
        });
    }
}
