//! The `code` reward on programs nobody on the project wrote (issue 53), through the real
//! boundary: `code_real_corpus.jsonl` holds (completion, tests) pairs over public problems
//! (HumanEval, MBPP, APPS, AtCoder; `scripts/fixtures/build_code_real_problems.py` records each
//! one's source) with the scores verl 0.9.1 gave them on both of its routes
//! (`scripts/fixtures/record_code_real.py`): its local `prime_code` harness, and its
//! SandboxFusion scorer against a real CPython process (`scripts/fixtures/sandbox_standin.py`).
//! Each route's share of equal scores must reach [`GOAL`], over the pairs whose score does not
//! depend on time: a pair on which verl itself spent more than a case's limit
//! ([`VERL_TIMED_S`]) got a score that depends on how fast its machine ran (its first pass
//! gives a row 6 s in all, a case 5 s, then 10 s), so it is listed, not counted.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rollbox_tests::code_runtime;
use rollbox_tests::components as c;
use serde_json::{Value, json};

/// The share of pairs whose score must equal verl's, per route.
const GOAL: f64 = 0.995;

/// verl's time on a pair past which its score depends on its timeouts.
const VERL_TIMED_S: f64 = 10.0;

/// A case's timeout here: the one `rollbox.verl` gives (and verl's per-case pass).
const CASE_TIMEOUT: Duration = Duration::from_secs(10);

fn corpus() -> Vec<Value> {
    let path =
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/rewards/code_real_corpus.jsonl");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn real_programs_score_as_verl_on_both_routes() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let entries = corpus();
    assert!(entries.len() >= 1000, "{} pairs", entries.len());
    let problems: std::collections::BTreeSet<&str> = entries
        .iter()
        .filter_map(|e| e["problem"].as_str())
        .collect();
    assert!(problems.len() >= 150, "{} problems", problems.len());
    let rt = Arc::new(code_runtime(CASE_TIMEOUT));
    let timed = |e: &Value| e["verl_prime_code_s"].as_f64().unwrap_or(0.0) > VERL_TIMED_S;
    let mut failures = Vec::new();
    for (route, key) in [
        ("prime_code", "verl_prime_code"),
        ("sandbox_fusion", "verl_sandbox_fusion"),
    ] {
        let mut set = tokio::task::JoinSet::new();
        // Timed pairs are listed, not run: their score is not compared (and their programs
        // run for minutes).
        for (i, e) in entries
            .iter()
            .cloned()
            .enumerate()
            .filter(|(_, e)| !timed(e))
        {
            let rt = rt.clone();
            set.spawn(async move {
                let row = json!({"reward_model": {"ground_truth": e["ground_truth"]},
                                 "code_reward": {"semantics": route}});
                let completion = e["completion"].as_str().expect("completion");
                (
                    i,
                    rollbox_tests::score_code(&rt, completion, row).await.ok(),
                )
            });
        }
        let mut got = vec![None; entries.len()];
        while let Some(j) = set.join_next().await {
            let (i, s) = j.expect("joined");
            got[i] = s;
        }
        let mut differ = Vec::new();
        let mut timed_pairs = Vec::new();
        let mut counted = 0;
        for (e, g) in entries.iter().zip(&got) {
            let verl = e[key].as_f64().expect("verl's score");
            let line = format!(
                "{} ({}): verl {verl}, rollbox {}",
                e["id"].as_str().unwrap_or("?"),
                e["family"].as_str().unwrap_or("?"),
                if timed(e) {
                    "not run".to_string()
                } else {
                    format!("{g:?}")
                }
            );
            if timed(e) {
                timed_pairs.push(line);
                continue;
            }
            counted += 1;
            if !g.is_some_and(|g| (g - verl).abs() < 1e-9) {
                differ.push(line);
            }
        }
        let equal = counted - differ.len();
        let share = equal as f64 / counted as f64;
        println!(
            "{route}: {equal}/{counted} equal ({:.2} %)\n  {}\n{} pairs timed in verl, not counted:\n  {}",
            100.0 * share,
            differ.join("\n  "),
            timed_pairs.len(),
            timed_pairs.join("\n  ")
        );
        if share < GOAL {
            failures.push(format!(
                "{route}: {equal}/{counted} equal, under {:.1} %:\n  {}",
                100.0 * GOAL,
                differ.join("\n  ")
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
