//! `POST /run_code`: SandboxFusion's API, each program run in a fresh instance of the tool
//! registered as `python`, within the request's limits and never past the tool's own.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rollbox_runtime::limits::LimitValue;
use rollbox_runtime::{Caps, Scope};

use super::callers::{
    Caller, forbidden, metered, on_tenant_threads, take_turn, tenant_caps, time_left, time_spent,
};
use super::connections::read_body;
use super::held::HeldBody;
use super::{AppState, MAX_RUN_CODE_BODY_BYTES, RUN_CODE_TOOL, error, parse_on_pool};

/// stdout and stderr kept per `POST /run_code`, characters each.
const RUN_CODE_OUTPUT_CHARS: u64 = 1 << 20;

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
    /// Kept as text, never parsed into values (only its emptiness is checked): a body of
    /// 60 MB of `{},` would be gigabytes of `Value`s (issue 52).
    #[serde(default)]
    files: Option<Box<serde_json::value::RawValue>>,
    #[serde(default)]
    fetch_files: Option<Box<serde_json::value::RawValue>>,
}

/// Whether a JSON text is `null`, `{}` or `[]` (whitespace aside).
fn empty_json(raw: &serde_json::value::RawValue) -> bool {
    let mut bytes = raw.get().bytes().filter(|b| !b.is_ascii_whitespace());
    let first = bytes.next();
    match first {
        Some(b'{') => bytes.eq(*b"}"),
        Some(b'[') => bytes.eq(*b"]"),
        Some(b'n') => bytes.eq(*b"ull"),
        _ => false,
    }
}

/// `POST /run_code`: run a Python program on its stdin in a fresh python-exec instance and
/// answer as SandboxFusion does: `status` `Success` (it exited 0), `Failed` (a non-zero exit,
/// an exception, a time limit, a sandbox fault), `run_result.status` `Finished` or
/// `TimeLimitExceeded`. The request's `run_timeout` and `memory_limit_MB` tighten the limits
/// the operator registered the tool with; they never loosen them.
pub(super) async fn run_code(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    body: axum::body::Body,
) -> Response {
    app.metrics
        .run_code_requests
        .fetch_add(1, Ordering::Relaxed);
    let body = match read_body(body, MAX_RUN_CODE_BODY_BYTES, app.budget()).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let runtime = app.rollout.runtime.clone();
    if runtime.registries().tool(RUN_CODE_TOOL).is_none() {
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
    // The parsed program and stdin take about what the body did: its hold is kept for them
    // while the program runs.
    let HeldBody { bytes, hold: _held } = body;
    let parsed = parse_on_pool(&app, move || {
        serde_json::from_slice::<RunCodeRequest>(&bytes).map_err(|e| {
            (
                StatusCode::BAD_REQUEST,
                format!(
                    r#"expected {{"code": "...", "stdin": "...", "language": "python", ...}}: {e}"#
                ),
            )
        })
    })
    .await;
    let request = match parsed {
        Ok(r) => r,
        Err(r) => return r,
    };
    let language = request.language.as_deref().unwrap_or("python");
    if !matches!(language, "python" | "python3") {
        return error(
            StatusCode::BAD_REQUEST,
            format!("`language` is `{language}`: rollbox's /run_code runs Python only (`python`)"),
        );
    }
    if request.files.as_deref().is_some_and(|f| !empty_json(f))
        || request
            .fetch_files
            .as_deref()
            .is_some_and(|f| !empty_json(f))
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
        // SandboxFusion writes stdin into a pipe: `os.fstat(0).st_size` is 0 there too.
        "stdin_kind": "pipe",
    });
    // The registered tool once (no retries), within the request's limits and the tenant's,
    // never past what the operator registered. Whether the tenant may run code at all was
    // checked above.
    let mut request_caps = Caps {
        retries: Some(0),
        ..Caps::default()
    };
    if let Some(t) = timeout {
        request_caps
            .limits
            .set("timeout", LimitValue::Duration(t))
            .ok();
    }
    if let Some(m) = memory {
        request_caps
            .limits
            .set("max_memory", LimitValue::Number(m))
            .ok();
    }
    let scope = Scope::default().capped(&tenant_caps(&caller).and(&request_caps));
    let (gate, who) = (app.gate.clone(), caller.clone());
    let call = async move {
        time_left(&who).await;
        let turn = take_turn(&gate, &who).await;
        let run = runtime.call_tool(&scope, RUN_CODE_TOOL, args.to_string());
        let called = metered(&who, run, time_spent).await;
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
