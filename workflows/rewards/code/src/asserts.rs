//! Assert cases (`{"assert_case": [...]}`), graded outside the program's reach.
//!
//! verl's SandboxFusion appends each case to the program and passes it when the run ends well,
//! so a wrong program passes by exiting first, by returning an object whose `__eq__` always
//! says yes, or by reading the expected value from its caller's frame. Here no case text enters
//! the program's instance; each case costs one run of the program plus two calls shared by the
//! row (python-exec's README and `assert_cases.py` have the design):
//!
//! 1. `assert-plan`, in a clean instance (the program is parsed, never run): each case's parts
//!    that need the program (`f(x)`, `Solution().solve(nums)`), with their arguments computed,
//!    or why the case cannot be split (graded as an error, never run with the program);
//! 2. the program's run (python-exec's program mode with `evaluate`): the program, then the
//!    parts, each result returned as a plain value (exact types; an object of the program's or
//!    a subclass of `int` is refused);
//! 3. `assert-check`, in another clean instance: each case as written, with the values in place
//!    of the parts; it passes when it runs to its end.
//!
//! Everything here is pure: argument building, reply parsing, batching and how a case's
//! assertion combines with its run.

use std::ops::Range;

use serde_json::{Value, json};

use crate::{CaseResult, Semantics};

/// Bytes of arguments one `assert-plan` or `assert-check` call is given (cases are split over
/// more calls past it; a single larger case goes alone): the host's default boundary limit is
/// 1 MiB, and a program's values for ten cases may be several.
pub const MAX_ASSERT_CALL_BYTES: usize = 512 << 10;

/// Cases one `assert-plan` or `assert-check` call is given (python-exec takes at most 4,096).
pub const MAX_ASSERT_CALL_CASES: usize = 1024;

/// One case's split, from `assert-plan`: its parts (passed on as they came) or why the case
/// cannot be split.
pub type Plan = Result<Value, String>;

/// Consecutive groups of items whose sizes add up to at most `budget` and number at most
/// `max_items` (an item larger than the budget is a group of its own).
pub fn batches(sizes: &[usize], budget: usize, max_items: usize) -> Vec<Range<usize>> {
    let mut out = Vec::new();
    let (mut start, mut used) = (0, 0);
    for (i, &size) in sizes.iter().enumerate() {
        if i > start && (used + size > budget || i - start >= max_items) {
            out.push(start..i);
            (start, used) = (i, 0);
        }
        used += size;
    }
    if start < sizes.len() {
        out.push(start..sizes.len());
    }
    out
}

/// The runner's arguments for `assert-plan` over `cases`.
pub fn plan_args(program: &str, cases: &[String], prelude: bool) -> String {
    json!({"mode": "assert-plan", "code": program, "asserts": cases, "prelude": prelude})
        .to_string()
}

/// `assert-plan`'s reply for `n` cases: each case's parts (`{"steps": [...]}`) or why it
/// cannot be split (`{"error": "..."}`); `Err` when the reply is not that.
pub fn parse_plan(text: &str, n: usize) -> Result<Vec<Plan>, String> {
    let reply: Value =
        serde_json::from_str(text).map_err(|e| format!("assert-plan's reply is not JSON: {e}"))?;
    let Some(cases) = reply["cases"].as_array().filter(|c| c.len() == n) else {
        return Err(format!("assert-plan's reply does not hold {n} cases"));
    };
    Ok(cases
        .iter()
        .map(|c| match (&c["steps"], &c["error"]) {
            (Value::Array(_), Value::Null) => Ok(c["steps"].clone()),
            (_, Value::String(why)) => Err(why.clone()),
            _ => Err("assert-plan gave a case neither parts nor an error".to_string()),
        })
        .collect())
}

/// The values the program's instance gave a case's parts (program mode's `evaluated`), when
/// its run got to them: not after an exception, a non-zero exit or a failed call.
pub fn evaluated(run: &str) -> Option<String> {
    let out: Value = serde_json::from_str(run).ok()?;
    if out["ok"] != json!(true) || out["phase"] != json!("run") {
        return None;
    }
    out["evaluated"].as_str().map(str::to_string)
}

/// One case of an `assert-check` call: its text, its parts as planned, and the program's values.
pub fn check_case(assert: &str, steps: &Value, evaluated: &str) -> Value {
    json!({"assert": assert, "steps": steps, "evaluated": evaluated})
}

/// The runner's arguments for `assert-check` over `cases` (each from [`check_case`]).
pub fn check_args(program: &str, cases: &[Value], prelude: bool) -> String {
    json!({"mode": "assert-check", "code": program, "cases": cases, "prelude": prelude}).to_string()
}

/// `assert-check`'s reply for `n` cases: each `Ok(())` (the case ran to its end) or why it
/// failed; `Err` when the reply is not that.
pub fn parse_check(text: &str, n: usize) -> Result<Vec<Result<(), String>>, String> {
    let reply: Value =
        serde_json::from_str(text).map_err(|e| format!("assert-check's reply is not JSON: {e}"))?;
    let Some(cases) = reply["cases"].as_array().filter(|c| c.len() == n) else {
        return Err(format!("assert-check's reply does not hold {n} cases"));
    };
    Ok(cases
        .iter()
        .map(|c| match &c["pass"] {
            Value::Bool(true) => Ok(()),
            _ => Err(c["error"].as_str().unwrap_or("the case failed").to_string()),
        })
        .collect())
}

/// What a failed assertion gives a case: the result of a run that raised (`AssertionError`),
/// as when the case was appended to the program.
pub fn failed(semantics: Semantics) -> CaseResult {
    CaseResult::raised(semantics)
}

/// A case's result from its run (`run`, judged as any case) and its assertion (`Pass`, or the
/// result of a failed or unchecked one): a run that ended (passed or printed the wrong answer)
/// takes the assertion's failure; a run that did not end keeps its own.
pub fn with_assertion(run: CaseResult, assertion: CaseResult) -> CaseResult {
    match run {
        CaseResult::Pass | CaseResult::Fail if assertion != CaseResult::Pass => assertion,
        _ => run,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_keep_to_the_budget() {
        assert_eq!(batches(&[], 10, 4), Vec::<Range<usize>>::new());
        assert_eq!(batches(&[3, 3, 3], 10, 4), vec![0..3]);
        assert_eq!(batches(&[6, 6, 6], 10, 4), vec![0..1, 1..2, 2..3]);
        // A case over the budget goes alone.
        assert_eq!(batches(&[2, 50, 2, 2], 10, 4), vec![0..1, 1..2, 2..4]);
        assert_eq!(batches(&[1; 5], 10, 2), vec![0..2, 2..4, 4..5]);
    }

    #[test]
    fn plan_arguments_and_reply() {
        let args: Value = serde_json::from_str(&plan_args(
            "def f(x): return x",
            &["assert f(1) == 1".to_string()],
            false,
        ))
        .expect("JSON");
        assert_eq!(args["mode"], json!("assert-plan"));
        assert_eq!(args["asserts"], json!(["assert f(1) == 1"]));
        let reply = r#"{"cases": [{"steps": [{"source": "lambda: f(1)", "args": []}]},
                                  {"error": "a `for` statement of the test's calls the program"}]}"#;
        let plans = parse_plan(reply, 2).expect("parses");
        assert_eq!(
            plans[0].as_ref().expect("parts")[0]["source"],
            "lambda: f(1)"
        );
        assert!(plans[1].as_ref().expect_err("refused").contains("`for`"));
        assert!(parse_plan(reply, 3).is_err());
        assert!(parse_plan("[]", 0).is_err());
        assert!(parse_plan("not json", 1).is_err());
        let odd = parse_plan(r#"{"cases": [{"steps": 1}]}"#, 1).expect("parses");
        assert!(odd[0].is_err());
    }

    #[test]
    fn values_only_from_a_run_that_got_to_them() {
        let run = |ok: bool, phase: &str, evaluated: Value| {
            json!({"ok": ok, "phase": phase, "evaluated": evaluated}).to_string()
        };
        assert_eq!(
            evaluated(&run(true, "run", json!("[{\"value\":\"3\"}]"))).as_deref(),
            Some("[{\"value\":\"3\"}]")
        );
        assert_eq!(evaluated(&run(false, "run", json!("[]"))), None);
        assert_eq!(evaluated(&run(true, "compile", json!("[]"))), None);
        assert_eq!(evaluated(&run(true, "run", Value::Null)), None);
        assert_eq!(evaluated("garbage"), None);
    }

    #[test]
    fn check_arguments_and_reply() {
        let steps = json!([{"source": "lambda: f(1)", "args": []}]);
        let case = check_case("assert f(1) == 1", &steps, "[{\"value\":\"1\"}]");
        let args: Value =
            serde_json::from_str(&check_args("def f(x): return x", &[case], true)).expect("JSON");
        assert_eq!(args["mode"], json!("assert-check"));
        assert_eq!(args["prelude"], json!(true));
        assert_eq!(args["cases"][0]["steps"], steps);
        let reply = r#"{"cases": [{"pass": true}, {"pass": false, "error": "AssertionError: "},
                                  {"pass": 1}]}"#;
        let verdicts = parse_check(reply, 3).expect("parses");
        assert_eq!(verdicts[0], Ok(()));
        assert_eq!(verdicts[1], Err("AssertionError: ".to_string()));
        assert!(verdicts[2].is_err(), "only `true` passes");
        assert!(parse_check(reply, 2).is_err());
    }

    #[test]
    fn a_failed_assertion_fails_a_run_that_ended() {
        use CaseResult::*;
        let sf = Semantics::SandboxFusion { continuous: true };
        assert_eq!(failed(sf), NotRun);
        assert_eq!(failed(Semantics::PrimeCode), Error);
        assert_eq!(with_assertion(Pass, Pass), Pass);
        assert_eq!(with_assertion(Pass, failed(sf)), NotRun);
        assert_eq!(with_assertion(Fail, Pass), Fail);
        assert_eq!(with_assertion(Fail, Error), Error);
        // The run's own end comes first: a timeout stays a timeout.
        assert_eq!(with_assertion(Timeout, Pass), Timeout);
        assert_eq!(with_assertion(NotRun, Error), NotRun);
    }
}
