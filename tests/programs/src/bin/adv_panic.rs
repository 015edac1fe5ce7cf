//! Panics: the episode fails with the panic message; the host serves the next one.
use rollbox_sdk::{Episode, Output, Workflow};
struct Boom;
impl Workflow for Boom {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        panic!("workflow blew up on row {}", e.id);
    }
}
rollbox_sdk::export_workflow!(Boom);
fn main() {}
