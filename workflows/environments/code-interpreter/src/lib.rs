//! `code-interpreter`: an environment for tool-integrated reasoning (rStar2-Agent, ReTool,
//! AReaL's TIR): the model's Python runs in one python-exec session per episode, so what one
//! step defines is there in the next; the episode ends with a `\boxed{}` answer.
//!
//! * `reset(row)`: the row's `question` (or `prompt`) is the first observation; `answer` is
//!   the reference; `tool` names the registered python-exec (default `python`); `max_turns`
//!   (default 8) ends the episode.
//! * `step(action)`: a `\boxed{...}` answer ends the episode with reward 1.0 when it equals the
//!   reference (as numbers when both read as one, else as text without spaces, `$` and
//!   thousands commas) and 0.0 otherwise; else the last ```` ```python ```` block (or
//!   `<code>...</code>`) runs in the session and what it printed, its last value and its error
//!   are the observation; else the observation says what was expected. A call that faults
//!   (timeout, memory) is observed as `error: ...` and the next block gets a fresh interpreter.
//!
//! The reward here is an exact match; a workflow that wants math-verify's judgement scores the
//! final text with the `math` reward.

use std::cell::RefCell;

use rollbox_sdk::Error;
use rollbox_sdk::environment::{Environment, Step, tools};
use serde_json::{Value, json};

struct CodeInterpreter;

/// One episode's state: the instance is the episode's.
struct Episode {
    answer: String,
    tool: String,
    max_turns: u64,
    turns: u64,
    session: Option<tools::Session>,
}

thread_local! {
    static EPISODE: RefCell<Option<Episode>> = const { RefCell::new(None) };
}

/// `\boxed{...}`'s content (the last one), braces balanced.
pub fn boxed(text: &str) -> Option<&str> {
    let start = text.rfind("\\boxed{")? + "\\boxed{".len();
    let mut depth = 1;
    for (i, c) in text[start..].char_indices() {
        match c {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(&text[start..start + i]);
                }
            }
            _ => {}
        }
    }
    None
}

/// The last code block of `action`: ```` ```python ... ``` ```` or `<code>...</code>`.
pub fn code_block(action: &str) -> Option<&str> {
    let fenced = action.rfind("```python").and_then(|i| {
        let body = &action[i + "```python".len()..];
        body.find("```").map(|end| &body[..end])
    });
    fenced.or_else(|| {
        let i = action.rfind("<code>")? + "<code>".len();
        action[i..].find("</code>").map(|end| &action[i..i + end])
    })
}

/// Whether `given` is the reference `want`: as numbers when both read as one, else as text
/// without spaces, `$` and commas.
pub fn same_answer(given: &str, want: &str) -> bool {
    let norm = |s: &str| -> String {
        s.chars()
            .filter(|c| !c.is_whitespace() && *c != '$' && *c != ',')
            .collect()
    };
    let (g, w) = (norm(given), norm(want));
    match (g.parse::<f64>(), w.parse::<f64>()) {
        (Ok(a), Ok(b)) => (a - b).abs() <= 1e-9 * b.abs().max(1.0),
        _ => g == w,
    }
}

/// What the model sees of python-exec's reply: what was printed, the last value, the error.
pub fn python_text(output: &str) -> String {
    let Ok(r) = serde_json::from_str::<Value>(output) else {
        return output.to_string();
    };
    let mut text = r["stdout"].as_str().unwrap_or("").to_string();
    if let Some(v) = r["value"].as_str() {
        if !text.is_empty() && !text.ends_with('\n') {
            text.push('\n');
        }
        text.push_str(v);
    }
    if r["ok"] == json!(false) {
        text.push_str(r["error"].as_str().unwrap_or("error"));
    }
    text
}

impl Environment for CodeInterpreter {
    fn reset(row: Value) -> Result<String, Error> {
        let question = row["question"]
            .as_str()
            .or(row["prompt"].as_str())
            .ok_or_else(|| Error::msg("the row has no `question` (or `prompt`) string"))?;
        let answer = match &row["answer"] {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => return Err(Error::msg("the row has no `answer` (a string or a number)")),
        };
        let episode = Episode {
            answer,
            tool: row["tool"].as_str().unwrap_or("python").to_string(),
            max_turns: row["max_turns"].as_u64().unwrap_or(8).max(1),
            turns: 0,
            session: None,
        };
        EPISODE.with_borrow_mut(|e| *e = Some(episode));
        Ok(question.to_string())
    }

    fn step(action: String) -> Result<Step, Error> {
        EPISODE.with_borrow_mut(|e| {
            let e = e
                .as_mut()
                .ok_or_else(|| Error::msg("`step` before `reset`"))?;
            e.turns += 1;
            if let Some(given) = boxed(&action) {
                let right = same_answer(given, &e.answer);
                e.session = None;
                return Ok(Step {
                    observation: String::new(),
                    reward: if right { 1.0 } else { 0.0 },
                    done: true,
                    metadata: json!({"answer": given, "turns": e.turns}),
                });
            }
            let mut step = match code_block(&action) {
                Some(code) => {
                    let session = match e.session.take() {
                        Some(s) => s,
                        None => tools::Session::open(&e.tool)?,
                    };
                    let args = json!({"code": code}).to_string();
                    let observation = match session.call(&args) {
                        Ok(r) => {
                            e.session = Some(session);
                            python_text(&r.output)
                        }
                        // The session ended with the fault; the next block opens another.
                        Err(err) => format!("error: {err:?}"),
                    };
                    let mut s = Step::observe(observation);
                    s.metadata = json!({"ran": true});
                    s
                }
                None => Step::observe(
                    "No ```python block to run and no \\boxed{} answer: write one of them.",
                ),
            };
            if e.turns >= e.max_turns {
                step.done = true;
                e.session = None;
            }
            Ok(step)
        })
    }
}

rollbox_sdk::export_environment!(CodeInterpreter);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answers_blocks_and_text() {
        assert_eq!(boxed("so \\boxed{\\frac{1}{2}} ok"), Some("\\frac{1}{2}"));
        assert_eq!(boxed("\\boxed{1} then \\boxed{2}"), Some("2"));
        assert_eq!(boxed("\\boxed{open"), None);
        assert_eq!(code_block("a\n```python\nx = 1\n```\nb"), Some("\nx = 1\n"));
        assert_eq!(code_block("<code>print(1)</code>"), Some("print(1)"));
        assert_eq!(code_block("```python\nunclosed"), None);
        assert!(same_answer(" 1,000 ", "1000"));
        assert!(same_answer("42.0", "42"));
        assert!(same_answer("$x+1$", "x + 1"));
        assert!(!same_answer("41", "42"));
        let reply = r#"{"ok": false, "stdout": "hi\n", "value": null, "error": "NameError: x"}"#;
        assert_eq!(python_text(reply), "hi\nNameError: x");
        assert_eq!(
            python_text(r#"{"ok": true, "stdout": "", "value": "3"}"#),
            "3"
        );
    }
}
