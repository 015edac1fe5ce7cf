//! Finding the final answer in a completion and the reference answer in a row.

/// The reference answer of a dataset row: `answer` (GSM8K's `#### n` suffix taken), else
/// `solution` (its last `\boxed{}` when it has one), else `gold`.
pub fn reference_answer(row: &serde_json::Value) -> Option<String> {
    reference_from(&ReferenceFields {
        answer: row.get("answer").cloned(),
        solution: row.get("solution").cloned(),
        gold: row.get("gold").cloned(),
    })
}

/// The fields of a row that can hold its reference answer; a row is read into this directly
/// (the rest of the row, e.g. its messages, is skipped without being built).
#[derive(Debug, Default, serde::Deserialize)]
pub struct ReferenceFields {
    answer: Option<serde_json::Value>,
    solution: Option<serde_json::Value>,
    gold: Option<serde_json::Value>,
}

impl ReferenceFields {
    /// The fields of a row given as JSON text (all absent when it is not a JSON object).
    pub fn parse(row: &str) -> Self {
        if !row.trim_start().starts_with('{') {
            return ReferenceFields::default();
        }
        serde_json::from_str(row).unwrap_or_default()
    }
}

/// [`reference_answer`] of a row's fields.
pub fn reference_from(fields: &ReferenceFields) -> Option<String> {
    for value in [&fields.answer, &fields.solution, &fields.gold] {
        let text = match value {
            Some(serde_json::Value::String(s)) => s.clone(),
            Some(serde_json::Value::Number(n)) => n.to_string(),
            _ => continue,
        };
        if let Some(after) = text.rsplit_once("####") {
            return Some(after.1.trim().to_string());
        }
        if let Some(b) = last_boxed(&text) {
            return Some(b);
        }
        return Some(text.trim().to_string());
    }
    None
}

/// The final answer in a completion, or `None` when there is nothing answer-like.
pub fn extract_prediction(completion: &str) -> Option<String> {
    if let Some(b) = last_boxed(completion) {
        return Some(b);
    }
    if let Some((_, after)) = completion.rsplit_once("####") {
        return first_line(after);
    }
    let lower = completion.to_lowercase();
    if let Some(pos) = lower.rfind("the answer is") {
        // Lowercasing can change byte lengths only for non-ASCII text; fall through then.
        if lower.len() == completion.len() {
            let after = &completion[pos + "the answer is".len()..];
            if let Some(a) = first_line(after.trim_start_matches([':', ' '])) {
                return Some(a);
            }
        }
    }
    last_number(completion)
}

fn first_line(s: &str) -> Option<String> {
    let line = s.trim().lines().next()?.trim();
    let line = line.trim_end_matches(['.', ',', ';', '!']).trim();
    (!line.is_empty()).then(|| line.to_string())
}

/// Content of the last `\boxed{..}` or `\fbox{..}`, braces balanced.
fn last_boxed(text: &str) -> Option<String> {
    let start = ["\\boxed{", "\\fbox{"]
        .iter()
        .filter_map(|m| text.rfind(m).map(|i| i + m.len()))
        .max()?;
    let mut depth = 1usize;
    for (i, c) in text[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(text[start..start + i].trim().to_string());
                }
            }
            _ => {}
        }
    }
    None
}

/// The last number in the text (sign, thousands separators, decimals, a `/` fraction).
fn last_number(text: &str) -> Option<String> {
    let chars: Vec<char> = text.chars().collect();
    let mut best: Option<String> = None;
    let mut i = 0;
    while i < chars.len() {
        if chars[i].is_ascii_digit() {
            let start = if i > 0 && chars[i - 1] == '-' {
                i - 1
            } else {
                i
            };
            let mut j = i;
            while j < chars.len()
                && (chars[j].is_ascii_digit()
                    || ((chars[j] == ',' || chars[j] == '.' || chars[j] == '/')
                        && j + 1 < chars.len()
                        && chars[j + 1].is_ascii_digit()))
            {
                j += 1;
            }
            best = Some(chars[start..j].iter().collect());
            i = j;
        } else {
            i += 1;
        }
    }
    best
}
