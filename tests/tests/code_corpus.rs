//! The `code` reward on its parity corpus, through the real boundary (the reward, the host's
//! tools for rewards, python-exec per case): `code_corpus.jsonl` holds completions and test
//! cases scored by verl 0.9.1's own `default_compute_score` (`prime_code`;
//! `scripts/fixtures/record_code_corpus.py`). Every entry must score what verl gave, but for the
//! classes [`STILL_DIFFER`] (`workflows/rewards/code/README.md`, "Where it differs"): the
//! corpus's other classes are differences of verl's harness that `prime_code` reproduces.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use rollbox_tests::code_runtime;
use rollbox_tests::components as c;
use serde_json::{Value, json};

/// The corpus's classes where rollbox's `prime_code` still scores otherwise than verl: state
/// shared between cases in verl's first pass, numpy, and Python 3.12+ syntax (python-exec runs
/// CPython 3.14, verl's venv 3.11).
const STILL_DIFFER: &[&str] = &["module_state", "numpy", "python_version"];

fn corpus() -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/rewards/code_corpus.jsonl");
    std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}", path.display()))
        .lines()
        .map(|l| serde_json::from_str(l).expect("a JSON line"))
        .collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn the_corpus_scores_as_verls_prime_code_but_for_the_classes_that_still_differ() {
    if !rollbox_tests::built(c::PYTHON_EXEC_TOOL) {
        return;
    }
    let entries = corpus();
    assert!(entries.len() >= 1500, "{} entries", entries.len());
    let rt = Arc::new(code_runtime(Duration::from_secs(2)));
    let mut set = tokio::task::JoinSet::new();
    for (i, e) in entries.iter().cloned().enumerate() {
        let rt = rt.clone();
        set.spawn(async move {
            let row = json!({"reward_model": {"ground_truth": e["ground_truth"]}});
            let got =
                rollbox_tests::score_code(&rt, e["completion"].as_str().expect("completion"), row)
                    .await
                    .ok();
            (i, got)
        });
    }
    let mut got = vec![None; entries.len()];
    while let Some(j) = set.join_next().await {
        let (i, s) = j.expect("joined");
        got[i] = s;
    }
    let mut per_class: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut wrong = Vec::new();
    for (e, g) in entries.iter().zip(&got) {
        let verl = e["verl"].as_f64().expect("verl's score");
        let agree = g.is_some_and(|g| (g - verl).abs() < 1e-9);
        let class = e["class"].as_str().unwrap_or("").to_string();
        let t = per_class.entry(class.clone()).or_default();
        t.0 += 1;
        t.1 += usize::from(agree);
        if !STILL_DIFFER.contains(&class.as_str()) && !agree {
            wrong.push(format!(
                "{} ({}): verl {verl}, rollbox {g:?}",
                e["id"], e["family"]
            ));
        }
    }
    for (class, (n, agree)) in &per_class {
        let name = if class.is_empty() { "(none)" } else { class };
        println!(
            "class {name:<28} {n:>5} entries ({:.1} %), agree {agree}",
            100.0 * *n as f64 / entries.len() as f64
        );
    }
    assert!(
        wrong.is_empty(),
        "{} of the entries outside the classes that still differ disagree:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}
