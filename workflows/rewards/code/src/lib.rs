//! `code`: a reward component that scores a model's program against test cases, each case run
//! in a fresh Python sandbox of its own (the python-exec tool's program mode), with the
//! semantics of verl's `prime_code` (the default) or of its SandboxFusion scorer.
//!
//! The reward never runs the program itself: it asks the host to run each case through the
//! registered tool `runner` (default `python`, e.g. `--tool python=python_exec.wasm`), gets
//! back what the program printed or returned, and compares that with the expected output after
//! the program's instance is gone. Expected outputs never enter the program's instance, and no
//! case shares an instance with another. An `assert_case` is never appended to the program:
//! only the parts of it that need the program are evaluated in the program's instance, as plain
//! values, and the assertion runs in a clean instance ([`asserts`]).
//!
//! Everything but the tool calls is plain Rust ([`extract`], [`Tests`], [`judge`], [`score`],
//! [`asserts`]), tested natively; the component is the glue in `component.rs`.

pub mod asserts;
pub mod compare;
pub mod prime;

use serde_json::{Value, json};

/// How a completion is scored: verl's two code scorers, or as an online judge grades.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Semantics {
    /// verl's `prime_code`, its scores: each run under the conditions verl's harness gives a
    /// program, its two passes and its partial credit ([`prime`]).
    PrimeCode,
    /// As an online judge grades: the program as written, each case in a fresh instance with
    /// the case's input on stdin, `prime_code`'s forgiving output comparison and the APPS
    /// imports, the fraction of the first 10 cases passed, call-based problems and
    /// `assert_case` included.
    Judge,
    /// verl's `sandbox_fusion` scorer: the program as written, outputs exact but for trailing
    /// newlines; `continuous` scores the first 10 cases, else all.
    SandboxFusion { continuous: bool },
}

/// Cases that count toward a continuous score (verl's `prime_code` and SandboxFusion's
/// `continuous`).
pub const SCORED_CASES: usize = 10;

/// The reward's options, from the row's `code_reward` object.
#[derive(Debug, Clone, PartialEq)]
pub struct Options {
    pub semantics: Semantics,
    /// The registered tool that runs a case (python-exec or one like it).
    pub runner: String,
    /// Characters of a case's stdout kept (a longer output fails the case).
    pub max_output_chars: u64,
}

impl Options {
    /// Read `data.code_reward` (`semantics`: `prime_code` | `judge` | `sandbox_fusion`, `continuous`,
    /// `runner`, `max_output_chars`); defaults for what is absent.
    pub fn from_row(data: &Value) -> Result<Options, String> {
        let o = &data["code_reward"];
        if !(o.is_null() || o.is_object()) {
            return Err("`code_reward` must be an object".into());
        }
        let continuous = match &o["continuous"] {
            Value::Null => true,
            Value::Bool(b) => *b,
            _ => return Err("`code_reward.continuous` must be true or false".into()),
        };
        let semantics = match o["semantics"].as_str().unwrap_or("prime_code") {
            "prime_code" => Semantics::PrimeCode,
            "judge" => Semantics::Judge,
            "sandbox_fusion" => Semantics::SandboxFusion { continuous },
            other => {
                return Err(format!(
                    "`code_reward.semantics` is `{other}`; use `prime_code`, `judge` or `sandbox_fusion`"
                ));
            }
        };
        let runner = o["runner"].as_str().unwrap_or("python").to_string();
        let max_output_chars = match &o["max_output_chars"] {
            Value::Null => 1 << 20,
            v => v
                .as_u64()
                .filter(|n| (2..=4 << 20).contains(n))
                .ok_or("`code_reward.max_output_chars` must be an integer from 2 to 4194304")?,
        };
        Ok(Options {
            semantics,
            runner,
            max_output_chars,
        })
    }
}

/// The program in `completion`, as the scorer finds it: `prime_code` takes the text after the
/// last ```` ```python ```` up to the next fence (the whole text when there is no fence);
/// SandboxFusion does the same when there is a ```` ```python ```` block, else takes the first
/// fenced block without a language line, else finds none.
pub fn extract(completion: &str, semantics: Semantics) -> Option<String> {
    const PY: &str = "```python";
    let after_py = |s: &str| {
        let tail = s.rsplit(PY).next().unwrap_or(s);
        tail.split("```").next().unwrap_or(tail).to_string()
    };
    match semantics {
        Semantics::PrimeCode | Semantics::Judge => Some(after_py(completion)),
        Semantics::SandboxFusion { .. } => {
            if completion.contains(PY) {
                return Some(after_py(completion));
            }
            // The first fenced block (an opening fence never closed: the text after it).
            let block = completion.split("```").nth(1)?;
            let (first, rest) = block.split_once('\n').unwrap_or((block, ""));
            if !first.trim().is_empty() && first.trim().chars().all(char::is_alphabetic) {
                Some(rest.to_string())
            } else {
                Some(block.to_string())
            }
        }
    }
}

/// A problem's test cases, from verl's `ground_truth` (a JSON string or object).
#[derive(Debug, Clone, PartialEq)]
pub struct Tests {
    /// Each case's stdin (stdio problems) or its arguments, one JSON value per line.
    pub inputs: Vec<Value>,
    /// Each case's expected stdout, or expected return value (JSON text or a value).
    pub outputs: Vec<Value>,
    /// The function to call (call-based problems).
    pub fn_name: Option<String>,
    /// Code checked after the program per case (SandboxFusion's `assert_case`; see
    /// [`asserts`]: it never enters the program's instance).
    pub assert_case: Vec<String>,
}

/// The row keys the test cases are read from, in order.
pub const TEST_KEYS: &[&str] = &[
    "reward_model.ground_truth",
    "ground_truth",
    "input_output",
    "test_cases",
];

impl Tests {
    /// The test cases of `data` (the first of [`TEST_KEYS`] present), or why there are none.
    pub fn from_row(data: &Value) -> Result<Tests, String> {
        let found = TEST_KEYS.iter().find_map(|k| {
            let v = k.split('.').fold(data, |v, part| &v[part]);
            (!v.is_null()).then_some(v)
        });
        let Some(v) = found else {
            return Err(format!(
                "the row has no test cases: none of {} is set",
                TEST_KEYS
                    .iter()
                    .map(|k| format!("`{k}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        };
        Tests::parse(v)
    }

    /// Parse verl's format: `{"inputs": [...], "outputs": [...], "fn_name"?: ...}` or
    /// `{"assert_case": [...]}`, as an object or a JSON string holding one.
    pub fn parse(v: &Value) -> Result<Tests, String> {
        let parsed;
        let v = match v {
            Value::String(s) => {
                parsed = compare::parse_json(s)
                    .map_err(|e| format!("the test cases are not JSON: {e}"))?;
                &parsed
            }
            v => v,
        };
        let Value::Object(m) = v else {
            return Err("the test cases must be an object with `inputs` and `outputs`".into());
        };
        let list = |key: &str| -> Result<Option<Vec<Value>>, String> {
            match m.get(key) {
                None | Some(Value::Null) => Ok(None),
                Some(Value::Array(a)) => Ok(Some(a.clone())),
                Some(_) => Err(format!("the test cases' `{key}` must be a list")),
            }
        };
        let assert_case: Vec<String> = match list("assert_case")? {
            None => Vec::new(),
            Some(a) => a
                .into_iter()
                .map(|x| match x {
                    Value::String(s) => Ok(s),
                    _ => Err("each `assert_case` must be a string of code".to_string()),
                })
                .collect::<Result<_, _>>()?,
        };
        let (inputs, outputs) = match (list("inputs")?, list("outputs")?) {
            (Some(i), Some(o)) => (i, o),
            (None, None) if !assert_case.is_empty() => (
                vec![Value::String(String::new()); assert_case.len()],
                vec![Value::Null; assert_case.len()],
            ),
            _ => return Err("the test cases need both `inputs` and `outputs`".into()),
        };
        if inputs.len() != outputs.len() {
            return Err(format!(
                "the test cases have {} inputs and {} outputs",
                inputs.len(),
                outputs.len()
            ));
        }
        if !assert_case.is_empty() && assert_case.len() != inputs.len() {
            return Err(format!(
                "the test cases have {} inputs and {} `assert_case` entries",
                inputs.len(),
                assert_case.len()
            ));
        }
        if inputs.is_empty() {
            return Err("the test cases are empty: nothing to check the program against".into());
        }
        let fn_name = match m.get("fn_name") {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s.clone()),
            Some(_) => return Err("the test cases' `fn_name` must be a string".into()),
        };
        Ok(Tests {
            inputs,
            outputs,
            fn_name,
            assert_case,
        })
    }
}

/// One case's result, as verl reports it: `True`, `False`, or a negative code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CaseResult {
    Pass,
    Fail,
    /// A runtime error, a timeout or a sandbox fault (`prime_code`'s -1); SandboxFusion's -1 is
    /// a sandbox error.
    Error,
    /// The program could not run (`prime_code`: a syntax error, no such function); SandboxFusion:
    /// a runtime error (its -2).
    NotRun,
    /// SandboxFusion's time limit (-3).
    Timeout,
}

impl CaseResult {
    /// The result of a run that raised (an exception, a non-zero exit): `prime_code`'s -1,
    /// SandboxFusion's runtime error (-2).
    pub fn raised(semantics: Semantics) -> CaseResult {
        match semantics {
            Semantics::PrimeCode | Semantics::Judge => CaseResult::Error,
            Semantics::SandboxFusion { .. } => CaseResult::NotRun,
        }
    }

    /// verl's code for the result under `semantics`: `true`, `false`, -1 .. -4.
    pub fn code(self, semantics: Semantics) -> Value {
        match (self, semantics) {
            (CaseResult::Pass, _) => json!(true),
            (CaseResult::Fail, _) => json!(false),
            (CaseResult::Error, _) => json!(-1),
            (CaseResult::NotRun, _) => json!(-2),
            (CaseResult::Timeout, Semantics::PrimeCode | Semantics::Judge) => json!(-1),
            (CaseResult::Timeout, Semantics::SandboxFusion { .. }) => json!(-3),
        }
    }
}

/// Whether a case's program runs after the APPS harness's imports: `prime_code` runs them
/// before every program; SandboxFusion's call-based wrapper has the same star imports (its
/// stdio programs run as written).
pub fn prelude(tests: &Tests, opts: &Options) -> bool {
    opts.semantics == Semantics::Judge || tests.fn_name.is_some()
}

/// The runner's arguments for case `i` of `tests` (python-exec's program mode) as JSON text,
/// or the case's result when it cannot be run (its arguments are not JSON). `evaluate` is the
/// case's assertion's parts, from `assert-plan` ([`asserts`]): evaluated after the program,
/// their values returned; the assertion's own text never enters the program's instance.
pub fn case_args(
    program: &str,
    tests: &Tests,
    i: usize,
    opts: &Options,
    evaluate: Option<&Value>,
) -> Result<String, CaseResult> {
    #[derive(serde::Serialize)]
    struct Call<'a> {
        fn_name: &'a str,
        args: &'a serde_json::value::RawValue,
        /// `true`: `Solution().fn_name` (prime_code, when the source has `class Solution`);
        /// `"fallback"`: the function if the program defines one, else `Solution`'s method
        /// (SandboxFusion's wrapper).
        solution_class: Value,
    }
    #[derive(serde::Serialize)]
    struct Run<'a> {
        code: &'a str,
        stdin: &'a str,
        prelude: bool,
        max_output_chars: u64,
        #[serde(skip_serializing_if = "Option::is_none")]
        call: Option<Call<'a>>,
        #[serde(skip_serializing_if = "Option::is_none")]
        evaluate: Option<&'a Value>,
        /// SandboxFusion feeds stdin through a pipe (`os.fstat(0).st_size` is 0); a judge's
        /// stdin is a file (python-exec's default).
        #[serde(skip_serializing_if = "Option::is_none")]
        stdin_kind: Option<&'static str>,
    }
    let stdin = match (&tests.fn_name, &tests.inputs[i]) {
        (Some(_), _) | (None, Value::Null) => String::new(),
        (None, Value::String(s)) => s.clone(),
        // A non-string input is given as its JSON text.
        (None, other) => compare::to_json(other),
    };
    // A call's arguments as the text they came in, so big integers reach the program exactly.
    let args = match &tests.fn_name {
        None => None,
        Some(_) => {
            let text = match &tests.inputs[i] {
                Value::String(s) => {
                    for line in s.split('\n') {
                        serde_json::from_str::<serde::de::IgnoredAny>(line)
                            .map_err(|_| CaseResult::Error)?;
                    }
                    format!("[{}]", s.split('\n').collect::<Vec<_>>().join(","))
                }
                Value::Array(_) => compare::to_json(&tests.inputs[i]),
                other => format!("[{}]", compare::to_json(other)),
            };
            Some(serde_json::value::RawValue::from_string(text).map_err(|_| CaseResult::Error)?)
        }
    };
    let run = Run {
        code: program,
        stdin: &stdin,
        prelude: prelude(tests, opts),
        max_output_chars: opts.max_output_chars,
        call: tests
            .fn_name
            .as_deref()
            .zip(args.as_deref())
            .map(|(f, args)| Call {
                fn_name: f,
                args,
                solution_class: match opts.semantics {
                    Semantics::PrimeCode | Semantics::Judge => {
                        json!(program.contains("class Solution"))
                    }
                    Semantics::SandboxFusion { .. } => json!("fallback"),
                },
            }),
        evaluate,
        stdin_kind: matches!(opts.semantics, Semantics::SandboxFusion { .. }).then_some("pipe"),
    };
    serde_json::to_string(&run).map_err(|_| CaseResult::Error)
}

/// Judge what the runner returned for case `i`: `Ok(output)` is python-exec's program-mode
/// JSON; `Err(timed_out)` is a failed call (a timeout, or a sandbox fault).
pub fn judge(run: Result<&str, bool>, tests: &Tests, i: usize, semantics: Semantics) -> CaseResult {
    let out: Value = match run {
        Err(true) => return CaseResult::Timeout,
        Err(false) => return CaseResult::Error,
        Ok(text) => match serde_json::from_str::<Value>(text) {
            Ok(v) => v,
            Err(_) => return CaseResult::Error,
        },
    };
    // Only stdout decides: a program may write what it likes to stderr.
    let cut = match out.get("stdout_truncated") {
        Some(v) => v == &json!(true),
        None => out["truncated"] == json!(true),
    };
    if cut {
        return CaseResult::Fail;
    }
    let ok = out["ok"] == json!(true);
    let compiled = out["phase"] == json!("run");
    let prime = semantics == Semantics::Judge;
    if !compiled {
        return CaseResult::NotRun;
    }
    if !ok {
        // prime_code counts output printed before `sys.exit(n)` (its harness swallows
        // `SystemExit`); SandboxFusion sees a process that exited with n.
        let exited = out["exited"] == json!(true);
        if !(prime && exited && tests.fn_name.is_none()) {
            return CaseResult::raised(semantics);
        }
    }
    let stdout = out["stdout"].as_str().unwrap_or("");
    let expected = &tests.outputs[i];
    match (&tests.fn_name, semantics) {
        (None, Semantics::PrimeCode | Semantics::Judge) => {
            let Value::String(want) = expected else {
                return CaseResult::Error;
            };
            pass(compare::prime_stdio(stdout, want))
        }
        (None, Semantics::SandboxFusion { .. }) => match expected {
            Value::Null => CaseResult::Pass,
            Value::String(want) => pass(compare::sandbox_fusion_stdio(stdout, want)),
            other => pass(compare::sandbox_fusion_stdio(stdout, &other.to_string())),
        },
        (Some(_), semantics) => {
            let Some(text) = out["result"].as_str() else {
                return CaseResult::Error;
            };
            let Ok(result) = compare::parse_json(text) else {
                return CaseResult::Error;
            };
            match semantics {
                Semantics::PrimeCode | Semantics::Judge => {
                    let want = match expected {
                        Value::String(s) => match compare::parse_json(s) {
                            Ok(v) => v,
                            Err(_) => return CaseResult::Error,
                        },
                        v => v.clone(),
                    };
                    pass(compare::prime_call(&result, &want))
                }
                Semantics::SandboxFusion { .. } => {
                    // SandboxFusion's wrapper runs the program and prints the result after
                    // whatever the program printed, in one stdout.
                    let printed = format!(
                        "{stdout}{}\n",
                        compare::sandbox_fusion_printed(text, &result)
                    );
                    let want = match expected {
                        Value::Null => return CaseResult::Pass,
                        Value::String(s) => s.clone(),
                        v => v.to_string(),
                    };
                    pass(compare::sandbox_fusion_stdio(&printed, &want))
                }
            }
        }
    }
}

fn pass(ok: bool) -> CaseResult {
    if ok {
        CaseResult::Pass
    } else {
        CaseResult::Fail
    }
}

/// The cases to run: those that count toward the score.
pub fn cases_to_run(tests: &Tests, semantics: Semantics) -> usize {
    match semantics {
        Semantics::PrimeCode | Semantics::Judge | Semantics::SandboxFusion { continuous: true } => {
            tests.inputs.len().min(SCORED_CASES)
        }
        Semantics::SandboxFusion { continuous: false } => tests.inputs.len(),
    }
}

/// Calls one `tools.call-many` accepts (the host's `MAX_CALL_MANY_CALLS`).
pub const MAX_CALLS_PER_BATCH: usize = 256;

/// The score of the cases run: the fraction that passed (1.0 when all did).
pub fn score(results: &[CaseResult]) -> f64 {
    if results.is_empty() {
        return 0.0;
    }
    let passed = results.iter().filter(|r| **r == CaseResult::Pass).count();
    passed as f64 / results.len() as f64
}

#[cfg(target_arch = "wasm32")]
mod component;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extraction_as_verl() {
        let p = Semantics::Judge;
        let sf = Semantics::SandboxFusion { continuous: true };
        let t = "Here:\n```python\nprint(1)\n```\nand\n```python\nprint(2)\n```\n";
        assert_eq!(extract(t, p).as_deref(), Some("\nprint(2)\n"));
        assert_eq!(extract(t, sf).as_deref(), Some("\nprint(2)\n"));
        assert_eq!(extract("print(3)", p).as_deref(), Some("print(3)"));
        assert_eq!(extract("print(3)", sf), None);
        let plain = "x\n```py\nprint(4)\n```\n```\nprint(5)\n```";
        assert_eq!(extract(plain, sf).as_deref(), Some("print(4)\n"));
        assert_eq!(
            extract("a\n```\nprint(6)\n```", sf).as_deref(),
            Some("\nprint(6)\n")
        );
        // prime_code with only a plain fence takes the prose before it.
        assert_eq!(
            extract("prose\n```\nprint(7)\n```", p).as_deref(),
            Some("prose\n")
        );
    }

    #[test]
    fn tests_from_verls_ground_truth() {
        let row = json!({"reward_model": {"ground_truth":
            "{\"inputs\": [\"1 2\\n\"], \"outputs\": [\"3\\n\"]}"}});
        let t = Tests::from_row(&row).expect("parses");
        assert_eq!(t.inputs, vec![json!("1 2\n")]);
        assert_eq!(t.fn_name, None);
        let call = Tests::parse(&json!({"fn_name": "f", "inputs": ["1\n2"], "outputs": ["3"]}))
            .expect("parses");
        assert_eq!(call.fn_name.as_deref(), Some("f"));
        let asserts = Tests::parse(&json!({"assert_case": ["assert f(1) == 2"]})).expect("parses");
        assert_eq!(asserts.inputs.len(), 1);
        assert!(Tests::parse(&json!({"inputs": [], "outputs": []})).is_err());
        assert!(Tests::parse(&json!({"inputs": ["1"], "outputs": []})).is_err());
        assert!(
            Tests::from_row(&json!({}))
                .expect_err("an error")
                .contains("ground_truth")
        );
    }

    #[test]
    fn case_args_for_each_mode() {
        let opts = Options::from_row(&json!({})).expect("parses");
        let t = Tests::parse(&json!({"fn_name": "f", "inputs": ["1\n[2]"], "outputs": ["3"]}))
            .expect("parses");
        let a: Value = serde_json::from_str(
            &case_args("class Solution: pass", &t, 0, &opts, None).expect("parses"),
        )
        .expect("JSON");
        assert_eq!(a["call"]["args"], json!([1, [2]]));
        assert_eq!(a["call"]["solution_class"], json!(true));
        assert_eq!(a["prelude"], json!(true));
        let stdio =
            Tests::parse(&json!({"inputs": ["1 2\n"], "outputs": ["3\n"]})).expect("parses");
        let a: Value =
            serde_json::from_str(&case_args("print(3)", &stdio, 0, &opts, None).expect("args"))
                .expect("JSON");
        assert_eq!((&a["stdin"], &a["call"]), (&json!("1 2\n"), &Value::Null));
        assert_eq!(a["stdin_kind"], Value::Null, "a judge's stdin: a file");
        let sf = Options::from_row(&json!({"code_reward": {"semantics": "sandbox_fusion"}}))
            .expect("parses");
        let a: Value =
            serde_json::from_str(&case_args("print(3)", &stdio, 0, &sf, None).expect("args"))
                .expect("JSON");
        assert_eq!(
            a["stdin_kind"],
            json!("pipe"),
            "SandboxFusion's stdin: a pipe"
        );
        // Big integers reach the program as written.
        let big = Tests::parse(&json!(
            "{\"fn_name\": \"f\", \"inputs\": [\"123456789012345678901234\"], \"outputs\": [\"1\"]}"
        ))
        .expect("parses");
        let text = case_args("", &big, 0, &opts, None).expect("args");
        assert!(
            text.contains("\"args\":[123456789012345678901234]"),
            "{text}"
        );
        let listed = Tests::parse(&json!(
            "{\"fn_name\": \"f\", \"inputs\": [[123456789012345678901234, 1]], \"outputs\": [\"1\"]}"
        ))
        .expect("parses");
        let text = case_args("", &listed, 0, &opts, None).expect("args");
        assert!(
            text.contains("\"args\":[123456789012345678901234,1]"),
            "{text}"
        );
        let bad = Tests::parse(&json!({"fn_name": "f", "inputs": ["1\n"], "outputs": ["3"]}))
            .expect("parses");
        assert_eq!(case_args("", &bad, 0, &opts, None), Err(CaseResult::Error));
    }

    #[test]
    fn an_assert_case_never_enters_the_program() {
        let opts = Options::from_row(&json!({"code_reward": {"semantics": "sandbox_fusion"}}))
            .expect("parses");
        let t =
            Tests::parse(&json!({"assert_case": ["assert add(17, 25) == 42"]})).expect("parses");
        let program = "def add(a, b):\n    return a + b\n";
        let steps = json!([{"source": "lambda: add(17, 25)", "args": [], "held": [],
                            "bind": null, "want": true}]);
        let text = case_args(program, &t, 0, &opts, Some(&steps)).expect("args");
        let a: Value = serde_json::from_str(&text).expect("JSON");
        assert_eq!(a["code"], json!(program));
        assert_eq!(a["evaluate"], steps);
        assert_eq!(a["prelude"], json!(false));
        assert!(!text.contains("42") && !text.contains("assert"), "{text}");
        // Without parts (a row with no `assert_case`) there is no `evaluate`.
        let a: Value = serde_json::from_str(&case_args(program, &t, 0, &opts, None).expect("args"))
            .expect("JSON");
        assert_eq!(
            (&a["code"], &a["evaluate"]),
            (&json!(program), &Value::Null)
        );
        assert_eq!(
            CaseResult::raised(Semantics::SandboxFusion { continuous: true }),
            CaseResult::NotRun
        );
        assert_eq!(CaseResult::raised(Semantics::Judge), CaseResult::Error);
    }

    #[test]
    fn judging_and_scoring() {
        let t =
            Tests::parse(&json!({"inputs": ["", ""], "outputs": ["3\n", "4\n"]})).expect("parses");
        let run = |stdout: &str, ok: bool, phase: &str, etype: Value| {
            let exited = etype == json!("SystemExit");
            json!({"ok": ok, "phase": phase, "stdout": stdout, "error_type": etype,
                   "exited": exited, "truncated": false})
            .to_string()
        };
        let p = Semantics::Judge;
        assert_eq!(
            judge(Ok(&run("3\n", true, "run", Value::Null)), &t, 0, p),
            CaseResult::Pass
        );
        assert_eq!(
            judge(Ok(&run("5\n", true, "run", Value::Null)), &t, 0, p),
            CaseResult::Fail
        );
        assert_eq!(
            judge(
                Ok(&run("", false, "compile", json!("SyntaxError"))),
                &t,
                0,
                p
            ),
            CaseResult::NotRun
        );
        assert_eq!(
            judge(Ok(&run("3\n", false, "run", json!("SystemExit"))), &t, 0, p),
            CaseResult::Pass
        );
        let sf = Semantics::SandboxFusion { continuous: true };
        assert_eq!(
            judge(
                Ok(&run("3\n", false, "run", json!("SystemExit"))),
                &t,
                0,
                sf
            ),
            CaseResult::NotRun
        );
        assert_eq!(judge(Err(true), &t, 0, sf), CaseResult::Timeout);
        assert_eq!(CaseResult::Timeout.code(sf), json!(-3));
        assert_eq!(CaseResult::Timeout.code(p), json!(-1));
        assert_eq!(score(&[CaseResult::Pass, CaseResult::Fail]), 0.5);
        assert_eq!(score(&[CaseResult::Pass; 3]), 1.0);
    }
}
