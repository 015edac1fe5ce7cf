//! A tool that never returns: a flood of its calls must not starve other episodes' rewards.
use rollbox_sdk::Tool;
struct Spin;
impl Tool for Spin {
    fn call(_: String, _: String) -> Result<String, rollbox_sdk::Error> {
        let mut x: u64 = 0;
        loop {
            x = std::hint::black_box(x.wrapping_add(1));
        }
    }
}
rollbox_sdk::export_tool!(Spin);
fn main() {}
