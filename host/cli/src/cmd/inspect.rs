//! `rollbox inspect`: the world a component targets, its imports and exports, size and sha256.

use std::path::PathBuf;

use clap::Args;

/// Flags of `rollbox inspect`.
#[derive(Args, Debug)]
pub struct InspectArgs {
    /// The component file (.wasm), or a built-in's name.
    path: PathBuf,
    /// Print JSON.
    #[arg(long)]
    json: bool,
}

/// Print what the component is.
pub fn run(a: InspectArgs) -> anyhow::Result<()> {
    let info = rollbox_host::inspect(&a.path)?;
    if a.json {
        println!("{}", serde_json::to_string_pretty(&info)?);
        return Ok(());
    }
    println!("file     {}", info.path.display());
    println!("sha256   {}", info.sha256);
    println!("size     {} bytes", info.size_bytes);
    match info.world {
        Some(w) => println!("world    {}", w.qualified_name()),
        None => println!("world    none of rollbox's (exports no run-episode, score or call)"),
    }
    println!("imports  ({})", info.imports.len());
    for i in &info.imports {
        println!("  {i}");
    }
    println!("exports  ({})", info.exports.len());
    for e in &info.exports {
        println!("  {e}");
    }
    Ok(())
}
