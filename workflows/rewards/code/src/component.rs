//! The component: the `reward` world's `score` over the plain-Rust parts of the crate, running
//! each case through the registered runner tool and logging each case's result.

use rollbox_sdk::Reward;
use rollbox_sdk::reward::{RewardInput, log, tools};
use serde_json::{Map, Value, json};

use crate::asserts::{self, MAX_ASSERT_CALL_BYTES, MAX_ASSERT_CALL_CASES, Plan};
use crate::{
    CaseResult, Options, Semantics, Tests, case_args, cases_to_run, extract, judge, prelude, prime,
    score,
};

struct Code;

/// What one runner call came back with.
enum Ran {
    Output(String),
    TimedOut,
    Failed,
}

/// Run each of `args` through the runner, in order: `call-many` takes at most
/// MAX_CALLS_PER_BATCH calls (more are all refused), so they go batch by batch, under the
/// reward's own deadline. The reward's error when the runner is not registered.
fn run_all(runner: &str, args: Vec<String>) -> Result<Vec<Ran>, rollbox_sdk::Error> {
    let calls: Vec<tools::ToolCall> = args
        .into_iter()
        .map(|args| tools::ToolCall {
            name: runner.to_string(),
            args,
        })
        .collect();
    let mut out = Vec::with_capacity(calls.len());
    for result in calls
        .chunks(crate::MAX_CALLS_PER_BATCH)
        .flat_map(tools::call_many)
    {
        out.push(match result {
            Ok(r) => Ran::Output(r.output),
            Err(tools::Error::Timeout(_)) => Ran::TimedOut,
            Err(tools::Error::Unknown(m)) => {
                return Err(format!(
                    "the code reward runs each case with the tool `{runner}`, which is not registered ({m}); register python-exec under that name (`--tool {runner}=python_exec.wasm`) or name yours in `code_reward.runner`"
                )
                .into());
            }
            Err(_) => Ran::Failed,
        });
    }
    Ok(out)
}

/// Why a call of an assert mode gave no reply to read.
fn no_reply(mode: &str, ran: &Ran) -> String {
    match ran {
        Ran::TimedOut => format!("{mode} timed out in the runner"),
        _ => format!("{mode} failed in the runner"),
    }
}

/// Each of the first `n` cases' split of its `assert_case` (`None`: the row has none), from
/// `assert-plan` calls in clean instances.
fn plan(
    program: &str,
    tests: &Tests,
    n: usize,
    prelude: bool,
    runner: &str,
) -> Result<Vec<Option<Plan>>, rollbox_sdk::Error> {
    let mut plans = vec![None; n];
    let cases = &tests.assert_case[..n.min(tests.assert_case.len())];
    if cases.is_empty() {
        return Ok(plans);
    }
    let sizes: Vec<usize> = cases.iter().map(|c| c.len() + 8).collect();
    let budget = MAX_ASSERT_CALL_BYTES.saturating_sub(program.len());
    let groups = asserts::batches(&sizes, budget, MAX_ASSERT_CALL_CASES);
    let args = groups
        .iter()
        .map(|g| asserts::plan_args(program, &cases[g.clone()], prelude))
        .collect();
    for (g, ran) in groups.into_iter().zip(run_all(runner, args)?) {
        let parsed = match &ran {
            Ran::Output(text) => asserts::parse_plan(text, g.len()),
            _ => Err(no_reply("assert-plan", &ran)),
        };
        match parsed {
            Ok(list) => {
                for (i, p) in g.zip(list) {
                    plans[i] = Some(p);
                }
            }
            Err(why) => {
                for i in g {
                    plans[i] = Some(Err(why.clone()));
                }
            }
        }
    }
    Ok(plans)
}

impl Reward for Code {
    fn score(input: RewardInput) -> Result<f64, rollbox_sdk::Error> {
        let data: Value =
            serde_json::from_str(&input.data).map_err(|e| format!("the row is not JSON: {e}"))?;
        let opts = Options::from_row(&data)?;
        let tests = Tests::from_row(&data)?;
        let Some(program) = extract(&input.completion, opts.semantics) else {
            log::log(log::Level::Info, "no code block in the completion: score 0");
            log::stat("code/no_program", 1.0);
            return Ok(0.0);
        };
        if opts.semantics == Semantics::PrimeCode {
            return score_prime(&program, &tests, &opts);
        }
        let n = cases_to_run(&tests, opts.semantics);
        let prelude = prelude(&tests, &opts);
        // Why a case's assertion failed or could not be checked, by case.
        let mut notes = Map::new();
        let plans = plan(&program, &tests, n, prelude, &opts.runner)?;
        let mut results: Vec<Option<CaseResult>> = vec![None; n];
        let mut args = Vec::new();
        let mut index = Vec::new();
        for (i, slot) in results.iter_mut().enumerate() {
            let steps = match &plans[i] {
                Some(Err(why)) => {
                    notes.insert(i.to_string(), json!(why));
                    *slot = Some(CaseResult::Error);
                    continue;
                }
                Some(Ok(steps)) => Some(steps),
                None => None,
            };
            match case_args(&program, &tests, i, &opts, steps) {
                Ok(a) => {
                    args.push(a);
                    index.push(i);
                }
                Err(r) => *slot = Some(r),
            }
        }
        // The cases whose run ended and whose assertion is still to check.
        let mut checked = Vec::new();
        let mut to_check = Vec::new();
        for (i, ran) in index.into_iter().zip(run_all(&opts.runner, args)?) {
            let run = match &ran {
                Ran::Output(text) => Ok(text.as_str()),
                Ran::TimedOut => Err(true),
                Ran::Failed => Err(false),
            };
            let judged = judge(run, &tests, i, opts.semantics);
            results[i] = Some(judged);
            if let Some(Ok(steps)) = &plans[i]
                && matches!(judged, CaseResult::Pass | CaseResult::Fail)
            {
                match run.ok().and_then(asserts::evaluated) {
                    Some(values) => {
                        checked.push(i);
                        to_check.push(asserts::check_case(&tests.assert_case[i], steps, &values));
                    }
                    None => {
                        notes.insert(i.to_string(), json!("the run never got to the assertion"));
                        let failed = asserts::failed(opts.semantics);
                        results[i] = Some(asserts::with_assertion(judged, failed));
                    }
                }
            }
        }
        if !to_check.is_empty() {
            let sizes: Vec<usize> = to_check.iter().map(|c| c.to_string().len()).collect();
            let budget = MAX_ASSERT_CALL_BYTES.saturating_sub(program.len());
            let groups = asserts::batches(&sizes, budget, MAX_ASSERT_CALL_CASES);
            let args = groups
                .iter()
                .map(|g| asserts::check_args(&program, &to_check[g.clone()], prelude))
                .collect();
            for (g, ran) in groups.into_iter().zip(run_all(&opts.runner, args)?) {
                let verdicts = match &ran {
                    Ran::Output(text) => asserts::parse_check(text, g.len()),
                    _ => Err(no_reply("assert-check", &ran)),
                };
                for (k, &i) in checked[g].iter().enumerate() {
                    let assertion = match verdicts.as_ref().map(|v| v.get(k)) {
                        Ok(Some(Ok(()))) => CaseResult::Pass,
                        Ok(Some(Err(why))) => {
                            notes.insert(i.to_string(), json!(why));
                            asserts::failed(opts.semantics)
                        }
                        Ok(None) => CaseResult::Error,
                        Err(why) => {
                            notes.insert(i.to_string(), json!(why));
                            CaseResult::Error
                        }
                    };
                    if let Some(run) = results[i] {
                        results[i] = Some(asserts::with_assertion(run, assertion));
                    }
                }
            }
        }
        let results: Vec<CaseResult> = results
            .into_iter()
            .map(|r| r.unwrap_or(CaseResult::Error))
            .collect();
        let codes: Vec<Value> = results.iter().map(|r| r.code(opts.semantics)).collect();
        log::log(log::Level::Info, &json!({ "cases": codes }).to_string());
        if !notes.is_empty() {
            log::log(
                log::Level::Info,
                &json!({ "assert_case": notes }).to_string(),
            );
        }
        let s = score(&results);
        log::stat("code/cases", results.len() as f64);
        log::stat(
            "code/passed",
            results.iter().filter(|r| **r == CaseResult::Pass).count() as f64,
        );
        Ok(s)
    }
}

/// verl's `prime_code` score ([`crate::prime`]): the first pass (call-based: every case
/// called, the results checked in a clean instance), then, unless every case passed, the
/// first 10 cases each run as a stdio program.
fn score_prime(program: &str, tests: &Tests, opts: &Options) -> Result<f64, rollbox_sdk::Error> {
    if !prime::has_io_cases(tests) {
        log::log(
            log::Level::Info,
            "prime_code reads only `inputs` and `outputs`, and the row has `assert_case` alone: score 0 (`code_reward.semantics` `judge` or `sandbox_fusion` runs them)",
        );
        log::stat("code/cases", 0.0);
        return Ok(0.0);
    }
    let cap = opts.max_output_chars;
    if let Some(fn_name) = &tests.fn_name {
        let inputs: Vec<Option<String>> = tests.inputs.iter().map(prime::input_text).collect();
        let args = inputs
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, text)| prime::call_args(program, fn_name, text, cap, i == 0))
            .collect();
        let mut all_ran = inputs.iter().all(Option::is_some);
        let mut silent = false;
        // Results Python's `==` must decide in a clean instance (not plain JSON).
        let mut to_check = Vec::new();
        let mut all_pass = true;
        if all_ran {
            for (i, ran) in run_all(&opts.runner, args)?.into_iter().enumerate() {
                let run = prime::read_run(reply(&ran));
                silent |= matches!(run, prime::Run::Ran { silent: true, .. });
                match (run, &tests.outputs[i]) {
                    (prime::Run::Ran { value: Some(v), .. }, Value::String(want)) => {
                        match prime::decide_plain(&v, want) {
                            Some(pass) => all_pass &= pass,
                            None => to_check.push((v, want.clone())),
                        }
                    }
                    _ => all_ran = false,
                }
            }
        }
        if all_ran && all_pass && !to_check.is_empty() {
            let verdicts = match run_all(&opts.runner, vec![prime::check_args(&to_check)])?.pop() {
                Some(Ran::Output(text)) => prime::parse_check(&text, to_check.len()),
                Some(ran) => Err(no_reply("prime-call-check", &ran)),
                None => Err("prime-call-check gave no reply".into()),
            };
            match verdicts {
                Ok(v) => all_pass = v.iter().all(|p| *p),
                Err(why) => {
                    log::log(log::Level::Warn, &why);
                    all_pass = false;
                }
            }
        }
        if all_ran && all_pass {
            let n = tests.inputs.len();
            log::log(
                log::Level::Info,
                &json!({ "cases": vec![true; n] }).to_string(),
            );
            log::stat("code/cases", n as f64);
            log::stat("code/passed", n as f64);
            return Ok(1.0);
        }
        if prime::second_pass_is_zero(silent, tests) {
            // The program prints nothing as a stdio program and no expected output is
            // blank: every case of verl's second pass fails, so it is not run.
            let n = prime::second_pass_cases(tests);
            let note = "not run: the program prints nothing as a stdio program";
            log::log(
                log::Level::Info,
                &json!({ "cases": vec![false; n], "second_pass": note }).to_string(),
            );
            log::stat("code/cases", n as f64);
            log::stat("code/passed", 0.0);
            return Ok(0.0);
        }
    }
    // The second pass: each of the first 10 cases as a stdio program (a call-based one too:
    // verl drops `fn_name` here), its arguments' text as stdin.
    let n = prime::second_pass_cases(tests);
    let mut results = vec![CaseResult::Error; n];
    let mut args = Vec::new();
    let mut index = Vec::new();
    for (i, input) in tests.inputs[..n].iter().enumerate() {
        if let Some(stdin) = prime::input_text(input) {
            args.push(prime::stdio_args(program, &stdin, opts.max_output_chars));
            index.push(i);
        }
    }
    for (i, ran) in index.into_iter().zip(run_all(&opts.runner, args)?) {
        results[i] = prime::judge_stdio(&prime::read_run(reply(&ran)), &tests.outputs[i]);
    }
    let codes: Vec<Value> = results.iter().map(|r| r.code(opts.semantics)).collect();
    log::log(log::Level::Info, &json!({ "cases": codes }).to_string());
    log::stat("code/cases", results.len() as f64);
    log::stat(
        "code/passed",
        results.iter().filter(|r| **r == CaseResult::Pass).count() as f64,
    );
    Ok(score(&results))
}

fn reply(ran: &Ran) -> Result<&str, bool> {
    match ran {
        Ran::Output(text) => Ok(text.as_str()),
        Ran::TimedOut => Err(true),
        Ran::Failed => Err(false),
    }
}

rollbox_sdk::export_reward!(Code);
