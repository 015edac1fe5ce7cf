//! Opens `data["open"]` sessions (default 1) of the tool `data["tool"]`, makes each of
//! `data["calls"]` in order (the first session's arguments, or `{"session": i, "args": ...}`),
//! and returns what happened in the metadata: the error of each refused open, then each call's
//! output or error. With `data["forget"]`, the sessions are
//! never dropped (the host must close them when the episode ends).
use rollbox_sdk::tensor::{Tensor, TensorData};
use rollbox_sdk::tools::Session;
use rollbox_sdk::{Episode, Output, Workflow};
use serde_json::{Value, json};
struct Caller;
impl Workflow for Caller {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let name = e.data["tool"].as_str().unwrap_or("");
        let mut sessions = Vec::new();
        let mut refused = Vec::new();
        for _ in 0..e.data["open"].as_u64().unwrap_or(1) {
            match Session::open(name) {
                Ok(s) => sessions.push(s),
                Err(err) => refused.push(json!(format!("{err:?}"))),
            }
        }
        let mut calls = Vec::new();
        for c in e.data["calls"].as_array().into_iter().flatten() {
            // `{"session": i, "args": {...}}` calls session i; anything else is session 0's args.
            let (i, args) = match c.get("args") {
                Some(args) => (c["session"].as_u64().unwrap_or(0) as usize, args),
                None => (0, c),
            };
            let Some(session) = sessions.get(i) else {
                calls.push(json!({"error": "no such session"}));
                continue;
            };
            calls.push(match session.call(&args.to_string()) {
                Ok(r) => json!({"output": r.output}),
                Err(err) => json!({"error": format!("{err:?}")}),
            });
        }
        if e.data["forget"].as_bool() == Some(true) {
            sessions.into_iter().for_each(std::mem::forget);
        }
        let t = Tensor::create(&TensorData::I32(vec![0]), &[1]).map_err(|e| e.to_string())?;
        let mut out = Output::new(vec![("x".into(), t)]);
        out.metadata = json!({"opened": Value::from(e.data["open"].as_u64().unwrap_or(1) as usize - refused.len()), "refused": refused, "calls": calls});
        Ok(Some(out))
    }
}
rollbox_sdk::export_workflow!(Caller);
fn main() {}
