//! Prints `data["bytes"]` bytes (default 16 MiB) to stdout and stderr, then rejects.
use rollbox_sdk::{Episode, Output, Workflow};
use std::io::Write;
struct Chatty;
impl Workflow for Chatty {
    fn run_episode(e: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let n = e.data["bytes"].as_u64().unwrap_or(16 << 20) as usize;
        let line = [b'y'; 1023];
        let mut written = 0;
        while written < n {
            let mut out = std::io::stdout().lock();
            out.write_all(&line).map_err(|e| e.to_string())?;
            out.write_all(b"\n").map_err(|e| e.to_string())?;
            eprintln!("err line");
            written += 1024;
        }
        println!("done");
        Ok(None)
    }
}
rollbox_sdk::export_workflow!(Chatty);
fn main() {}
