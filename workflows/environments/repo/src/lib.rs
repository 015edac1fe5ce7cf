//! `repo`: a SWE-lite environment. The row carries a small pure-Python project (its files, a
//! task, the test modules the model may run, and hidden tests it never sees); the model calls
//! file tools and runs the tests; when it submits, the hidden tests decide the reward.
//!
//! * Files live in this instance's memory only (at most [`MAX_FILES`] files and
//!   [`MAX_BYTES`] in all); nothing touches a disk.
//! * Actions are Hermes tool calls, `<tool_call>{"name": ..., "arguments": {...}}</tool_call>`
//!   (the first of an action): `list_files`, `read_file {path}`, `write_file {path, content}`,
//!   `run_tests` (the row's visible test modules, run in the episode's python-exec session
//!   with the project imported from memory) and `submit`.
//! * `submit`, or the `max_turns`-th step, ends the episode: the hidden tests run with the
//!   final files in a fresh python-exec session (nothing the episode ran is there), and the
//!   reward is 1.0 when every hidden test passes and the program left unittest's own classes
//!   as they were, else 0.0.

use std::cell::RefCell;
use std::collections::BTreeMap;

use rollbox_sdk::Error;
use rollbox_sdk::environment::{Environment, Step, tools};
use serde_json::{Value, json};

/// Files a project holds at most.
pub const MAX_FILES: usize = 256;
/// Bytes a project's files hold at most, together.
pub const MAX_BYTES: usize = 4 << 20;

/// The test harness, defined in a session before its first run.
const HARNESS: &str = include_str!("harness.py");

struct Repo;

/// One episode's state.
struct Episode {
    files: BTreeMap<String, String>,
    tests: Vec<String>,
    hidden_files: BTreeMap<String, String>,
    hidden_tests: Vec<String>,
    tool: String,
    max_turns: u64,
    turns: u64,
    session: Option<tools::Session>,
}

thread_local! {
    static EPISODE: RefCell<Option<Episode>> = const { RefCell::new(None) };
}

/// A project path: relative, `/`-separated names of letters, digits, `_`, `-` and `.`, no
/// `..`.
pub fn valid_path(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= 256
        && path.split('/').all(|part| {
            !part.is_empty()
                && part != "."
                && part != ".."
                && part
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        })
}

fn files_of(v: &Value, key: &str) -> Result<BTreeMap<String, String>, Error> {
    let Some(map) = v[key].as_object() else {
        return Err(Error::msg(format!(
            "the row's `{key}` must be an object of path -> text"
        )));
    };
    let mut out = BTreeMap::new();
    for (path, text) in map {
        let Some(text) = text.as_str() else {
            return Err(Error::msg(format!("`{key}.{path}` is not text")));
        };
        if !valid_path(path) {
            return Err(Error::msg(format!("`{key}` has an invalid path `{path}`")));
        }
        out.insert(path.clone(), text.to_string());
    }
    Ok(out)
}

fn names_of(v: &Value, key: &str) -> Result<Vec<String>, Error> {
    v[key]
        .as_array()
        .ok_or_else(|| Error::msg(format!("the row's `{key}` must list test module names")))?
        .iter()
        .map(|n| {
            n.as_str()
                .map(str::to_string)
                .ok_or_else(|| Error::msg(format!("`{key}` must list strings")))
        })
        .collect()
}

/// The first Hermes tool call of `action`: its name and arguments.
pub fn tool_call(action: &str) -> Option<Result<(String, Value), String>> {
    let start = action.find("<tool_call>")? + "<tool_call>".len();
    let Some(end) = action[start..].find("</tool_call>") else {
        return Some(Err("a <tool_call> that is never closed".into()));
    };
    let call: Value = match serde_json::from_str(action[start..start + end].trim()) {
        Ok(v) => v,
        Err(e) => return Some(Err(format!("the tool call is not JSON: {e}"))),
    };
    let Some(name) = call["name"].as_str() else {
        return Some(Err("the tool call has no `name`".into()));
    };
    let args = match &call["arguments"] {
        Value::Null => json!({}),
        v @ Value::Object(_) => v.clone(),
        _ => return Some(Err("`arguments` must be an object".into())),
    };
    Some(Ok((name.to_string(), args)))
}

/// Run `names` against `files` in `session` (the harness defined on its first use); the
/// harness's JSON summary.
fn run_tests(
    session: &tools::Session,
    fresh: bool,
    files: &BTreeMap<String, String>,
    names: &[String],
) -> Result<Value, String> {
    let call = |code: String| -> Result<Value, String> {
        let out = session
            .call(&json!({ "code": code }).to_string())
            .map_err(|e| format!("{e:?}"))?;
        let reply: Value =
            serde_json::from_str(&out.output).map_err(|e| format!("python-exec: {e}"))?;
        if reply["ok"] != json!(true) {
            return Err(reply["error"].as_str().unwrap_or("error").to_string());
        }
        Ok(reply)
    };
    if fresh {
        call(HARNESS.to_string())?;
    }
    let files = serde_json::to_string(&serde_json::to_string(files).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let names = serde_json::to_string(&serde_json::to_string(names).map_err(|e| e.to_string())?)
        .map_err(|e| e.to_string())?;
    let reply = call(format!(
        "import json as _json\nprint(run(_json.loads({files}), _json.loads({names})))"
    ))?;
    let stdout = reply["stdout"].as_str().unwrap_or("");
    serde_json::from_str(stdout.trim()).map_err(|_| {
        format!(
            "the test run printed something else: {}",
            &stdout[..stdout.len().min(500)]
        )
    })
}

/// What the model sees of a test run.
fn describe_run(summary: &Value) -> String {
    format!(
        "{} tests, {} failures, {} errors\n{}",
        summary["tests"],
        summary["failures"],
        summary["errors"],
        summary["output"].as_str().unwrap_or("")
    )
}

impl Episode {
    fn tool(&mut self, name: &str, args: &Value) -> Result<String, String> {
        match name {
            "list_files" => Ok(self.files.keys().cloned().collect::<Vec<_>>().join("\n")),
            "read_file" => {
                let path = args["path"].as_str().ok_or("read_file needs `path`")?;
                self.files
                    .get(path)
                    .cloned()
                    .ok_or_else(|| format!("no file `{path}`"))
            }
            "write_file" => {
                let path = args["path"].as_str().ok_or("write_file needs `path`")?;
                let content = args["content"]
                    .as_str()
                    .ok_or("write_file needs `content` (text)")?;
                if !valid_path(path) {
                    return Err(format!("`{path}` is not a valid project path"));
                }
                let old = self.files.get(path).map_or(0, String::len);
                let total: usize = self.files.values().map(String::len).sum();
                if total - old + content.len() > MAX_BYTES {
                    return Err(format!("the project would pass {MAX_BYTES} bytes"));
                }
                if old == 0 && !self.files.contains_key(path) && self.files.len() >= MAX_FILES {
                    return Err(format!("the project holds {MAX_FILES} files already"));
                }
                self.files.insert(path.to_string(), content.to_string());
                Ok(format!("wrote {} bytes to {path}", content.len()))
            }
            "run_tests" => {
                let fresh = self.session.is_none();
                let session = match self.session.take() {
                    Some(s) => s,
                    None => tools::Session::open(&self.tool).map_err(|e| format!("{e:?}"))?,
                };
                let summary = run_tests(&session, fresh, &self.files, &self.tests);
                // A run that faulted ended the session; the next run opens another.
                if summary.is_ok() {
                    self.session = Some(session);
                }
                summary.map(|s| describe_run(&s))
            }
            other => Err(format!(
                "no tool `{other}`; the tools are list_files, read_file, write_file, run_tests, submit"
            )),
        }
    }

    /// The hidden tests on the final files, in a fresh session: the episode's reward.
    fn grade(&mut self) -> (f64, Value) {
        self.session = None;
        let mut files = self.files.clone();
        files.extend(self.hidden_files.clone());
        let summary = tools::Session::open(&self.tool)
            .map_err(|e| format!("{e:?}"))
            .and_then(|s| run_tests(&s, true, &files, &self.hidden_tests));
        match summary {
            Ok(s) => {
                let passed = s["tests"].as_u64().unwrap_or(0) > 0
                    && s["failures"] == json!(0)
                    && s["errors"] == json!(0)
                    && s["tampered"] == json!(false);
                (if passed { 1.0 } else { 0.0 }, s)
            }
            Err(e) => (0.0, json!({ "error": e })),
        }
    }
}

impl Environment for Repo {
    fn reset(row: Value) -> Result<String, Error> {
        let files = files_of(&row, "files")?;
        let hidden_files = files_of(&row, "hidden_files")?;
        if files.len() + hidden_files.len() > MAX_FILES
            || files
                .values()
                .chain(hidden_files.values())
                .map(String::len)
                .sum::<usize>()
                > MAX_BYTES
        {
            return Err(Error::msg(format!(
                "the project passes {MAX_FILES} files or {MAX_BYTES} bytes"
            )));
        }
        let task = row["task"].as_str().unwrap_or("Make the tests pass.");
        let episode = Episode {
            tests: names_of(&row, "tests")?,
            hidden_tests: names_of(&row, "hidden_tests")?,
            tool: row["tool"].as_str().unwrap_or("python").to_string(),
            max_turns: row["max_turns"].as_u64().unwrap_or(16).max(1),
            turns: 0,
            session: None,
            files,
            hidden_files,
        };
        let listing = episode.files.keys().cloned().collect::<Vec<_>>().join("\n");
        EPISODE.with_borrow_mut(|e| *e = Some(episode));
        Ok(format!(
            "{task}\n\nFiles:\n{listing}\n\nCall one tool a turn as <tool_call>{{\"name\": ..., \"arguments\": {{...}}}}</tool_call>: list_files, read_file {{path}}, write_file {{path, content}}, run_tests, submit."
        ))
    }

    fn step(action: String) -> Result<Step, Error> {
        EPISODE.with_borrow_mut(|e| {
            let e = e
                .as_mut()
                .ok_or_else(|| Error::msg("`step` before `reset`"))?;
            e.turns += 1;
            let call = tool_call(&action);
            let submitted = matches!(&call, Some(Ok((name, _))) if name == "submit");
            if submitted || e.turns >= e.max_turns {
                let (reward, summary) = e.grade();
                return Ok(Step {
                    observation: String::new(),
                    reward,
                    done: true,
                    metadata: json!({"hidden_tests": summary, "turns": e.turns, "submitted": submitted}),
                });
            }
            let (observation, tool) = match call {
                None => (
                    "No <tool_call> found: call one of list_files, read_file, write_file, run_tests, submit.".to_string(),
                    Value::Null,
                ),
                Some(Err(why)) => (format!("error: {why}"), Value::Null),
                Some(Ok((name, args))) => match e.tool(&name, &args) {
                    Ok(text) => (text, json!(name)),
                    Err(why) => (format!("error: {why}"), json!(name)),
                },
            };
            let mut step = Step::observe(observation);
            step.metadata = json!({ "tool": tool });
            Ok(step)
        })
    }
}

rollbox_sdk::export_environment!(Repo);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_and_calls() {
        assert!(valid_path("pkg/mod_1.py"));
        for bad in [
            "",
            "../x.py",
            "/abs.py",
            "a//b.py",
            "a/./b.py",
            "sp ace.py",
            "a\\b.py",
        ] {
            assert!(!valid_path(bad), "{bad}");
        }
        let call = tool_call(
            r#"x <tool_call>{"name": "read_file", "arguments": {"path": "a.py"}}</tool_call>"#,
        );
        assert_eq!(
            call,
            Some(Ok(("read_file".into(), json!({"path": "a.py"}))))
        );
        assert_eq!(
            tool_call(r#"<tool_call>{"name": "submit"}</tool_call>"#),
            Some(Ok(("submit".into(), json!({}))))
        );
        assert!(matches!(
            tool_call("<tool_call>{oops</tool_call>"),
            Some(Err(_))
        ));
        assert!(matches!(
            tool_call("<tool_call>{\"name\": 1}"),
            Some(Err(_))
        ));
        assert_eq!(tool_call("no call"), None);
    }
}
