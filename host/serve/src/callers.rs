//! Who is calling: the tenant a request's key names ([`authorize`]), its turns in the sandbox
//! pool, its threads, limits and charges, its cores set apart at start, and the tenants file
//! read again on SIGHUP.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::extract::{Extension, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::Response;
use rollbox_runtime::{Caps, Scope};

use super::{AppState, error};
use crate::fair_gate::{FairGate, GatePass};
use crate::tenants::{Tenant, Tenants};

/// The tenant a request came from (none without `--tenants`).
pub(super) type Caller = Option<Extension<Arc<Tenant>>>;

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
pub(super) async fn take_turn(gate: &Arc<FairGate>, caller: &Caller) -> GatePass {
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
pub(super) async fn on_tenant_threads<T: Send + 'static>(
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

/// The caller's tenant caps: what each of its episodes and calls may use, at most (none
/// without tenants).
pub(super) fn tenant_caps(caller: &Caller) -> Caps {
    caller
        .as_ref()
        .map_or_else(Caps::default, |Extension(t)| t.caps.clone())
}

/// Who is calling, as the runtime runs it: the rewards and tools the caller reaches (every
/// registered one without tenants; a tenant's allowed ones otherwise) under its caps.
pub(super) fn tenant_scope(caller: &Caller) -> Scope {
    let mut scope = Scope::default().capped(&tenant_caps(caller));
    if let Some(Extension(t)) = caller {
        if let Some(r) = &t.rewards {
            scope = scope.only_rewards(r.iter().cloned());
        }
        if let Some(tools) = &t.tools {
            scope = scope.only_tools(tools.iter().cloned());
        }
    }
    scope
}

/// Wait, with a tenant whose sandbox time is spent, until it is refilled enough to start a
/// call ([`rollbox_rollout::SandboxMeter::time_left`]).
pub(super) async fn time_left(caller: &Caller) {
    if let Some(Extension(t)) = caller {
        t.usage.meter.time_left().await;
    }
}

/// Run a sandbox call for the caller: with a tenant, counted against its sandbox time as it
/// runs, and stopped with `stopped`'s answer once the time is spent
/// ([`rollbox_rollout::SandboxMeter`]).
pub(super) async fn metered<T>(
    caller: &Caller,
    call: impl std::future::Future<Output = T>,
    stopped: impl FnOnce(Duration) -> T,
) -> T {
    let Some(Extension(t)) = caller else {
        return call.await;
    };
    let meter = &t.usage.meter;
    let _running = meter.start();
    let start = Instant::now();
    tokio::select! {
        done = call => done,
        () = meter.spent() => stopped(start.elapsed()),
    }
}

/// What a call stopped after `wall` because its tenant's sandbox time is spent returns: fault
/// `limit_exceeded`, naming the quota.
pub(super) fn time_spent<T>(wall: Duration) -> anyhow::Result<rollbox_runtime::Called<T>> {
    Ok(rollbox_runtime::Called {
        result: Err(rollbox_runtime::GuestFault::LimitExceeded {
            message: "the tenant's sandbox time is spent (sandbox_seconds_per_minute): the call was stopped; it is refilled at a sixtieth a second".into(),
            setting: None,
        }),
        wall,
        fuel_consumed: None,
        peak_memory_bytes: 0,
        attempts: 1,
        logs: Vec::new(),
    })
}

/// `--tenants`: who the request is from, and whether it may run now. Answers 401 without a
/// valid key, 429 (with `Retry-After`) when the tenant is at its requests in flight, 413 when
/// the body declares more than its `max_body_bytes` (a body that turns out longer is cut at
/// that size and refused as it is read); logs one line per request with the tenant's name.
pub(super) async fn authorize(
    State(app): State<Arc<AppState>>,
    req: Request,
    next: Next,
) -> Response {
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
pub(super) fn rows_cap(caller: &Caller, cap: usize) -> usize {
    caller
        .as_ref()
        .map_or(cap, |Extension(t)| t.quota.rows_per_request.min(cap))
}

/// 403 naming what the caller's tenant may not use, if it may not.
pub(super) fn forbidden(caller: &Caller, kind: &str, name: &str) -> Option<Response> {
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
pub(super) fn allowed_list(list: &Option<Vec<String>>) -> String {
    match list.as_deref() {
        None => "all".into(),
        Some([]) => "none".into(),
        Some(l) => l.join(", "),
    }
}

/// Keep the server's threads off the cores tenants' episodes are pinned to (`episode_cpus`),
/// before the engine and the components start theirs.
pub(super) fn set_apart_episode_cores(tenants: &Tenants) -> anyhow::Result<()> {
    let Some(reserved) = tenants.episode_cores() else {
        return Ok(());
    };
    match crate::threads::set_apart(reserved)? {
        Some(left) => tracing::info!(
            "cores {reserved} are set apart for tenants' episodes (episode_cpus): the server, the calls and other episodes run on cores {left}"
        ),
        None => tracing::warn!(
            "the tenants' episode_cpus name every core ({reserved}): the server's threads and the calls share them with those episodes"
        ),
    }
    Ok(())
}

/// Read the tenants file again on every SIGHUP (a broken file leaves the tenants as they were).
pub(super) fn reload_on_sighup(tenants: Arc<Tenants>, gate: Arc<FairGate>) -> anyhow::Result<()> {
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
