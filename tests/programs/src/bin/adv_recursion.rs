//! Recurses without bound: must overflow the wasm stack, not the host's.
use rollbox_sdk::{Episode, Output, Workflow};
struct Deep;
#[inline(never)]
fn down(n: u64) -> u64 {
    let pad = std::hint::black_box([n; 8]);
    if pad[0] == u64::MAX {
        return 0;
    }
    down(pad[3] + 1) + pad[1]
}
impl Workflow for Deep {
    fn run_episode(_: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        Err(format!("{}", down(0)).into())
    }
}
rollbox_sdk::export_workflow!(Deep);
fn main() {}
