//! A reward that never returns: must be interrupted at its timeout on every attempt.
use rollbox_sdk::Reward;
use rollbox_sdk::reward::RewardInput;
struct Spin;
impl Reward for Spin {
    fn score(_: RewardInput) -> Result<f64, rollbox_sdk::Error> {
        let mut x: u64 = 0;
        loop {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }
}
rollbox_sdk::export_reward!(Spin);
fn main() {}
