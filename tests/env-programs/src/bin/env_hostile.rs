//! An environment that misbehaves on request: `step("loop")` spins, `step("alloc")` allocates
//! without bound, `step("nan")` gives a NaN reward, `step("list-metadata")` metadata that is
//! not an object, `step("err")` its own error; any other action counts the steps so far.
use std::cell::Cell;

use rollbox_sdk::Environment;
use rollbox_sdk::environment::Step;
use serde_json::json;

struct Hostile;

thread_local! {
    static STEPS: Cell<u64> = const { Cell::new(0) };
}

impl Environment for Hostile {
    fn reset(row: serde_json::Value) -> Result<String, rollbox_sdk::Error> {
        Ok(format!("reset with {row}"))
    }

    fn step(action: String) -> Result<Step, rollbox_sdk::Error> {
        let mut step = Step::observe("");
        match action.as_str() {
            "loop" => {
                let mut x = 0u64;
                loop {
                    x = std::hint::black_box(x.wrapping_add(1));
                }
            }
            "alloc" => {
                let mut keep = Vec::new();
                loop {
                    keep.push(vec![1u8; 1 << 20]);
                    std::hint::black_box(&keep);
                }
            }
            "nan" => step.reward = f64::NAN,
            "list-metadata" => step.metadata = json!([1, 2]),
            "err" => return Err(rollbox_sdk::Error::msg("the environment refuses")),
            _ => {
                STEPS.set(STEPS.get() + 1);
                step.observation = format!("step {}", STEPS.get());
            }
        }
        Ok(step)
    }
}

rollbox_sdk::export_environment!(Hostile);
fn main() {}
