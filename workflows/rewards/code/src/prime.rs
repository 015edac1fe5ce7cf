//! verl 0.9.1's `prime_code` scores: the runner's arguments and the verdicts, in plain Rust
//! (the component in `lib.rs` makes the calls).
//!
//! verl grades in two passes. The first runs every case in one worker, call-based problems by
//! calling `fn_name`; when every case passes the score is 1.0. Otherwise each of the first 10
//! cases runs again in a worker of its own, **without `fn_name`**: a call-based program is then
//! run as a stdio program with the case's arguments as its stdin, and its printed output (almost
//! always nothing) compared with the expected value's text, so a partly right function scores
//! about 0. The score is the fraction of those runs that passed. For a stdio problem the
//! second pass gives 1.0 whenever the first would, so only the first 10 cases are run.
//!
//! Each run happens in a fresh python-exec instance under `"harness": "prime_code"`, which makes
//! the conditions verl's harness gives a program (python-exec's `prime_harness.py` lists them):
//! what a program can do there decides its score as much as what it prints. A call's result
//! comes back as a plain value and is compared in another clean instance
//! (`prime-call-check`), never by the program's own `==`.

use serde_json::{Value, json};

use crate::{CaseResult, SCORED_CASES, Tests, compare};

/// One case's input as verl's harness gets it: a string (a list of strings is joined with
/// newlines, as verl does); `None` when verl's harness would fail on it.
pub fn input_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Array(items) => items
            .iter()
            .map(|x| x.as_str())
            .collect::<Option<Vec<_>>>()
            .map(|parts| parts.join("\n")),
        _ => None,
    }
}

/// The runner's arguments for a stdio run of `program` on `stdin` under verl's harness.
pub fn stdio_args(program: &str, stdin: &str, max_output_chars: u64) -> String {
    json!({
        "code": program,
        "stdin": stdin,
        "harness": "prime_code",
        "max_output_chars": max_output_chars,
    })
    .to_string()
}

/// The runner's arguments for a call of `fn_name` with `inputs` (one JSON argument a line);
/// `silent` asks the run whether the program can print nothing as a stdio program (asked of
/// one case a row: the answer is the program's, and costs a parse).
pub fn call_args(
    program: &str,
    fn_name: &str,
    inputs: &str,
    max_output_chars: u64,
    silent: bool,
) -> String {
    json!({
        "code": program,
        "stdin": "",
        "harness": "prime_code",
        "max_output_chars": max_output_chars,
        "call": {"fn_name": fn_name, "inputs": inputs, "silent": silent},
    })
    .to_string()
}

/// What a harness run came back with.
#[derive(Debug, Clone, PartialEq)]
pub enum Run {
    /// The program could not be loaded (verl's -2).
    NotLoaded,
    /// It raised, timed out or faulted (verl's -1).
    Failed,
    /// It ran: its stdout, and for a call its result's encoding and whether the program,
    /// run as a stdio program, can print nothing (python-exec's `silent_as_stdio`).
    Ran {
        stdout: String,
        value: Option<String>,
        silent: bool,
    },
}

/// Read python-exec's reply (`Err(_)`: the call itself failed or timed out).
pub fn read_run(reply: Result<&str, bool>) -> Run {
    let Ok(text) = reply else {
        return Run::Failed;
    };
    let Ok(out) = serde_json::from_str::<Value>(text) else {
        return Run::Failed;
    };
    if out["phase"] != json!("run") {
        return Run::NotLoaded;
    }
    if out["ok"] != json!(true) || out["stdout_truncated"] == json!(true) {
        return Run::Failed;
    }
    Run::Ran {
        stdout: out["stdout"].as_str().unwrap_or("").to_string(),
        value: out["result"].as_str().map(str::to_string),
        silent: out["silent"] == json!(true),
    }
}

/// verl's verdict on a call's result (`value`, python-exec's encoding) against the expected
/// JSON text, decided here when both are plain JSON (numbers, strings, booleans, null, lists:
/// Python's `==` on them is [`compare::py_eq`]); `None` when either holds anything else (a
/// tuple, a dict, a NaN...), which `prime-call-check` decides in a clean instance.
pub fn decide_plain(value: &str, expected: &str) -> Option<bool> {
    let out = compare::parse_json(value).ok()?;
    let want = compare::parse_json(expected).ok()?;
    if !plain(&out) || !plain(&want) {
        return None;
    }
    if compare::py_eq(&out, &want) {
        return Some(true);
    }
    Some(
        matches!(&want, Value::Array(items) if items.first().is_some_and(|w| compare::py_eq(&out, w))),
    )
}

fn plain(v: &Value) -> bool {
    match v {
        Value::Object(_) => false,
        Value::Array(items) => items.iter().all(plain),
        _ => true,
    }
}

/// Whether verl's second pass can be known to score 0 without running it: the program can
/// print nothing as a stdio program (`silent`, from any of its first-pass runs) and no
/// expected output of the first 10 cases is blank (an empty output would match a blank one).
pub fn second_pass_is_zero(silent: bool, tests: &Tests) -> bool {
    silent
        && tests.outputs[..second_pass_cases(tests)]
            .iter()
            .all(|o| o.as_str().is_some_and(|s| !s.trim().is_empty()))
}

/// The verdict on a stdio run against the expected output (a string, or a list of strings
/// joined with newlines, as verl does).
pub fn judge_stdio(run: &Run, expected: &Value) -> CaseResult {
    match run {
        Run::NotLoaded => CaseResult::NotRun,
        Run::Failed => CaseResult::Error,
        Run::Ran { stdout, .. } => match input_text(expected) {
            Some(want) if compare::prime_stdio(stdout, &want) => CaseResult::Pass,
            Some(_) => CaseResult::Fail,
            None => CaseResult::Error,
        },
    }
}

/// `prime-call-check`'s arguments: each case's encoded result and expected JSON text.
pub fn check_args(cases: &[(String, String)]) -> String {
    let cases: Vec<Value> = cases
        .iter()
        .map(|(value, expected)| json!({"value": value, "expected": expected}))
        .collect();
    json!({"mode": "prime-call-check", "code": "", "cases": cases}).to_string()
}

/// `prime-call-check`'s verdicts, one per case.
pub fn parse_check(text: &str, n: usize) -> Result<Vec<bool>, String> {
    let v: Value = serde_json::from_str(text).map_err(|e| format!("prime-call-check: {e}"))?;
    let cases = v["cases"]
        .as_array()
        .filter(|c| c.len() == n)
        .ok_or("prime-call-check gave no verdict for each case")?;
    Ok(cases.iter().map(|c| c["pass"] == json!(true)).collect())
}

/// The cases of verl's second pass (the first 10).
pub fn second_pass_cases(tests: &Tests) -> usize {
    tests.inputs.len().min(SCORED_CASES)
}

/// Whether the row has cases `prime_code` reads: `inputs` and `outputs` (it never runs an
/// `assert_case`; a row of those alone scores 0.0 there).
pub fn has_io_cases(tests: &Tests) -> bool {
    !tests.outputs.iter().all(Value::is_null)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(v: Value) -> String {
        v.to_string()
    }

    #[test]
    fn runs_are_read_as_verl_counts_them() {
        let ran = reply(json!({"ok": true, "phase": "run", "stdout": "3\n", "result": null}));
        assert_eq!(
            read_run(Ok(&ran)),
            Run::Ran {
                stdout: "3\n".into(),
                value: None,
                silent: false,
            }
        );
        let raised = reply(json!({"ok": false, "phase": "run", "stdout": "3\n"}));
        assert_eq!(read_run(Ok(&raised)), Run::Failed);
        let not_loaded = reply(json!({"ok": false, "phase": "compile"}));
        assert_eq!(read_run(Ok(&not_loaded)), Run::NotLoaded);
        let cut =
            reply(json!({"ok": true, "phase": "run", "stdout": "3", "stdout_truncated": true}));
        assert_eq!(read_run(Ok(&cut)), Run::Failed);
        assert_eq!(read_run(Err(true)), Run::Failed);
        assert_eq!(read_run(Ok("not json")), Run::Failed);
    }

    #[test]
    fn stdio_verdicts() {
        let ran = Run::Ran {
            stdout: "3\n".into(),
            value: None,
            silent: false,
        };
        assert_eq!(judge_stdio(&ran, &json!("3")), CaseResult::Pass);
        assert_eq!(judge_stdio(&ran, &json!(["3"])), CaseResult::Pass);
        assert_eq!(judge_stdio(&ran, &json!("4")), CaseResult::Fail);
        assert_eq!(judge_stdio(&ran, &json!(3)), CaseResult::Error);
        assert_eq!(
            judge_stdio(&Run::NotLoaded, &json!("3")),
            CaseResult::NotRun
        );
        assert_eq!(judge_stdio(&Run::Failed, &json!("3")), CaseResult::Error);
    }

    #[test]
    fn plain_results_are_decided_as_pythons_eq_does() {
        assert_eq!(decide_plain("[1, 2]", "[1, 2]"), Some(true));
        assert_eq!(
            decide_plain("5", "[5]"),
            Some(true),
            "verl also takes the first element"
        );
        assert_eq!(decide_plain("true", "1"), Some(true), "True == 1");
        assert_eq!(decide_plain("2.0", "2"), Some(true));
        assert_eq!(decide_plain("[1, 2]", "[[1, 2]]"), Some(true));
        assert_eq!(decide_plain("[1, 2]", "[2, 1]"), Some(false));
        assert_eq!(decide_plain("\"1\"", "1"), Some(false));
        assert_eq!(
            decide_plain(
                "123456789012345678901234567890",
                "123456789012345678901234567891"
            ),
            Some(false)
        );
        // A tuple, a dict (verl turns integer-like keys into ints), a NaN: the clean instance.
        assert_eq!(decide_plain(r#"{"tuple": [1, 2]}"#, "[1, 2]"), None);
        assert_eq!(decide_plain(r#"{"dict": [[1, 2]]}"#, r#"{"1": 2}"#), None);
        assert_eq!(decide_plain("[1]", "NaN"), None);
    }

    #[test]
    fn a_silent_program_skips_the_second_pass_unless_an_output_is_blank() {
        let t = |outputs: Value| {
            Tests::parse(&json!({"fn_name": "f", "inputs": ["1", "2"], "outputs": outputs}))
                .expect("parses")
        };
        assert!(second_pass_is_zero(true, &t(json!(["1", "[2]"]))));
        assert!(!second_pass_is_zero(false, &t(json!(["1", "[2]"]))));
        assert!(!second_pass_is_zero(true, &t(json!(["1", " \n"]))));
        assert!(!second_pass_is_zero(true, &t(json!(["1", 2]))));
    }

    #[test]
    fn inputs_as_verl_joins_them() {
        assert_eq!(input_text(&json!("1 2\n")).as_deref(), Some("1 2\n"));
        assert_eq!(input_text(&json!(["1", "2"])).as_deref(), Some("1\n2"));
        assert_eq!(input_text(&json!([1, 2])), None);
        assert_eq!(input_text(&json!(null)), None);
    }

    #[test]
    fn check_verdicts_must_cover_every_case() {
        assert_eq!(
            parse_check(r#"{"cases": [{"pass": true}, {"pass": false}]}"#, 2),
            Ok(vec![true, false])
        );
        assert!(parse_check(r#"{"cases": [{"pass": true}]}"#, 2).is_err());
        assert!(parse_check("nope", 1).is_err());
    }
}
