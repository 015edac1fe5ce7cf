//! A reward that misbehaves as `data["mode"]` says: `panic`, `nan`, `err`, `alloc` (1 GiB),
//! `huge` (a 4 MiB error string), `snoop` (tries files, env, sockets; scores 1.0 only if all
//! were denied). Otherwise it returns `data["value"]`.
use rollbox_sdk::Reward;
use rollbox_sdk::reward::RewardInput;
struct Faulty;
impl Reward for Faulty {
    fn score(input: RewardInput) -> Result<f64, rollbox_sdk::Error> {
        let row: serde_json::Value =
            serde_json::from_str(&input.data).map_err(|e| e.to_string())?;
        match row["mode"].as_str().unwrap_or("") {
            "panic" => panic!("reward exploded"),
            "nan" => Ok(f64::NAN),
            "err" => Err("cannot parse the answer".into()),
            "alloc" => {
                let v = std::hint::black_box(vec![1u8; 1 << 30]);
                Ok(f64::from(v[12345]))
            }
            "huge" => Err("z".repeat(4 << 20).into()),
            "snoop" => {
                let file = std::fs::read("/etc/passwd").is_ok();
                let env = std::env::vars().count() > 0;
                let tcp = std::net::TcpStream::connect("127.0.0.1:22").is_ok();
                Ok(if file || env || tcp { 0.0 } else { 1.0 })
            }
            _ => Ok(row["value"].as_f64().unwrap_or(0.5)),
        }
    }
}
rollbox_sdk::export_reward!(Faulty);
fn main() {}
