//! The `rollbox` command line: parse, then hand the subcommand to its module in
//! [`rollbox::cmd`].

use std::ffi::OsString;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use rollbox::cmd;

/// Run reinforcement-learning rollout workflows as sandboxed WebAssembly components.
#[derive(Parser)]
#[command(
    name = "rollbox",
    version = rollbox_host::version::BuildInfo::new(env!("ROLLBOX_COMMIT")).to_string(),
    about,
    args_override_self = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Print the world a component targets, its imports and exports, size and sha256.
    Inspect(cmd::inspect::InspectArgs),
    /// List the components built into rollbox (selectable by name), with their sha256.
    Components(cmd::components::ComponentsArgs),
    /// Make a new component project (workflow, reward or tool; Rust or Python) that builds.
    New(cmd::new::NewArgs),
    /// Build a plain Python reward or tool function, unchanged, into a component.
    Build(cmd::build::BuildArgs),
    /// Run one episode of a workflow component and print the returned tensors or the error.
    Run(Box<cmd::run::RunArgs>),
    /// The main job: a dataset through a workflow, GRPO groups, safetensors batches.
    Rollout(Box<cmd::rollout::RolloutArgs>),
    /// The rollout controller over HTTP (POST /v1/episodes, POST /v1/version, POST /get_reward, /healthz, /metrics).
    Serve(Box<cmd::serve::ServeArgs>),
}

impl Command {
    /// The `--config-file` of the subcommands that take one.
    fn config_file(&self) -> Option<&std::path::Path> {
        match self {
            Command::Rollout(a) => a.setup.config_file.as_deref(),
            Command::Serve(a) => a.setup.config_file.as_deref(),
            Command::Inspect(_)
            | Command::Components(_)
            | Command::New(_)
            | Command::Build(_)
            | Command::Run(_) => None,
        }
    }
}

/// Parse the command line; with `--config-file`, again with the file's settings before the
/// command line's flags.
fn parse() -> anyhow::Result<Cli> {
    let args: Vec<OsString> = std::env::args_os().collect();
    let cli = Cli::parse_from(&args);
    match cli.command.config_file() {
        Some(path) => {
            let args = rollbox::config_file::with_file(&args, path)?;
            Ok(Cli::try_parse_from(args).unwrap_or_else(|e| e.exit()))
        }
        None => Ok(cli),
    }
}

fn main() -> ExitCode {
    // SAFETY: first thing in `main`; no other thread exists yet.
    unsafe { rollbox_host::process::init() };
    let outcome = parse().and_then(|cli| {
        rollbox_host::process::tokio_runtime()?.block_on(async move {
            match cli.command {
                Command::Inspect(a) => cmd::inspect::run(a).map(|()| ExitCode::SUCCESS),
                Command::Components(a) => cmd::components::run(a).map(|()| ExitCode::SUCCESS),
                Command::New(a) => cmd::new::run(a).map(|()| ExitCode::SUCCESS),
                Command::Build(a) => cmd::build::run(a).map(|()| ExitCode::SUCCESS),
                Command::Run(a) => cmd::run::run(*a).await,
                Command::Rollout(a) => cmd::rollout::run(*a).await.map(|()| ExitCode::SUCCESS),
                Command::Serve(a) => cmd::serve::run(*a).await.map(|()| ExitCode::SUCCESS),
            }
        })
    });
    outcome.unwrap_or_else(|e| {
        eprintln!("Error: {e:?}");
        ExitCode::FAILURE
    })
}
