//! Tries to read files, list directories, open sockets and read env vars and args; reports what
//! it got in the metadata so the host test can assert every attempt was denied.
use rollbox_sdk::tensor::{Tensor, TensorData};
use rollbox_sdk::{Episode, Output, Workflow};
struct Snoop;
impl Workflow for Snoop {
    fn run_episode(_: Episode) -> Result<Option<Output>, rollbox_sdk::Error> {
        let file = std::fs::read("/etc/passwd").is_ok() || std::fs::read("etc/passwd").is_ok();
        let dir = std::fs::read_dir("/").is_ok() || std::fs::read_dir(".").is_ok();
        let write = std::fs::write("/tmp/rollbox-escape", b"x").is_ok();
        let tcp = std::net::TcpStream::connect("127.0.0.1:22").is_ok();
        let udp = std::net::UdpSocket::bind("0.0.0.0:0").is_ok();
        let dns = std::net::ToSocketAddrs::to_socket_addrs(&("localhost", 80)).is_ok();
        let env: Vec<(String, String)> = std::env::vars().collect();
        let args: Vec<String> = std::env::args().collect();
        let t = Tensor::create(&TensorData::I32(vec![0]), &[1]).map_err(|e| e.to_string())?;
        let mut out = Output::new(vec![("x".into(), t)]);
        out.metadata = serde_json::json!({
            "file": file, "dir": dir, "write": write, "tcp": tcp, "udp": udp, "dns": dns,
            "env": env.len(), "args": args.len(),
        });
        Ok(Some(out))
    }
}
rollbox_sdk::export_workflow!(Snoop);
fn main() {}
