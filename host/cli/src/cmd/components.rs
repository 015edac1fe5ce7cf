//! `rollbox components`: the components and dataset built into the binary, with their sha256.

use clap::Args;

use rollbox_host::builtin::{ARITH, ARITH_NAME, BUILTINS};

/// Flags of `rollbox components`.
#[derive(Args, Debug)]
pub struct ComponentsArgs {
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// List the built-ins.
pub fn run(a: ComponentsArgs) -> anyhow::Result<()> {
    if a.json {
        let list: Vec<serde_json::Value> = BUILTINS
            .iter()
            .map(|b| {
                serde_json::json!({
                    "name": b.name,
                    "world": b.world,
                    "sha256": b.sha256,
                    "size_bytes": b.bytes.len(),
                    "crate": b.crate_name,
                    "about": b.about,
                })
            })
            .collect();
        println!("{}", serde_json::to_string_pretty(&list)?);
        return Ok(());
    }
    println!("built into rollbox {}:", env!("CARGO_PKG_VERSION"));
    for b in BUILTINS {
        println!(
            "  {:<11} {:<9} {:>8} bytes  sha256 {}\n  {:<11} {}",
            b.name,
            b.world,
            b.bytes.len(),
            b.sha256,
            "",
            b.about
        );
    }
    println!(
        "  {ARITH_NAME:<11} dataset   {:>8} rows   the default dataset of `rollbox rollout`",
        ARITH.lines().filter(|l| !l.trim().is_empty()).count()
    );
    println!(
        "Select one by name (--workflow rlvr, --reward math, --tool calculator); a file path works everywhere too."
    );
    Ok(())
}
