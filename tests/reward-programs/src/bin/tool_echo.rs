//! A tool component that echoes its arguments, for load and world tests.
use rollbox_sdk::Tool;
struct Echo;
impl Tool for Echo {
    fn call(name: String, args: String) -> Result<String, rollbox_sdk::Error> {
        Ok(format!("{name}:{args}"))
    }
}
rollbox_sdk::export_tool!(Echo);
fn main() {}
