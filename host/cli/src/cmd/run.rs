//! `rollbox run`: one episode of a workflow component; prints the returned tensors or the
//! error, and can write the tensors to a safetensors file.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Args;
use rollbox_runtime::text::escape_control;
use rollbox_runtime::{EpisodeOutcome, EpisodeReport, EpisodeRequest};

use super::{ComponentArgs, parse_object};
use crate::limits::LimitArgs;

/// Flags of `rollbox run`.
#[derive(Args, Debug)]
pub struct RunArgs {
    /// The workflow component file (.wasm), or a built-in's name (`rlvr`, `multi-turn`).
    workflow: PathBuf,
    /// The dataset row, a JSON object.
    #[arg(long, default_value = "{}")]
    data: String,
    /// The workflow's configuration, a JSON object.
    #[arg(long, default_value = "{}")]
    config: String,
    /// Print JSON.
    #[arg(long)]
    json: bool,
    /// Write the accepted episode's tensors to this safetensors file (loadable with
    /// `safetensors.torch.load_file`), with provenance in its metadata.
    #[arg(long)]
    out: Option<PathBuf>,
    #[command(flatten)]
    components: ComponentArgs,
    #[command(flatten)]
    limits: LimitArgs,
}

/// Run the episode; a failed episode exits with status 1.
pub async fn run(a: RunArgs) -> anyhow::Result<ExitCode> {
    let spec = a.components.spec(
        a.workflow.clone(),
        &a.limits,
        parse_object("config", &a.config)?,
    )?;
    spec.ensure_model().await?;
    let host = spec.build()?;
    let request = EpisodeRequest::new("r0-s0", parse_object("data", &a.data)?);
    let report = host.run_episode(request).await;
    let sha = &host.workflow().info().sha256;
    if let (Some(path), EpisodeOutcome::Accepted(t)) = (&a.out, &report.outcome) {
        let mut meta = host.provenance().clone();
        meta.insert("episode".into(), report.id.clone());
        meta.insert("metadata".into(), t.metadata_json.to_string());
        rollbox_tensor::write_safetensors(path, &t.tensors, &meta)
            .with_context(|| format!("writing --out {}", path.display()))?;
    }
    if a.json {
        print_json(&report, sha)?;
    } else {
        print_text(&report);
    }
    Ok(match report.outcome {
        EpisodeOutcome::Failed(_) => ExitCode::FAILURE,
        _ => ExitCode::SUCCESS,
    })
}

fn print_json(report: &EpisodeReport, sha: &str) -> anyhow::Result<()> {
    let (tensors, metadata) = match &report.outcome {
        EpisodeOutcome::Accepted(t) => (
            t.tensors
                .iter()
                .map(|(k, v)| serde_json::json!({"name": k, "dtype": v.dtype().name(), "shape": v.shape()}))
                .collect(),
            t.metadata(),
        ),
        _ => (Vec::new(), serde_json::Value::Null),
    };
    let out = serde_json::json!({
        "summary": report.summary(),
        "error": match &report.outcome {
            EpisodeOutcome::Failed(f) => Some(failure(f)),
            _ => None,
        },
        "tensors": tensors,
        "metadata": metadata,
        "stats": report.stats,
        "reward_calls": report.reward_calls,
        "logs": report.logs,
        "stdout": report.stdout,
        "stderr": report.stderr,
        "sha256": sha,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(())
}

fn print_text(report: &EpisodeReport) {
    // Everything a guest chose (its fault's message, metadata, reward errors, stats, logs,
    // output) is shown with control characters escaped: no forged lines, no terminal escapes.
    let e = |s: &str| escape_control(s).into_owned();
    println!(
        "episode  {} ({:.1} ms, {} generate calls, {} tokens)",
        e(&report.id),
        report.wall.as_secs_f64() * 1e3,
        report.generate_calls,
        report.generated_tokens
    );
    match &report.outcome {
        EpisodeOutcome::Accepted(t) => {
            println!("accepted {} tensors", t.tensors.len());
            for (name, tensor) in &t.tensors {
                println!(
                    "  {:<16} {:<5} {:?}",
                    e(name),
                    tensor.dtype().name(),
                    tensor.shape()
                );
            }
            println!("metadata {}", e(t.metadata_json.as_str()));
        }
        EpisodeOutcome::Rejected => println!("rejected (the workflow returned nothing)"),
        EpisodeOutcome::Failed(f) => println!("failed   [{}] {}", f.kind(), e(&failure(f))),
    }
    for c in &report.reward_calls {
        println!(
            "reward   {} = {} ({} attempts, {:.2} ms{}{})",
            e(&c.name),
            c.value.map_or_else(|| "none".into(), |v| v.to_string()),
            c.attempts,
            c.wall_us as f64 / 1e3,
            if c.timed_out { ", timed out" } else { "" },
            c.error
                .as_deref()
                .map(|x| format!(", {}", e(x)))
                .unwrap_or_default()
        );
    }
    for (k, v) in &report.stats {
        println!("stat     {} = {v}", e(k));
    }
    for l in &report.logs {
        println!("log      [{}] {}", l.level, e(&l.message));
    }
    if !report.stdout.is_empty() {
        println!("stdout   {}", e(report.stdout.trim_end()));
    }
    if !report.stderr.is_empty() {
        println!("stderr   {}", e(report.stderr.trim_end()));
    }
}

/// A failed episode's fault with the flag to change, when a setting caused it.
fn failure(f: &rollbox_runtime::GuestFault) -> String {
    f.explain(crate::limits::hint)
}
