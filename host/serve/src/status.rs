//! The server's own endpoints: `POST /v1/version`, `GET /metrics`, `GET /readyz`.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};

use super::connections::read_body;
use super::{AppState, MAX_VERSION_BODY_BYTES, callers, error, held};

pub(crate) async fn version(
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
    let body = match read_body(body, MAX_VERSION_BODY_BYTES, app.budget()).await {
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

pub(crate) async fn metrics(State(app): State<Arc<AppState>>, caller: callers::Caller) -> Response {
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

/// `GET /readyz`: `ready`, or 503 while draining.
pub(crate) async fn readyz(State(app): State<Arc<AppState>>) -> Response {
    if app.draining.load(Ordering::Acquire) {
        return (StatusCode::SERVICE_UNAVAILABLE, "draining").into_response();
    }
    "ready".into_response()
}
