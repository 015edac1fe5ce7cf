//! The `sglang` backend against small in-test servers speaking SGLang's `/generate` protocol.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::http::StatusCode;
use rollbox_engines::sglang::{Routing, SglangBackend, SglangOptions};
use rollbox_engines::{EngineError, GenerateRequest, HttpOptions, InferenceBackend, StopReason};
use serde_json::{Value, json};

type Reply = Pin<Box<dyn Future<Output = (StatusCode, String)> + Send>>;
type Handler = Arc<dyn Fn(Value, usize) -> Reply + Send + Sync>;

/// A fake SGLang server: records request bodies and answers with `handler(body, call_index)`.
struct Fake {
    address: String,
    bodies: Arc<Mutex<Vec<Value>>>,
}

impl Fake {
    async fn start(handler: impl Fn(Value, usize) -> Reply + Send + Sync + 'static) -> Fake {
        let handler: Handler = Arc::new(handler);
        let bodies = Arc::new(Mutex::new(Vec::new()));
        let seen = bodies.clone();
        let app = axum::Router::new().route(
            "/generate",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                let index = {
                    let mut seen = seen.lock().expect("lock");
                    seen.push(body.clone());
                    seen.len() - 1
                };
                let reply = handler(body, index);
                async move {
                    let (status, text) = reply.await;
                    (status, [("content-type", "application/json")], text)
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let address = listener.local_addr().expect("address").to_string();
        tokio::spawn(async move { axum::serve(listener, app).await });
        Fake { address, bodies }
    }

    fn calls(&self) -> usize {
        self.bodies.lock().expect("lock").len()
    }

    fn body(&self, index: usize) -> Value {
        self.bodies.lock().expect("lock")[index].clone()
    }
}

fn ok(value: Value) -> Reply {
    Box::pin(async move { (StatusCode::OK, value.to_string()) })
}

/// A `/generate` answer with these tokens (logprob -0.1 × position) and finish type.
fn answer(tokens: &[u32], finish: &str) -> Value {
    let triples: Vec<Value> = tokens
        .iter()
        .enumerate()
        .map(|(i, t)| json!([-0.1 * (i as f64 + 1.0), t, null]))
        .collect();
    json!({"text": "", "meta_info": {
        "id": "x", "finish_reason": {"type": finish, "message": "Aborted", "status_code": null},
        "prompt_tokens": 2, "completion_tokens": tokens.len(), "output_token_logprobs": triples}})
}

fn fast_http() -> HttpOptions {
    HttpOptions {
        timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(2),
        attempts: 3,
        initial_backoff: Duration::from_millis(5),
        max_backoff: Duration::from_millis(20),
    }
}

fn backend(addresses: &[&str], routing: Routing, version: Arc<AtomicI32>) -> SglangBackend {
    let mut options = SglangOptions::new(addresses.iter().copied());
    options.routing = routing;
    options.http = fast_http();
    options.max_resumes = 3;
    options.resume_backoff = Duration::from_millis(5);
    options.max_resume_backoff = Duration::from_millis(20);
    SglangBackend::new(options, version).expect("valid options")
}

fn request(rid: &str, max_new_tokens: u32) -> GenerateRequest {
    let mut r = GenerateRequest::new(vec![1, 2]);
    r.rid = rid.into();
    r.sampling.max_new_tokens = max_new_tokens;
    r.sampling.stop_token_ids = vec![2];
    r
}

#[tokio::test]
async fn generates_with_areal_request_and_stamps_version() {
    let server = Fake::start(|_, _| ok(answer(&[7, 8, 2], "stop"))).await;
    let b = backend(
        &[&server.address],
        Routing::RoundRobin,
        Arc::new(AtomicI32::new(5)),
    );
    let r = b.generate(request("ep1", 16)).await.expect("generated");
    assert_eq!(r.output_tokens, vec![7, 8, 2]);
    assert_eq!(r.output_logprobs, vec![-0.1, -0.2, -0.3f64 as f32]);
    assert_eq!(r.output_versions, Some(vec![5, 5, 5]));
    assert_eq!(r.stop_reason, StopReason::Stop);
    assert!(r.ttft.is_some());
    let body = server.body(0);
    assert_eq!(body["input_ids"], json!([1, 2]));
    assert_eq!(body["return_logprob"], true);
    assert_eq!(body["sampling_params"]["max_new_tokens"], 16);
    assert_eq!(body["sampling_params"]["stop_token_ids"], json!([2]));
    assert_eq!(body["sampling_params"]["no_stop_trim"], true);
    assert!(body["rid"].as_str().expect("rid sent").starts_with("ep1-"));
}

/// Images go to SGLang's `/generate` as `image_data`, base64 strings in request order, as
/// AReaL's `VisionRLVRWorkflow` sends them.
#[tokio::test]
async fn images_travel_as_image_data() {
    let server = Fake::start(|_, _| ok(answer(&[7, 2], "stop"))).await;
    let b = backend(
        &[&server.address],
        Routing::RoundRobin,
        Arc::new(AtomicI32::new(0)),
    );
    let mut r = request("img", 8);
    r.image_data = vec!["iVBORw0KGgoAAAANSUhEUg==".into(), "/9j/4AAQSkZJRg==".into()];
    b.generate(r).await.expect("generated");
    assert_eq!(
        server.body(0)["image_data"],
        json!(["iVBORw0KGgoAAAANSUhEUg==", "/9j/4AAQSkZJRg=="])
    );
}

#[tokio::test]
async fn resumes_after_abort_with_per_segment_versions() {
    let version = Arc::new(AtomicI32::new(3));
    let bump = version.clone();
    let server = Fake::start(move |body, call| {
        if call == 0 {
            // A weight update lands while the first segment is in flight.
            bump.store(4, Ordering::SeqCst);
            return ok(answer(&[10, 11], "abort"));
        }
        assert_eq!(
            body["input_ids"],
            json!([1, 2, 10, 11]),
            "resent with tokens so far"
        );
        assert_eq!(
            body["sampling_params"]["max_new_tokens"], 6,
            "remaining budget"
        );
        ok(answer(&[12, 2], "stop"))
    })
    .await;
    let b = backend(&[&server.address], Routing::RoundRobin, version);
    let r = b.generate(request("ep", 8)).await.expect("resumed");
    assert_eq!(r.output_tokens, vec![10, 11, 12, 2]);
    assert_eq!(r.output_logprobs.len(), 4);
    assert_eq!(
        r.output_versions,
        Some(vec![3, 3, 4, 4]),
        "tokens carry the version current when their segment was sent"
    );
    assert_eq!(r.stop_reason, StopReason::Stop);
    assert_eq!(server.calls(), 2);
}

#[tokio::test]
async fn abort_at_budget_is_length_and_endless_abort_is_abort() {
    let full = Fake::start(|_, _| ok(answer(&[5, 6], "abort"))).await;
    let b = backend(
        &[&full.address],
        Routing::RoundRobin,
        Arc::new(AtomicI32::new(0)),
    );
    let r = b.generate(request("", 2)).await.expect("answer");
    assert_eq!(r.stop_reason, StopReason::Length);
    assert_eq!(full.calls(), 1);

    let paused = Fake::start(|_, _| ok(answer(&[], "abort"))).await;
    let b = backend(
        &[&paused.address],
        Routing::RoundRobin,
        Arc::new(AtomicI32::new(0)),
    );
    let r = b.generate(request("", 8)).await.expect("answer");
    assert_eq!(r.stop_reason, StopReason::Abort);
    assert!(r.output_tokens.is_empty());
    assert_eq!(paused.calls(), 4, "first try and max_resumes = 3 resends");
}

#[tokio::test]
async fn dead_server_is_unavailable_naming_it() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
    let address = listener.local_addr().expect("address").to_string();
    drop(listener);
    let b = backend(
        &[&address],
        Routing::RoundRobin,
        Arc::new(AtomicI32::new(0)),
    );
    let err = b.generate(request("", 4)).await.expect_err("dead");
    assert!(matches!(err, EngineError::Unavailable { .. }), "{err:?}");
    let text = err.to_string();
    assert!(text.contains(&address), "{text}");
    assert!(text.contains("3 attempt"), "{text}");
    assert!(text.contains("cannot connect"), "{text}");
}

#[tokio::test]
async fn slow_server_times_out() {
    let server = Fake::start(|_, _| {
        Box::pin(async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            (StatusCode::OK, answer(&[1], "stop").to_string())
        })
    })
    .await;
    let mut options = SglangOptions::new([server.address.as_str()]);
    options.http = HttpOptions {
        timeout: Duration::from_millis(200),
        attempts: 2,
        ..fast_http()
    };
    let b = SglangBackend::new(options, Arc::new(AtomicI32::new(0))).expect("valid");
    let err = b.generate(request("", 4)).await.expect_err("timeout");
    assert!(err.to_string().contains("timed out"), "{err}");
    assert_eq!(server.calls(), 2, "timeouts are retried");
}

#[tokio::test]
async fn malformed_and_error_answers_are_clear() {
    let garbage =
        Fake::start(|_, _| Box::pin(async { (StatusCode::OK, "{\"meta_info\": [".into()) })).await;
    let b = backend(
        &[&garbage.address],
        Routing::RoundRobin,
        Arc::new(AtomicI32::new(0)),
    );
    let err = b.generate(request("", 4)).await.expect_err("garbage");
    assert!(err.to_string().contains("malformed JSON"), "{err}");
    assert_eq!(garbage.calls(), 1, "a malformed body is not retried");

    let shape = Fake::start(|_, _| ok(json!({"meta_info": {"output_token_logprobs": []}}))).await;
    let b = backend(
        &[&shape.address],
        Routing::RoundRobin,
        Arc::new(AtomicI32::new(0)),
    );
    let err = b
        .generate(request("", 4))
        .await
        .expect_err("no finish_reason");
    assert!(err.to_string().contains("finish_reason"), "{err}");

    let flaky = Fake::start(|_, call| {
        if call == 0 {
            Box::pin(async { (StatusCode::SERVICE_UNAVAILABLE, "warming up".into()) })
        } else {
            ok(answer(&[9], "stop"))
        }
    })
    .await;
    let b = backend(
        &[&flaky.address],
        Routing::RoundRobin,
        Arc::new(AtomicI32::new(0)),
    );
    let r = b.generate(request("", 4)).await.expect("retried after 503");
    assert_eq!(r.output_tokens, vec![9]);

    let refuse = Fake::start(|_, _| {
        Box::pin(async { (StatusCode::BAD_REQUEST, "{\"error\": \"too long\"}".into()) })
    })
    .await;
    let b = backend(
        &[&refuse.address],
        Routing::RoundRobin,
        Arc::new(AtomicI32::new(0)),
    );
    let err = b.generate(request("", 4)).await.expect_err("400");
    assert!(matches!(err, EngineError::InvalidRequest { .. }), "{err:?}");
    assert!(err.to_string().contains("too long"), "{err}");
    assert_eq!(refuse.calls(), 1, "a 4xx is not retried");
}

#[tokio::test]
async fn same_rid_sticks_to_one_server() {
    let a = Fake::start(|_, _| ok(answer(&[1], "stop"))).await;
    let c = Fake::start(|_, _| ok(answer(&[1], "stop"))).await;
    let b = backend(
        &[&a.address, &c.address],
        Routing::RoundRobin,
        Arc::new(AtomicI32::new(0)),
    );
    for _ in 0..3 {
        b.generate(request("x", 4)).await.expect("x");
        b.generate(request("y", 4)).await.expect("y");
    }
    let rids = |f: &Fake| -> Vec<String> {
        (0..f.calls())
            .map(|i| {
                f.body(i)["rid"]
                    .as_str()
                    .expect("rid")
                    .split('-')
                    .next()
                    .expect("prefix")
                    .to_string()
            })
            .collect()
    };
    assert_eq!(rids(&a), vec!["x"; 3]);
    assert_eq!(rids(&c), vec!["y"; 3]);
}

#[tokio::test]
async fn round_robin_spreads_anonymous_requests() {
    let a = Fake::start(|_, _| ok(answer(&[1], "stop"))).await;
    let c = Fake::start(|_, _| ok(answer(&[1], "stop"))).await;
    let b = backend(
        &[&a.address, &c.address],
        Routing::RoundRobin,
        Arc::new(AtomicI32::new(0)),
    );
    for _ in 0..4 {
        b.generate(request("", 4)).await.expect("generated");
    }
    assert_eq!((a.calls(), c.calls()), (2, 2));
}

#[tokio::test]
async fn least_loaded_avoids_the_busy_server() {
    let gate = Arc::new(tokio::sync::Notify::new());
    let arrived = Arc::new(AtomicUsize::new(0));
    let (g, n) = (gate.clone(), arrived.clone());
    let busy = Fake::start(move |_, _| {
        let (g, n) = (g.clone(), n.clone());
        Box::pin(async move {
            n.fetch_add(1, Ordering::SeqCst);
            g.notified().await;
            (StatusCode::OK, answer(&[1], "stop").to_string())
        })
    })
    .await;
    let idle = Fake::start(|_, _| ok(answer(&[2], "stop"))).await;
    let b = Arc::new(backend(
        &[&busy.address, &idle.address],
        Routing::LeastLoaded,
        Arc::new(AtomicI32::new(0)),
    ));
    let first = tokio::spawn({
        let b = b.clone();
        async move { b.generate(request("", 4)).await }
    });
    for _ in 0..500 {
        if arrived.load(Ordering::SeqCst) == 1 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(
        arrived.load(Ordering::SeqCst),
        1,
        "first request reached the busy server"
    );
    for _ in 0..2 {
        let r = b.generate(request("", 4)).await.expect("generated");
        assert_eq!(r.output_tokens, vec![2], "went to the idle server");
    }
    gate.notify_one();
    let r = first.await.expect("joined").expect("generated");
    assert_eq!(r.output_tokens, vec![1]);
    assert_eq!((busy.calls(), idle.calls()), (1, 2));
}

/// A request dropped while the server works on it (the episode timed out or was cancelled) is
/// aborted on the server with SGLang's `POST /abort_request {"rid"}` (issue 15, class 4).
#[tokio::test]
async fn a_dropped_request_is_aborted_on_the_server() {
    let aborted: Arc<Mutex<Vec<Value>>> = Arc::new(Mutex::new(Vec::new()));
    let seen = aborted.clone();
    let generated: Arc<Mutex<Vec<Value>>> = Arc::new(Mutex::new(Vec::new()));
    let gen_seen = generated.clone();
    let app = axum::Router::new()
        .route(
            "/generate",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                gen_seen.lock().expect("lock").push(body);
                async move {
                    // Decodes "forever".
                    tokio::time::sleep(Duration::from_secs(60)).await;
                    (StatusCode::OK, answer(&[7], "stop").to_string())
                }
            }),
        )
        .route(
            "/abort_request",
            axum::routing::post(move |axum::Json(body): axum::Json<Value>| {
                seen.lock().expect("lock").push(body);
                async { StatusCode::OK }
            }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind loopback");
    let address = listener.local_addr().expect("address").to_string();
    tokio::spawn(async move { axum::serve(listener, app).await });
    let b = backend(
        &[&address],
        Routing::RoundRobin,
        Arc::new(AtomicI32::new(0)),
    );
    let gave_up =
        tokio::time::timeout(Duration::from_millis(300), b.generate(request("ep7", 16))).await;
    assert!(gave_up.is_err(), "the caller gave up");
    let start = std::time::Instant::now();
    loop {
        if let Some(body) = aborted.lock().expect("lock").first() {
            let sent = generated.lock().expect("lock")[0]["rid"].clone();
            assert_eq!(body["rid"], sent, "the abort names the request's rid");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "no abort_request arrived"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        aborted.lock().expect("lock").len(),
        1,
        "one abort per dropped request"
    );
}
