//! The reference answer of a dataset row, as the row ships it: GSM8K's `answer` (the whole
//! solution, `#### n` at its end), MATH's `solution` (with a `\boxed{}`), a bare value, or
//! verl's `reward_model.ground_truth`. The text is passed on whole, as AReaL passes `answer`
//! to math-verify, which finds the value in it.

/// Keys looked up, in order (`a.b`: `b` inside the object `a`).
pub const REFERENCE_KEYS: &[&str] = &[
    "answer",
    "solution",
    "reward_model.ground_truth",
    "ground_truth",
    "final_answer",
    "gold",
];

/// The fields of a row that can hold its reference; the rest of the row (its messages, ...)
/// is skipped while reading, not built.
#[derive(Debug, Default, serde::Deserialize)]
struct Fields {
    answer: Option<serde_json::Value>,
    solution: Option<serde_json::Value>,
    reward_model: Option<serde_json::Value>,
    ground_truth: Option<serde_json::Value>,
    final_answer: Option<serde_json::Value>,
    gold: Option<serde_json::Value>,
}

/// The reference text of a row given as JSON text; `None` when no key holds a string or a
/// number (or the row is not a JSON object).
pub fn reference_text(row: &str) -> Option<String> {
    if !row.trim_start().starts_with('{') {
        return None;
    }
    let f: Fields = serde_json::from_str(row).ok()?;
    let ground_truth = f.reward_model.as_ref().and_then(|m| m.get("ground_truth"));
    // In REFERENCE_KEYS order.
    [
        f.answer.as_ref(),
        f.solution.as_ref(),
        ground_truth,
        f.ground_truth.as_ref(),
        f.final_answer.as_ref(),
        f.gold.as_ref(),
    ]
    .into_iter()
    .flatten()
    .find_map(text_of)
}

fn text_of(v: &serde_json::Value) -> Option<String> {
    match v {
        serde_json::Value::String(s) => Some(s.clone()),
        serde_json::Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// [`reference_text`] of a parsed row.
pub fn reference_of(row: &serde_json::Value) -> Option<String> {
    REFERENCE_KEYS
        .iter()
        .find_map(|key| text_of(key.split('.').try_fold(row, |v, part| v.get(part))?))
}
