//! Calls the tool `data["tool"]` with `data["args"]` and returns what happened in the metadata;
//! with `data["many"] = n`, `call-many` with n such calls (the metadata counts their errors).
use rollbox_sdk::tensor::{Tensor, TensorData};
use rollbox_sdk::tools::ToolCall;
use rollbox_sdk::{Episode, Output, Workflow, tools};
struct Caller;
impl Workflow for Caller {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let name = e.data["tool"].as_str().unwrap_or("");
        let args = e.data["args"].to_string();
        let outcome = if let Some(n) = e.data["many"].as_u64() {
            let call = ToolCall {
                name: name.to_string(),
                args: args.clone(),
            };
            let results = tools::call_many(&vec![call; n as usize]);
            serde_json::json!({"errors": results.iter().filter(|r| r.is_err()).count()})
        } else {
            match tools::call(name, &args) {
                Ok(r) => serde_json::json!({"output": r.output, "attempts": r.accounting.attempts}),
                Err(err) => serde_json::json!({"error": format!("{err:?}")}),
            }
        };
        let t = Tensor::create(&TensorData::I32(vec![0]), &[1]).map_err(|e| e.to_string())?;
        let mut out = Output::new(vec![("x".into(), t)]);
        out.metadata = outcome;
        Ok(Some(out))
    }
}
rollbox_sdk::export_workflow!(Caller);
fn main() {}
