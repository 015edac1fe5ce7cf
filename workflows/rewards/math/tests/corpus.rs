//! The `math` reward against AReaL 1.0.4's own `gsm8k_reward_fn` on the recorded corpus
//! (`tests/fixtures/rewards/math_corpus.jsonl`, written by `scripts/fixtures/record_reward_fixtures.py`).

use std::collections::BTreeMap;

#[test]
fn agrees_with_areal_on_the_corpus() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../../tests/fixtures/rewards/math_corpus.jsonl"
    );
    let text = std::fs::read_to_string(path).expect("the corpus");
    let mut by_part: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut by_class: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut misses = Vec::new();
    for line in text.lines() {
        let row: serde_json::Value = serde_json::from_str(line).expect("JSON line");
        let completion = row["completion"].as_str().expect("completion");
        let answer = row["answer"].as_str().expect("answer");
        let want = row["areal"].as_f64().expect("areal");
        let got = rollbox_reward_math::mv::reward(completion, answer);
        let ok = got == want;
        for (map, key) in [(&mut by_part, "part"), (&mut by_class, "class")] {
            let e = map
                .entry(row[key].as_str().unwrap_or("?").to_string())
                .or_default();
            e.0 += usize::from(ok);
            e.1 += 1;
        }
        if !ok {
            misses.push(format!(
                "[{}] want {want} got {got}: {completion:?} vs {answer:?}",
                row["class"].as_str().unwrap_or("?")
            ));
        }
    }
    for (k, (ok, n)) in by_class.iter() {
        println!("{k:<28} {ok}/{n}");
    }
    for m in misses.iter().take(400) {
        println!("{m}");
    }
    let (ok, n) = by_part.values().fold((0, 0), |a, b| (a.0 + b.0, a.1 + b.1));
    println!("overall {ok}/{n}; by part {by_part:?}");
    assert!(misses.is_empty(), "{} of {n} disagree", misses.len());
}
