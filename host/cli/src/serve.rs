//! `rollbox serve`: the rollout controller over HTTP, for a trainer in another process.
//!
//! * `POST /v1/episodes` with `{"rows": [{...}, ...]}`: runs each row's group and answers with
//!   one safetensors batch (`application/octet-stream`, loadable with
//!   `safetensors.torch.load`); its metadata holds `trajectories`, `rows`, `stats` and the
//!   provenance.
//! * `POST /v1/version` with `{"version": N}`: sets the policy version stamped on new tokens.
//! * `GET /healthz`: `ok`.
//! * `GET /metrics`: Prometheus text.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use clap::Args;
use rollbox_rollout::Rollout;
use rollbox_rollout::dataset::Row;
use rollbox_rollout::output::OutputDir;

use crate::rollout::{SetupArgs, build};

/// Flags of `rollbox serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    #[command(flatten)]
    setup: SetupArgs,
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

fn error(status: StatusCode, message: String) -> Response {
    (status, axum::Json(serde_json::json!({"error": message}))).into_response()
}

async fn episodes(State(app): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
    app.metrics.requests.fetch_add(1, Ordering::Relaxed);
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

/// Run the rows as one batch in a scratch directory and return the batch file's bytes.
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
    let dir = tempfile::tempdir()?;
    let mut out = OutputDir::open(dir.path())?;
    let stats = rollout.run(rows, Vec::new(), &mut out, &mut |_| {}).await?;
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
    let batch = dir.path().join("batch-000000.safetensors");
    if batch.exists() {
        // Add the stats to the batch's metadata.
        let file = rollbox_tensor::read_safetensors(&batch, &rollbox_tensor::Device::Cpu)?;
        let mut meta = file.metadata;
        meta.insert("stats".into(), serde_json::to_string(&stats)?);
        Ok(rollbox_tensor::to_safetensors_bytes(&file.tensors, &meta)?)
    } else {
        let mut meta: BTreeMap<String, String> = r.provenance.clone();
        meta.insert("stats".into(), serde_json::to_string(&stats)?);
        meta.insert("trajectories".into(), "[]".into());
        Ok(rollbox_tensor::to_safetensors_bytes(&[], &meta)?)
    }
}

async fn version(State(app): State<Arc<AppState>>, body: axum::body::Bytes) -> Response {
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
    app.rollout.runtime.services().set_version(n);
    axum::Json(serde_json::json!({"version": n})).into_response()
}

async fn metrics(State(app): State<Arc<AppState>>) -> Response {
    let m = &app.metrics;
    let mut text = String::new();
    let mut counter = |name: &str, help: &str, v: u64| {
        text.push_str(&format!(
            "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}\n"
        ));
    };
    counter(
        "rollbox_requests_total",
        "POST /v1/episodes requests.",
        m.requests.load(Ordering::Relaxed),
    );
    counter(
        "rollbox_rows_total",
        "Rows run.",
        m.rows.load(Ordering::Relaxed),
    );
    counter(
        "rollbox_episodes_total",
        "Episodes finished.",
        m.episodes.load(Ordering::Relaxed),
    );
    counter(
        "rollbox_episodes_accepted_total",
        "Episodes accepted.",
        m.accepted.load(Ordering::Relaxed),
    );
    counter(
        "rollbox_trajectories_total",
        "Trajectories returned.",
        m.trajectories.load(Ordering::Relaxed),
    );
    counter(
        "rollbox_request_errors_total",
        "Requests that failed.",
        m.errors.load(Ordering::Relaxed),
    );
    let v = app.rollout.runtime.services().version();
    text.push_str(&format!(
        "# HELP rollbox_policy_version Policy version stamped on new tokens.\n# TYPE rollbox_policy_version gauge\nrollbox_policy_version {v}\n"
    ));
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text).into_response()
}

pub async fn run(a: ServeArgs) -> anyhow::Result<()> {
    crate::prefer_small_pages(&a.setup.engine);
    let rollout = build(&a.setup)?;
    crate::release_setup_memory();
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
    axum::serve(listener, router).await?;
    Ok(())
}
