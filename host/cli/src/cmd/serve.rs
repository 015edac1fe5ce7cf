//! `rollbox serve`: the flags of the HTTP server, made into a [`ServeSpec`] for
//! `rollbox-serve`, which is the server.

use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use rollbox_serve::{ServeSpec, Server, Tls};

use super::rollout::SetupArgs;

/// Flags of `rollbox serve`.
#[derive(Args, Debug)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// Connections one client address may hold open at once; more are closed as they are
    /// accepted (the rest of the slots stay free for other clients and health probes).
    #[arg(long, default_value_t = 128, value_name = "N")]
    max_connections_per_ip: usize,
    /// Tenants (TOML): their API keys, as SHA-256 hashes, and quotas. Every request but
    /// `GET /healthz` and `/readyz` must then carry `Authorization: Bearer KEY` (or the key
    /// as a URL's password); SIGHUP reads the file again. See docs/serve.md.
    #[arg(long, value_name = "FILE")]
    tenants: Option<PathBuf>,
    /// Listen on an address other than loopback with no --tenants: anyone who reaches the
    /// port can run episodes, rewards and code.
    #[arg(long)]
    insecure_no_auth: bool,
    /// On SIGTERM or SIGINT: stop accepting connections, let requests in flight finish for
    /// this long, then cancel the rest (their episodes and engine requests with them) and exit.
    #[arg(long, default_value = "30s", value_parser = rollbox_runtime::limits::parse_duration, value_name = "DURATION")]
    drain_timeout: Duration,
    /// Serve HTTPS with this certificate chain (PEM, leaf first); needs --tls-key.
    #[arg(long, value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// The private key of --tls-cert (PEM: PKCS#8, PKCS#1 or SEC1).
    #[arg(long, value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Another workflow a `/v1/episodes` request may name with `"workflow": "NAME"` (a `.wasm`
    /// path or a built-in's name; repeatable). `--workflow` is the one a request that names
    /// none runs, named `default`.
    #[arg(long, value_name = "NAME=WORKFLOW", value_parser = parse_named_workflow)]
    extra_workflow: Vec<(String, PathBuf)>,
    #[command(flatten)]
    pub setup: SetupArgs,
}

/// `NAME=WORKFLOW` of `--extra-workflow`.
fn parse_named_workflow(s: &str) -> Result<(String, PathBuf), String> {
    let (name, spec) = s
        .split_once('=')
        .ok_or_else(|| format!("`{s}`: give NAME=WORKFLOW (a .wasm path or a built-in's name)"))?;
    rollbox_serve::check_workflow_name(name)?;
    if spec.is_empty() {
        return Err(format!("`{s}`: the workflow after `=` is empty"));
    }
    Ok((name.to_string(), PathBuf::from(spec)))
}

impl ServeArgs {
    /// The server these flags describe.
    pub fn spec(&self) -> anyhow::Result<ServeSpec> {
        let mut host = self.setup.spec()?;
        for (name, path) in &self.extra_workflow {
            if host.workflows.insert(name.clone(), path.clone()).is_some() {
                anyhow::bail!(
                    "--extra-workflow {name} is given twice: give each workflow one name"
                );
            }
        }
        let mut spec = ServeSpec::new(host, self.listen.clone());
        spec.options = self.setup.options();
        spec.max_connections_per_ip = self.max_connections_per_ip;
        spec.tenants = self.tenants.clone();
        spec.insecure_no_auth = self.insecure_no_auth;
        spec.drain_timeout = self.drain_timeout;
        spec.tls = match (&self.tls_cert, &self.tls_key) {
            (Some(cert), Some(key)) => Some(Tls {
                cert: cert.clone(),
                key: key.clone(),
            }),
            _ => None,
        };
        Ok(spec)
    }
}

/// Serve until a signal drains the server.
pub async fn run(a: ServeArgs) -> anyhow::Result<()> {
    let server = Server::start(a.spec()?).await?;
    crate::alloc::release_setup_memory();
    server.run().await
}
