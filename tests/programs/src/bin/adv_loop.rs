//! Spins forever: must be stopped by the wall-clock limit (or fuel).
use rollbox_sdk::{Episode, Output, Workflow};
struct Spin;
impl Workflow for Spin {
    fn run_episode(_: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let mut x: u64 = 0;
        loop {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }
}
rollbox_sdk::export_workflow!(Spin);
fn main() {}
