//! A reward component returning `data["value"]` (default 1.0), for load and world tests.
use rollbox_sdk::Reward;
use rollbox_sdk::reward::RewardInput;
struct Const;
impl Reward for Const {
    fn score(input: RewardInput) -> Result<f64, rollbox_sdk::Error> {
        let row: serde_json::Value =
            serde_json::from_str(&input.data).map_err(|e| e.to_string())?;
        Ok(row["value"].as_f64().unwrap_or(1.0))
    }
}
rollbox_sdk::export_reward!(Const);
fn main() {}
