//! The `code` reward on its hostile suite, through the real boundary (the reward, the host's
//! tools for rewards, python-exec per case): `code_hostile.jsonl` holds programs that attack the
//! sandbox or the grader (`scripts/fixtures/check_code_hostile.py` runs them with each case's
//! result); each must score what an honest grader gives, within its time bound, and an honest
//! call after it must still score 1. Entries marked `known_failure` are the differences
//! `workflows/rewards/code/README.md` documents.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use rollbox_runtime::Runtime;
use rollbox_tests::code_runtime;
use rollbox_tests::components as c;
use serde_json::{Value, json};

fn fixture(name: &str) -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/rewards")
        .join(name);
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

/// The row an entry's reward reads: verl's ground truth and the entry's options.
fn row(entry: &Value) -> Value {
    let mut options = entry["code_reward"].clone();
    if options.is_null() {
        options = json!({});
    }
    if let Some(s) = entry["semantics"].as_str() {
        options["semantics"] = json!(s);
    }
    json!({"reward_model": {"ground_truth": entry["ground_truth"]}, "code_reward": options})
}

/// The score, or `None` when the reward call faulted.
async fn score(rt: &Runtime, completion: &str, row: Value) -> Option<f64> {
    rollbox_tests::score_code(rt, completion, row).await.ok()
}

#[tokio::test(flavor = "multi_thread")]
async fn hostile_programs_score_what_an_honest_grader_gives() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let entries = fixture("code_hostile.jsonl");
    assert!(entries.len() >= 60, "{} entries", entries.len());
    let rt = code_runtime(Duration::from_secs(2));
    let control = "```python\na, b = map(int, input().split())\nprint(a + b)\n```";
    let control_row = json!({"reward_model": {"ground_truth":
        json!({"inputs": ["1 2\n"], "outputs": ["3\n"]}).to_string()}});
    let mut failures = Vec::new();
    for e in &entries {
        if e["known_failure"].is_string() {
            continue;
        }
        let id = e["id"].as_str().expect("id");
        let start = Instant::now();
        let got = score(&rt, e["completion"].as_str().expect("completion"), row(e)).await;
        let took = start.elapsed().as_secs_f64();
        let want = e["score"].as_f64().expect("score");
        let ok = match got {
            Some(g) => (g - want).abs() < 1e-9,
            None => e["fault_ok"] == json!(true) && want == 0.0,
        };
        let bound = e["max_wall_s"].as_f64().unwrap_or(15.0);
        if !ok || took > bound {
            failures.push(format!(
                "{id}: scored {got:?} in {took:.1} s; an honest grader gives {want} within {bound} s"
            ));
        }
        if score(&rt, control, control_row.clone()).await != Some(1.0) {
            failures.push(format!("{id}: the honest call after it did not score 1"));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
