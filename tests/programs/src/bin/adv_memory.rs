//! Allocates without bound: must hit the linear-memory limit.
use rollbox_sdk::{Episode, Output, Workflow};
struct Bomb;
impl Workflow for Bomb {
    fn run_episode(_: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let mut hoard: Vec<Vec<u8>> = Vec::new();
        loop {
            let mut chunk = vec![0u8; 16 << 20];
            chunk[0] = 1;
            hoard.push(std::hint::black_box(chunk));
        }
    }
}
rollbox_sdk::export_workflow!(Bomb);
fn main() {}
