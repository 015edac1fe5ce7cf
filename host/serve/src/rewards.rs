//! `POST /get_reward` (OpenRLHF's remote reward protocol) and `POST /v1/rewards`: each
//! completion scored in its own sandbox, taking turns with other tenants at the fair gate.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use axum::extract::{RawQuery, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use rollbox_runtime::Scope;

use super::brought::{brought, registered_reward, valid_component_hash};
use super::callers::{
    Caller, forbidden, metered, on_tenant_threads, rows_cap, take_turn, tenant_scope, time_left,
    time_spent,
};
use super::connections::read_body;
use super::held::reserve_parsed;
use super::{
    AppState, MAX_BODY_BYTES, MAX_PARSED_BYTES, MAX_REWARD_SAMPLES, budgeted_value, error,
    parse_json,
};
use crate::fair_gate::FairGate;

/// OpenRLHF's remote reward request: the decoded prompt + response of each sample, its prompt
/// and its label (the dataset's `--data.label_key` value).
#[derive(serde::Deserialize)]
struct RewardRequest {
    query: Vec<String>,
    #[serde(default)]
    prompts: Option<Vec<String>>,
    /// Each label's JSON text, parsed within the request's budget ([`budgeted_value`]).
    #[serde(default)]
    labels: Option<Vec<Box<serde_json::value::RawValue>>>,
}

/// A reward request's calls, parsed, and the host memory their values were charged.
struct ParsedCalls {
    calls: Vec<rollbox_runtime::RewardCall>,
    parsed_bytes: usize,
}

/// The reward a request names (`None`: the only one registered), or the answer refusing it;
/// `how` says how a request names one.
fn pick_reward(
    app: &AppState,
    named: Option<String>,
    how: &str,
) -> Result<String, (StatusCode, String)> {
    let names = app.rollout.runtime.registries().reward_names();
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

/// The name a reward a request brings is reached by in its scope.
const BROUGHT_REWARD: &str = "brought";

/// The reward a `/v1/rewards` or `/get_reward` request names and the scope it is reached
/// through: a registered one by name (`None`: the only one registered), which the tenant must
/// be allowed, or one a tenant brings by path or hash ([`brought`], called with the defaults
/// of a registration), reached as [`BROUGHT_REWARD`]; or the answer refusing it.
async fn chosen_reward(
    app: &Arc<AppState>,
    caller: &Caller,
    named: Option<String>,
    how: &str,
) -> Result<(String, Scope), Response> {
    let runtime = &app.rollout.runtime;
    if let Some(n) = &named {
        let registries = runtime.registries();
        let own = |sha: &str| registered_reward(registries, sha);
        if let Some(c) = brought(app, caller, n, own).await? {
            let reg = runtime
                .checked(
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
            let mut scope = tenant_scope(caller);
            scope.bring_reward(BROUGHT_REWARD.into(), reg);
            return Ok((BROUGHT_REWARD.into(), scope));
        }
    }
    let name = pick_reward(app, named, how).map_err(|(status, m)| error(status, m))?;
    if let Some(r) = forbidden(caller, "reward", &name) {
        return Err(r);
    }
    Ok((name, tenant_scope(caller)))
}

/// Score every call with the reward `name`, all at once (each in its own sandbox), in order,
/// on the caller's tenant's threads; counted in the metrics. A call that faults is in its
/// [`Called`](rollbox_runtime::Called); the whole fails only when the host does.
async fn score_all(
    app: &AppState,
    caller: &Caller,
    name: &str,
    scope: Scope,
    calls: Vec<rollbox_runtime::RewardCall>,
) -> Result<Vec<rollbox_runtime::Called<f64>>, Response> {
    let n = calls.len();
    let work = score_each(
        app.rollout.runtime.clone(),
        app.gate.clone(),
        caller.clone(),
        (name.to_string(), scope),
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

/// Each call's score, 0.0 for one that faulted (its fault is reported beside it).
fn scores(called: &[rollbox_runtime::Called<f64>]) -> Vec<f64> {
    called
        .iter()
        .map(|c| *c.result.as_ref().unwrap_or(&0.0))
        .collect()
}

/// Score each call in a task of its own on this runtime, each taking its turn at the gate;
/// the results in the calls' order, or what failed in the host.
async fn score_each(
    runtime: Arc<rollbox_runtime::Runtime>,
    gate: Arc<FairGate>,
    caller: Caller,
    (name, scope): (String, Scope),
    calls: Vec<rollbox_runtime::RewardCall>,
) -> Result<Vec<rollbox_runtime::Called<f64>>, String> {
    let n = calls.len();
    let mut set = tokio::task::JoinSet::new();
    for (i, call) in calls.into_iter().enumerate() {
        let (runtime, name, scope) = (runtime.clone(), name.clone(), scope.clone());
        let (gate, caller) = (gate.clone(), caller.clone());
        set.spawn(async move {
            time_left(&caller).await;
            let turn = take_turn(&gate, &caller).await;
            let score = runtime.score(&scope, &name, call);
            let called = metered(&caller, score, time_spent).await;
            drop(turn);
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
pub(super) async fn get_reward(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    RawQuery(query): RawQuery,
    body: axum::body::Body,
) -> Response {
    let body = match read_body(body, MAX_BODY_BYTES, app.budget()).await {
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
    let cap = rows_cap(&caller, MAX_REWARD_SAMPLES);
    let parsed = parse_json(
        &app,
        body,
        r#"{"query": [...], "prompts": [...], "labels": [...]}"#,
        move |request: RewardRequest| openrlhf_calls(request, cap),
    )
    .await;
    let ParsedCalls {
        calls,
        parsed_bytes,
    } = match parsed {
        Ok(p) => p,
        Err(r) => return r,
    };
    // The parsed labels are held while the calls run: charged to the host budget.
    let _parsed = match reserve_parsed(app.budget(), parsed_bytes, "the request's parsed labels") {
        Ok(r) => r,
        Err(busy) => return busy.into(),
    };
    let called = match score_all(&app, &caller, &name, catalog, calls).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let rewards = scores(&called);
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

/// A `/get_reward` request's calls (at most `cap` samples), each label parsed within the
/// request's budget; else the status and message to answer with.
fn openrlhf_calls(request: RewardRequest, cap: usize) -> Result<ParsedCalls, (StatusCode, String)> {
    let n = request.query.len();
    if n > cap {
        return Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("{n} samples; at most {cap} per request"),
        ));
    }
    for (what, len) in [
        ("prompts", request.prompts.as_ref().map(Vec::len)),
        ("labels", request.labels.as_ref().map(Vec::len)),
    ] {
        if let Some(len) = len.filter(|&l| l != n) {
            return Err((
                StatusCode::BAD_REQUEST,
                format!("{len} {what} for {n} queries: give one per query (or none)"),
            ));
        }
    }
    let mut left = MAX_PARSED_BYTES;
    let mut calls = Vec::with_capacity(n);
    for (i, query) in request.query.into_iter().enumerate() {
        let prompt = request
            .prompts
            .as_ref()
            .map(|p| p[i].clone())
            .unwrap_or_default();
        let label = match &request.labels {
            Some(l) => budgeted_value(&l[i], &mut left, &format!("labels[{i}]"))?,
            None => serde_json::Value::Null,
        };
        let completion = query
            .strip_prefix(prompt.as_str())
            .map(str::to_string)
            .unwrap_or(query);
        calls.push(rollbox_runtime::RewardCall {
            prompt,
            completion,
            prompt_ids: vec![],
            completion_ids: vec![],
            data: serde_json::json!({"answer": label.clone(), "label": label}),
        });
    }
    Ok(ParsedCalls {
        calls,
        parsed_bytes: MAX_PARSED_BYTES - left,
    })
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
    /// `answer`, `reference` and `row` as JSON text, each parsed within the request's budget
    /// ([`budgeted_value`]).
    #[serde(default)]
    answer: Option<Box<serde_json::value::RawValue>>,
    #[serde(default)]
    reference: Option<Box<serde_json::value::RawValue>>,
    #[serde(default)]
    row: Option<Box<serde_json::value::RawValue>>,
}

/// A `/v1/rewards` request's calls (at most `cap` items), each value parsed within the
/// request's budget; else the status and message to answer with.
fn item_calls(items: Vec<RewardItem>, cap: usize) -> Result<ParsedCalls, (StatusCode, String)> {
    let n = items.len();
    if n > cap {
        return Err((
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("{n} items; at most {cap} per request"),
        ));
    }
    let mut left = MAX_PARSED_BYTES;
    let mut calls = Vec::with_capacity(n);
    for (i, item) in items.into_iter().enumerate() {
        let mut data = match &item.row {
            None => serde_json::Map::new(),
            Some(raw) => match budgeted_value(raw, &mut left, &format!("items[{i}].row"))? {
                serde_json::Value::Object(m) => m,
                _ => {
                    return Err((
                        StatusCode::BAD_REQUEST,
                        format!("items[{i}].row must be a JSON object (the dataset row)"),
                    ));
                }
            },
        };
        let answer = match (&item.answer, &item.reference) {
            (Some(_), Some(_)) => {
                return Err((
                    StatusCode::BAD_REQUEST,
                    format!("items[{i}] has both `answer` and `reference`: give one"),
                ));
            }
            (a, r) => a.as_ref().or(r.as_ref()),
        };
        if let Some(raw) = answer {
            let answer = budgeted_value(raw, &mut left, &format!("items[{i}].answer"))?;
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
    Ok(ParsedCalls {
        calls,
        parsed_bytes: MAX_PARSED_BYTES - left,
    })
}

/// `POST /v1/rewards`: every item scored by the named reward at once, answered in order with
/// `scores` and per item `result`s: the score (0.0 when the call faulted), the typed fault
/// (`{"kind": "timeout", "message": ..., ...}`, else null) and the call's accounting (wall
/// time, attempts, fuel, peak memory). Faults never fail the request.
pub(super) async fn rewards(
    State(app): State<Arc<AppState>>,
    caller: Caller,
    body: axum::body::Body,
) -> Response {
    let body = match read_body(body, MAX_BODY_BYTES, app.budget()).await {
        Ok(b) => b,
        Err(r) => return r,
    };
    let cap = rows_cap(&caller, MAX_REWARD_SAMPLES);
    let parsed = parse_json(
        &app,
        body,
        r#"{"reward": "NAME", "items": [{"completion": "...", "answer": ...}, ...]}"#,
        move |request: RewardsRequest| Ok((request.reward, item_calls(request.items, cap)?)),
    )
    .await;
    let (
        named,
        ParsedCalls {
            calls,
            parsed_bytes,
        },
    ) = match parsed {
        Ok(p) => p,
        Err(r) => return r,
    };
    // The parsed rows are held while the calls run: charged to the host budget.
    let _parsed = match reserve_parsed(app.budget(), parsed_bytes, "the request's parsed rows") {
        Ok(r) => r,
        Err(busy) => return busy.into(),
    };
    let (name, catalog) =
        match chosen_reward(&app, &caller, named.clone(), r#""reward": "NAME""#).await {
            Ok(chosen) => chosen,
            Err(r) => return r,
        };
    let label = named.unwrap_or_else(|| name.clone());
    let called = match score_all(&app, &caller, &name, catalog, calls).await {
        Ok(c) => c,
        Err(r) => return r,
    };
    let scores = scores(&called);
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
