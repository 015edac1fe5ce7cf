//! Returns nothing at once: the sandbox benchmark's workflow.
use rollbox_sdk::{Episode, Output, Workflow};
struct Trivial;
impl Workflow for Trivial {
    fn run_episode(_: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        Ok(None)
    }
}
rollbox_sdk::export_workflow!(Trivial);
fn main() {}
