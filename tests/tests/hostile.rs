//! Issue 15's reproductions, each through the real guest boundary with the `adv_host_calls`
//! component: tensor shapes and sizes checked before any allocation, generate-many within the
//! episode's token budget, reserved and invalid tensor names refused, and a long word encoded
//! in time. After each, the host serves a normal episode.

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rollbox_engines::testing::FakeBackend;
use rollbox_runtime::{
    EpisodeOutcome, EpisodeReport, EpisodeRequest, GuestFault, Limits, Runtime, RuntimeConfig,
    Scope, Services, WorkflowComponent,
};
use rollbox_tests::components as c;
use rollbox_tests::test_cache_dir;
use rollbox_tokenizer::HostTokenizer;
use serde_json::{Value, json};

fn runtime(tokenizer: bool) -> Runtime {
    let mut services = Services::new().with_backend(Arc::new(FakeBackend::filling(5, -0.5)));
    if tokenizer {
        let tok = HostTokenizer::load(&rollbox_tests::model_path()).expect("tokenizer loads");
        services = services.with_tokenizer(Arc::new(tok));
    }
    Runtime::new(
        RuntimeConfig {
            cache_dir: Some(test_cache_dir()),
            max_instances: 16,
            ..RuntimeConfig::default()
        },
        services,
    )
    .expect("runtime")
}

async fn attack(rt: &Runtime, data: Value, limits: Limits) -> EpisodeReport {
    let w = rt
        .load::<WorkflowComponent>(Path::new(c::ADV_HOST_CALLS))
        .expect("loads");
    rt.run_episode(
        &Scope::default(),
        &w,
        EpisodeRequest::new("r0-s0", data),
        Arc::new(limits),
    )
    .await
}

/// The message of a `guest_error` failure (what the attack reported).
fn reported(r: &EpisodeReport) -> String {
    match &r.outcome {
        EpisodeOutcome::Failed(GuestFault::GuestError { message }) => message.clone(),
        other => panic!(
            "expected the attack's report, got {} (stderr: {})",
            other.kind(),
            r.stderr
        ),
    }
}

/// The host still serves a normal episode (answered by a filling fake backend: 16384 tokens of id 5).
async fn assert_serves_next(rt: &Runtime) {
    let ids = rollbox_tests::echo_input_ids(rt).await;
    assert!(
        ids.starts_with(&[1, 2, 3, 5]),
        "{:?}",
        &ids[..8.min(ids.len())]
    );
}

/// Class 2: sizes, products and ranks are checked before anything is allocated.
#[tokio::test]
async fn tensor_sizes_are_checked_before_allocation() {
    let rt = runtime(false);
    // 1 TiB of padding planned from a zero-element tensor: a limit value, nothing allocated.
    let m = reported(&attack(&rt, json!({"attack": "padded_huge"}), Limits::default()).await);
    assert!(m.contains("concat-padded: Error::LimitExceeded"), "{m}");
    assert!(m.contains("over the"), "{m}");
    // Dimensions whose product overflows: refused at creation (was a capacity-overflow panic).
    let m = reported(&attack(&rt, json!({"attack": "dims_overflow"}), Limits::default()).await);
    assert!(
        m.contains("InvalidArgument") && m.contains("product of its dimensions"),
        "{m}"
    );
    // 200 and 9,000 borrows of one 16 MiB tensor: the sum is refused before any copy.
    for n in [200, 9000] {
        let r = attack(
            &rt,
            json!({"attack": "many_borrows", "n": n}),
            Limits::default(),
        )
        .await;
        let m = reported(&r);
        assert!(m.contains("concat: Error::LimitExceeded"), "{n}: {m}");
        assert!(
            r.peak_memory_bytes < 64 << 20,
            "the guest itself stayed small"
        );
    }
    // Rank 100,000 (overflowed the fiber stack in the padding code): refused; rank 16 works.
    let m = reported(&attack(&rt, json!({"attack": "deep_rank"}), Limits::default()).await);
    assert!(m.contains("at most 16 are allowed"), "{m}");
    assert!(
        m.contains("padded rank 16: Ok([2, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2])"),
        "{m}"
    );
    assert_serves_next(&rt).await;
}

/// Class 5: the requests of one generate-many share the episode's token budget.
#[tokio::test]
async fn generate_many_stays_within_the_token_budget() {
    let rt = runtime(false);
    let limits = Limits {
        max_episode_tokens: 10,
        ..Limits::default()
    };
    let r = attack(
        &rt,
        json!({"attack": "generate_many", "n": 4, "max_new": 16}),
        limits,
    )
    .await;
    let m = reported(&r);
    assert_eq!(m, "generated 10 tokens, 3 errors");
    assert_eq!(r.generated_tokens, 10);
    // Within budget: every request gets its tokens.
    let r = attack(
        &rt,
        json!({"attack": "generate_many", "n": 4, "max_new": 2}),
        Limits {
            max_episode_tokens: 10,
            ..Limits::default()
        },
    )
    .await;
    assert_eq!(reported(&r), "generated 8 tokens, 0 errors");
    assert_serves_next(&rt).await;
}

/// Class 6: tensor names that would break the batch file are refused at the boundary, and so
/// is metadata over its size limit (it is written with every trajectory line).
#[tokio::test]
async fn reserved_and_invalid_tensor_names_are_refused() {
    let rt = runtime(false);
    let long = "k".repeat(129);
    for (data, expect) in [
        (json!({"attack": "reserved_key"}), "safetensors reserves"),
        (json!({"attack": "bad_key", "key": "a b"}), "contains ' '"),
        (
            json!({"attack": "bad_key", "key": long}),
            "is 129 bytes long",
        ),
        (json!({"attack": "bad_key", "key": "é"}), "contains 'é'"),
        (json!({"attack": "big_metadata"}), "at most 65536"),
    ] {
        let r = attack(&rt, data, Limits::default()).await;
        match &r.outcome {
            EpisodeOutcome::Failed(GuestFault::InvalidOutput { message }) => {
                assert!(message.contains(expect), "{message}")
            }
            other => panic!("invalid_output expected, got {}", other.kind()),
        }
    }
    assert_serves_next(&rt).await;
}

/// Class 3: one long word is encoded in near-linear time (was quadratic: 30 s for 100,000
/// letters under a 2 s timeout). The merge order is the same as before (unit tests in
/// `rollbox-tokenizer` compare both algorithms and the `tokenizers` crate).
#[tokio::test]
async fn a_long_word_is_encoded_within_the_timeout() {
    let rt = runtime(true);
    // Quadratic merging took ~120 s for this word; the limit leaves room for a loaded CI
    // machine and this crate's unoptimised test build (~0.5 s here).
    let limits = Limits {
        timeout: Duration::from_secs(5),
        ..Limits::default()
    };
    let start = Instant::now();
    let r = attack(&rt, json!({"attack": "long_word", "n": 200_000}), limits).await;
    let m = reported(&r);
    assert!(m.starts_with("encode: ok"), "{m}");
    eprintln!("a 200,000-letter word: {:?}", start.elapsed());
    // Quadratic work on the word takes minutes; the bound leaves room for any load.
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
    assert_serves_next(&rt).await;
}

/// Guests' random numbers come from a generator seeded with the episode's seed: the same
/// episode sees the same numbers on a re-run, another seed other numbers.
#[tokio::test]
async fn guest_random_numbers_follow_the_episode_seed() {
    let rt = runtime(false);
    let w = rt
        .load::<WorkflowComponent>(Path::new(c::ADV_HOST_CALLS))
        .expect("loads");
    let mut seen = Vec::new();
    for seed in [7, 7, 8] {
        let mut request = EpisodeRequest::new("r0-s0", json!({"attack": "random"}));
        request.seed = seed;
        let r = rt
            .run_episode(&Scope::default(), &w, request, Arc::new(Limits::default()))
            .await;
        seen.push(reported(&r));
    }
    assert_eq!(seen[0], seen[1], "same seed, same numbers");
    assert_ne!(seen[0], seen[2], "another seed, other numbers");
}
