//! Returns an error string of `data["bytes"]` bytes (default 1 GiB).
use rollbox_sdk::{Episode, Output, Workflow};
struct Big;
impl Workflow for Big {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let n = e.data["bytes"].as_u64().unwrap_or(1 << 30) as usize;
        Err("x".repeat(n).into())
    }
}
rollbox_sdk::export_workflow!(Big);
fn main() {}
