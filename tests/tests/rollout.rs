//! The rollout controller end to end on the `scripted` workflow (rewards, rejections and
//! failures chosen by the row) with a fixed engine: group sizes, concurrency, incomplete
//! groups, normalisation, the filter, bad rows, resume, and batches read back.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rollbox_engines::InferenceBackend;
use rollbox_rollout::dataset::Dataset;
use rollbox_rollout::group::{Filter, Normalization};
use rollbox_rollout::output::OutputDir;
use rollbox_rollout::{Rollout, RolloutOptions, RunScope, SharedEpisodes, Stats};
use rollbox_runtime::WorkflowComponent;
use rollbox_tensor::{Device, TensorData, read_safetensors};
use rollbox_tests::components as c;
use serde_json::{Value, json};

async fn roll(
    rows: &str,
    options: RolloutOptions,
    out: &Path,
    backend: Arc<dyn InferenceBackend>,
) -> Stats {
    roll_for(rows, options, &RunScope::default(), out, backend).await
}

/// [`roll`] for `who` (a tenant's scope and shared episodes).
async fn roll_for(
    rows: &str,
    options: RolloutOptions,
    who: &RunScope,
    out: &Path,
    backend: Arc<dyn InferenceBackend>,
) -> Stats {
    let runtime = Arc::new(rollbox_tests::runtime_with(Some(backend), false));
    let workflow = Arc::new(
        runtime
            .load::<WorkflowComponent>(Path::new(c::SCRIPTED))
            .expect("loads"),
    );
    let dataset = Dataset::from_bytes(rows.as_bytes(), "rows.jsonl");
    let rollout = Rollout {
        runtime,
        workflow,
        tokenizer: None,
        config: serde_json::json!({}),
        limits: Default::default(),
        options,
        provenance: BTreeMap::from([("rollbox_version".to_string(), "test".to_string())]),
    };
    let mut dir = OutputDir::open(out).expect("out dir");
    rollout
        .run_for(who, dataset, &mut dir, &mut |_| {})
        .await
        .expect("run")
}

fn fixed() -> Arc<dyn InferenceBackend> {
    Arc::new(rollbox_tests::fixed_backend(Duration::ZERO))
}

fn lines(out: &Path) -> Vec<Value> {
    std::fs::read_to_string(out.join("trajectories.jsonl"))
        .expect("trajectories.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON line"))
        .collect()
}

fn f32s(v: TensorData) -> Vec<f32> {
    match v {
        TensorData::F32(v) => v,
        other => panic!("f32 expected, got {other:?}"),
    }
}

#[tokio::test]
async fn groups_batches_and_the_concurrency_limit() {
    let tmp = tempfile::tempdir().expect("tmp");
    let rows: String = (0..10)
        .map(|i| json!({"rewards": [i, 0, 1]}).to_string() + "\n")
        .collect();
    let gauge = Arc::new(rollbox_tests::fixed_backend(Duration::from_millis(20)));
    let options = RolloutOptions {
        n_samples: 3,
        max_concurrent: 4,
        batch_size: 4,
        ..RolloutOptions::default()
    };
    let s = roll(&rows, options, tmp.path(), gauge.clone()).await;
    assert_eq!(s.episodes.get("accepted"), Some(&30));
    assert_eq!(s.groups_kept, 10);
    assert_eq!((s.trajectories, s.batches), (30, 3), "4 + 4 + 2 groups");
    let max = gauge.max_in_flight();
    assert!(
        max <= 4,
        "{max} generate calls in flight with --max-concurrent 4"
    );
    assert!(max >= 2, "episodes did run concurrently ({max})");
    // Batches load back with 3 rows per group; rows are whole groups.
    let b0 = read_safetensors(&tmp.path().join("batch-000000.safetensors"), &Device::Cpu)
        .expect("batch 0");
    assert_eq!(b0.get("input_ids").expect("ids").shape(), &[12, 6]);
    let rows0: Vec<usize> = serde_json::from_str(&b0.metadata["rows"]).expect("rows");
    assert_eq!(rows0.len(), 4);
    assert_eq!(b0.metadata["rollbox_version"], "test");
    let l = lines(tmp.path());
    assert_eq!(l.len(), 30);
    let mut seen: Vec<(u64, u64)> = l
        .iter()
        .map(|x| {
            (
                x["row"].as_u64().expect("row"),
                x["sample"].as_u64().expect("s"),
            )
        })
        .collect();
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 30, "every (row, sample) once");
    let stats: Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("stats.json")).expect("stats"),
    )
    .expect("JSON");
    assert_eq!(stats["trajectories"], 30);
}

/// A backend that notes the name of each thread it is asked to generate on (the episode's).
struct NotesThreads {
    inner: Arc<rollbox_engines::testing::FakeBackend>,
    threads: std::sync::Mutex<std::collections::BTreeSet<String>>,
}

#[async_trait::async_trait]
impl InferenceBackend for NotesThreads {
    fn name(&self) -> &'static str {
        "notes-threads"
    }

    async fn generate(
        &self,
        request: rollbox_engines::GenerateRequest,
    ) -> Result<rollbox_engines::GenerateResponse, rollbox_engines::EngineError> {
        let name = std::thread::current().name().unwrap_or("").to_string();
        self.threads.lock().expect("lock").insert(name);
        self.inner.generate(request).await
    }
}

/// Runs that share [`SharedEpisodes`] (a tenant's requests to `rollbox serve`) hold no more
/// episodes in flight together than its slots, whatever each run's own `max_concurrent`, add
/// their episodes' time to it, and run their episodes on its threads.
#[tokio::test]
async fn runs_sharing_episodes_stay_within_the_shared_slots() {
    let (t1, t2) = (
        tempfile::tempdir().expect("tmp"),
        tempfile::tempdir().expect("tmp"),
    );
    let rows: String = (0..6)
        .map(|i| json!({"rewards": [i, 1]}).to_string() + "\n")
        .collect();
    let gauge = Arc::new(rollbox_tests::fixed_backend(Duration::from_millis(20)));
    let noted = Arc::new(NotesThreads {
        inner: gauge.clone(),
        threads: Default::default(),
    });
    let tenant = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("tenant-threads")
        .enable_all()
        .build()
        .expect("runtime");
    let shared = SharedEpisodes {
        in_flight: Arc::new(tokio::sync::Semaphore::new(2)),
        meter: Arc::new(rollbox_rollout::SandboxMeter::default()),
        threads: Some(tenant.handle().clone()),
    };
    let options = RolloutOptions {
        n_samples: 2,
        max_concurrent: 8,
        ..RolloutOptions::default()
    };
    let who = RunScope {
        shared: Some(shared.clone()),
        ..RunScope::default()
    };
    let (a, b) = tokio::join!(
        roll_for(&rows, options.clone(), &who, t1.path(), noted.clone()),
        roll_for(&rows, options, &who, t2.path(), noted.clone()),
    );
    assert_eq!(a.episodes.get("accepted"), Some(&12));
    assert_eq!(b.episodes.get("accepted"), Some(&12));
    let max = gauge.max_in_flight();
    assert_eq!(max, 2, "two runs of 8 each, sharing 2 slots");
    // 24 episodes, each waiting 20 ms for its generation.
    let used = shared.meter.used();
    assert!(used >= Duration::from_millis(24 * 20), "{used:?}");
    assert_eq!(
        shared.in_flight.available_permits(),
        2,
        "every slot came back"
    );
    let threads = noted.threads.lock().expect("lock").clone();
    assert_eq!(
        threads,
        std::collections::BTreeSet::from(["tenant-threads".to_string()]),
        "every episode ran on the shared threads"
    );
    tenant.shutdown_background();
}

#[tokio::test]
async fn incomplete_groups_are_kept_with_their_size_or_dropped() {
    let rows = concat!(
        r#"{"rewards": [1, 0, 1], "reject": [1]}"#,
        "\n",
        r#"{"rewards": [1, 1, 0], "fail": [0]}"#,
        "\n",
        r#"{"rewards": [0, 1, 0]}"#,
        "\n",
        r#"{"rewards": [0, 0, 0], "reject": [0, 1, 2]}"#,
        "\n",
        "not json\n",
    );
    let keep = tempfile::tempdir().expect("tmp");
    let options = RolloutOptions {
        n_samples: 3,
        batch_size: 8,
        ..RolloutOptions::default()
    };
    let s = roll(rows, options.clone(), keep.path(), fixed()).await;
    assert_eq!(s.episodes.get("accepted"), Some(&7));
    assert_eq!(s.episodes.get("rejected"), Some(&4));
    assert_eq!(s.episodes.get("guest_error"), Some(&1), "{:?}", s.episodes);
    assert_eq!(s.groups_kept, 3);
    assert_eq!(s.groups_dropped.get("no_accepted_episodes"), Some(&1));
    assert_eq!((s.bad_rows.len(), s.bad_rows_total), (1, 1));
    assert_eq!(s.bad_rows[0].line, 5);
    let l = lines(keep.path());
    let row0: Vec<&Value> = l.iter().filter(|x| x["row"] == 0).collect();
    assert_eq!(row0.len(), 2);
    assert!(
        row0.iter()
            .all(|x| x["group_size"] == 3 && x["accepted_in_group"] == 2)
    );

    let drop = tempfile::tempdir().expect("tmp");
    let s = roll(
        rows,
        RolloutOptions {
            drop_incomplete_groups: true,
            ..options
        },
        drop.path(),
        fixed(),
    )
    .await;
    assert_eq!(s.groups_kept, 1);
    assert_eq!(s.groups_dropped.get("incomplete"), Some(&2));
    assert!(lines(drop.path()).iter().all(|x| x["row"] == 2));
    // Dropped rows are recorded with their reasons (and the first episode error behind it),
    // and a re-run counts them as done.
    let dropped: Vec<Value> = std::fs::read_to_string(drop.path().join("dropped-rows.jsonl"))
        .expect("dropped-rows.jsonl")
        .lines()
        .map(|l| serde_json::from_str(l).expect("json line"))
        .collect();
    let mut reasons: Vec<(u64, &str)> = dropped
        .iter()
        .map(|d| {
            (
                d["row"].as_u64().expect("row"),
                d["reason"].as_str().expect("reason"),
            )
        })
        .collect();
    reasons.sort();
    let row1 = dropped
        .iter()
        .find(|d| d["row"] == 1)
        .expect("row 1 dropped");
    let error = row1["error"].as_str().unwrap_or_default();
    assert!(
        error.starts_with("guest_error: ") && error.contains("scripted failure of sample 0"),
        "{row1}"
    );
    assert!(dropped.iter().find(|d| d["row"] == 0).expect("row 0")["error"].is_null());
    assert_eq!(
        reasons,
        vec![
            (0, "incomplete"),
            (1, "incomplete"),
            (3, "no_accepted_episodes")
        ]
    );
    let reopened = OutputDir::open(drop.path()).expect("reopen");
    assert_eq!(
        reopened.done_rows.iter().collect::<Vec<_>>(),
        vec![0, 1, 2, 3]
    );
}

#[tokio::test]
async fn normalisation_and_the_non_constant_filter() {
    let tmp = tempfile::tempdir().expect("tmp");
    let rows = concat!(
        r#"{"rewards": [1, 0, 0, 1]}"#,
        "\n",
        r#"{"rewards": [1, 1, 1, 1]}"#,
        "\n",
    );
    let s = roll(
        rows,
        RolloutOptions {
            n_samples: 4,
            batch_size: 4,
            normalize: Some(Normalization::ZScore),
            filter: Some(Filter::NonConstant),
            ..RolloutOptions::default()
        },
        tmp.path(),
        fixed(),
    )
    .await;
    assert_eq!(s.groups_kept, 1);
    assert_eq!(s.groups_dropped.get("filtered"), Some(&1));
    let b = read_safetensors(&tmp.path().join("batch-000000.safetensors"), &Device::Cpu)
        .expect("batch");
    let raw = f32s(
        b.get("original_rewards")
            .expect("raw kept")
            .data()
            .expect("data"),
    );
    let z = f32s(b.get("rewards").expect("rewards").data().expect("data"));
    assert_eq!(raw, vec![1.0, 0.0, 0.0, 1.0]);
    // mean 0.5, unbiased std 0.57735: ±0.866.
    for (got, want) in z
        .iter()
        .zip([0.866_025f32, -0.866_025, -0.866_025, 0.866_025])
    {
        assert!((got - want).abs() < 1e-4, "{z:?}");
    }
    assert!(
        lines(tmp.path())
            .iter()
            .all(|x| x["raw_reward"] == 1.0 || x["raw_reward"] == 0.0)
    );
}

#[tokio::test]
async fn a_rerun_resumes_without_duplicating_rows() {
    let tmp = tempfile::tempdir().expect("tmp");
    let rows: String = (0..9)
        .map(|i| json!({"rewards": [i, i]}).to_string() + "\n")
        .collect();
    let options = RolloutOptions {
        n_samples: 2,
        batch_size: 2,
        ..RolloutOptions::default()
    };
    let first = roll(
        &rows,
        RolloutOptions {
            max_rows: Some(5),
            ..options.clone()
        },
        tmp.path(),
        fixed(),
    )
    .await;
    assert_eq!((first.rows_run, first.batches), (5, 3));
    // A write a killed run left behind is cleaned up, a torn trajectories line is rebuilt.
    std::fs::write(
        tmp.path().join(".batch-000003.safetensors.tmp-1"),
        b"partial",
    )
    .expect("tmp file");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(tmp.path().join("trajectories.jsonl"))
        .expect("open");
    std::io::Write::write_all(&mut f, b"{\"row\": 99, \"torn").expect("write");
    let second = roll(&rows, options, tmp.path(), fixed()).await;
    assert_eq!((second.rows_already_done, second.rows_run), (5, 4));
    assert!(!tmp.path().join(".batch-000003.safetensors.tmp-1").exists());
    let l = lines(tmp.path());
    let mut rows_seen: Vec<u64> = l.iter().map(|x| x["row"].as_u64().expect("row")).collect();
    rows_seen.sort();
    assert_eq!(rows_seen, (0..9).flat_map(|r| [r, r]).collect::<Vec<u64>>());
    let batches = std::fs::read_dir(tmp.path())
        .expect("dir")
        .filter(|e| {
            e.as_ref()
                .expect("e")
                .file_name()
                .to_string_lossy()
                .ends_with(".safetensors")
        })
        .count();
    assert_eq!(batches, 5);
}

/// Groups that cannot be assembled (issue 15, class 7): a non-standard key whose dtype differs
/// between the samples of a group, and a group whose padded size is absurd (4 TiB of zeros
/// named by zero-element tensors), are dropped with their reasons; every other group is
/// written and the run goes on (a batch holding the absurd group is split around it).
#[tokio::test]
async fn groups_that_cannot_be_assembled_are_dropped_and_the_run_goes_on() {
    let tmp = tempfile::tempdir().expect("tmp");
    let ok = json!({"dtype": "i32", "shape": [1, 1, 1]});
    let rows: String = (0..6)
        .map(|i| {
            let extra = match i {
                1 => json!([ok, {"dtype": "f32", "shape": [1, 1, 1]}]),
                2 => json!([
                    {"dtype": "i32", "shape": [1, 1 << 20, 0]},
                    {"dtype": "i32", "shape": [1, 0, 1 << 19]}
                ]),
                _ => json!([ok, ok]),
            };
            json!({"rewards": [1, 0], "extra": extra}).to_string() + "\n"
        })
        .collect();
    let options = RolloutOptions {
        n_samples: 2,
        max_concurrent: 4,
        batch_size: 3,
        ..RolloutOptions::default()
    };
    let s = roll(&rows, options.clone(), tmp.path(), fixed()).await;
    assert_eq!(s.groups_kept, 4, "{s:?}");
    assert_eq!(s.groups_dropped.get("schema_mismatch"), Some(&1), "{s:?}");
    assert_eq!(s.groups_dropped.get("too_large"), Some(&1), "{s:?}");
    assert_eq!(s.trajectories, 8);
    let dropped: Vec<Value> = std::fs::read_to_string(tmp.path().join("dropped-rows.jsonl"))
        .expect("dropped rows")
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    let mut reasons: Vec<(u64, String)> = dropped
        .iter()
        .map(|d| {
            (
                d["row"].as_u64().expect("row"),
                d["reason"].as_str().expect("r").into(),
            )
        })
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        vec![(1, "schema_mismatch".into()), (2, "too_large".into())]
    );
    // Every batch loads; together they hold rows 0, 3, 4, 5 once each.
    let mut rows_written = Vec::new();
    for entry in std::fs::read_dir(tmp.path()).expect("out dir") {
        let path = entry.expect("entry").path();
        if path.extension().is_some_and(|e| e == "safetensors") {
            let b = read_safetensors(&path, &Device::Cpu).expect("batch loads");
            let rows: Vec<usize> = serde_json::from_str(&b.metadata["rows"]).expect("rows");
            rows_written.extend(rows);
        }
    }
    rows_written.sort();
    assert_eq!(rows_written, vec![0, 3, 4, 5]);
    // A re-run finds every row done.
    let again = roll(&rows, options, tmp.path(), fixed()).await;
    assert_eq!(again.rows_already_done, 6);
    assert_eq!(again.rows_run, 0);
}

/// `trajectories.jsonl` lists the trajectories in batch order (what a resume rebuilds it to):
/// a batch's write starts only once the one before it is on disk. With several writes in
/// flight, lines of a later batch were appended first (found by `scripts/stress/storm.sh`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trajectories_follow_the_batch_order() {
    let tmp = tempfile::tempdir().expect("tmp");
    let rows: String = (0..60)
        .map(|i| json!({"rewards": [i % 2, 1]}).to_string() + "\n")
        .collect();
    let options = RolloutOptions {
        n_samples: 2,
        max_concurrent: 16,
        batch_size: 1,
        ..RolloutOptions::default()
    };
    let s = roll(&rows, options, tmp.path(), fixed()).await;
    assert_eq!(s.batches, 60);
    let mut from_batches = Vec::new();
    for b in 0..s.batches {
        let path = tmp.path().join(format!("batch-{b:06}.safetensors"));
        let f = read_safetensors(&path, &Device::Cpu).expect("batch");
        let lines: Vec<Value> = serde_json::from_str(&f.metadata["trajectories"]).expect("JSON");
        from_batches.extend(lines);
    }
    assert_eq!(lines(tmp.path()), from_batches);
    // A resume with nothing to do rebuilds trajectories.jsonl from the headers byte for byte
    // (parsing and printing the lines again changed floats' last digits).
    let before = std::fs::read(tmp.path().join("trajectories.jsonl")).expect("jsonl");
    OutputDir::open(tmp.path()).expect("reopened");
    let after = std::fs::read(tmp.path().join("trajectories.jsonl")).expect("jsonl");
    assert!(before == after, "a no-op resume changed trajectories.jsonl");
}

/// The workflow's metadata reaches `trajectories.jsonl` and the batch header, as it returned it
/// (issue 16, part 2).
#[tokio::test]
async fn workflow_metadata_is_written_with_each_trajectory() {
    let tmp = tempfile::tempdir().expect("tmp");
    let rows = concat!(
        r#"{"rewards": [1, 0], "note": "first row, 1.50 and \"quotes\""}"#,
        "\n",
        r#"{"rewards": [0, 1], "note": [1, {"nested": true}]}"#,
        "\n"
    );
    let options = RolloutOptions {
        n_samples: 2,
        batch_size: 2,
        ..RolloutOptions::default()
    };
    roll(rows, options, tmp.path(), fixed()).await;
    let l = lines(tmp.path());
    assert_eq!(l.len(), 4);
    for x in &l {
        let sample = x["sample"].as_u64().expect("sample");
        assert_eq!(x["metadata"]["sample"], sample);
        let note = if x["row"] == 0 {
            json!("first row, 1.50 and \"quotes\"")
        } else {
            json!([1, {"nested": true}])
        };
        assert_eq!(x["metadata"]["note"], note);
    }
    let b = read_safetensors(&tmp.path().join("batch-000000.safetensors"), &Device::Cpu)
        .expect("batch");
    let header: Vec<Value> = serde_json::from_str(&b.metadata["trajectories"]).expect("JSON");
    assert_eq!(header, l, "the header holds the same lines");
}

/// Forwards to a backend after a delay that varies per request, so requests reach it in an
/// order unrelated to their samples'.
struct Shuffled(Arc<dyn InferenceBackend>);

#[async_trait::async_trait]
impl InferenceBackend for Shuffled {
    fn name(&self) -> &'static str {
        "shuffled"
    }

    async fn generate(
        &self,
        request: rollbox_engines::GenerateRequest,
    ) -> Result<rollbox_engines::GenerateResponse, rollbox_engines::EngineError> {
        let key = request
            .origin
            .as_ref()
            .map_or(0, |o| o.episode.bytes().map(u64::from).sum::<u64>());
        tokio::time::sleep(Duration::from_millis(key * 7 % 13)).await;
        self.0.generate(request).await
    }
}

/// Replay reproduces per sample (issue 31): each sample of a group gets the answer recorded
/// for it whatever order the requests arrive in, so 32 episodes in flight give the batch that
/// one at a time gives.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_gives_each_sample_its_answer_at_any_concurrency() {
    let answers: String = (1..=4)
        .map(|n| {
            json!({"input_ids": [1, 2, 3], "output_tokens": vec![7; n], "output_logprobs": vec![-0.5; n]})
                .to_string()
                + "\n"
        })
        .collect();
    let replay: Arc<dyn InferenceBackend> = Arc::new(
        rollbox_engines::replay::ReplayBackend::from_jsonl_str(&answers).expect("answers"),
    );
    let rows: String = (0..8)
        .map(|_| json!({"rewards": [0, 1, 0, 1]}).to_string() + "\n")
        .collect();
    let mut runs = Vec::new();
    for max_concurrent in [1, 32] {
        let tmp = tempfile::tempdir().expect("tmp");
        let options = RolloutOptions {
            n_samples: 4,
            max_concurrent,
            batch_size: 8,
            ..RolloutOptions::default()
        };
        let backend = Arc::new(Shuffled(replay.clone()));
        let s = roll(&rows, options, tmp.path(), backend).await;
        assert_eq!(s.episodes.get("accepted"), Some(&32));
        let mut got: Vec<(u64, u64, u64)> = lines(tmp.path())
            .iter()
            .map(|l| {
                let n = |k: &str| l[k].as_u64().expect(k);
                (n("row"), n("sample"), n("completion_tokens"))
            })
            .collect();
        got.sort();
        runs.push(got);
    }
    assert_eq!(runs[0], runs[1]);
    // Sample s got recording s (s + 1 tokens), in every row.
    assert!(runs[0].iter().all(|&(_, s, n)| n == s + 1), "{:?}", runs[0]);
}
