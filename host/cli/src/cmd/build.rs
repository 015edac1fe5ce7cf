//! `rollbox build reward|tool FILE.py[:FUNCTION]`: a plain Python function, unchanged, as a
//! component (`rollbox_host::pybuild`).

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use rollbox_host::pybuild::{Kind, PyBuild};

/// What the function becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum What {
    /// A reward: the `reward` world's `score` calls it in its trainer's shape.
    Reward,
    /// A tool: its schema from its type hints and docstring, its arguments as keywords.
    Tool,
}

/// Flags of `rollbox build`.
#[derive(Args, Debug)]
pub struct BuildArgs {
    /// reward or tool.
    what: What,
    /// The Python file, and the function after a colon (default: `compute_score`,
    /// `reward_func` or `reward_fn` for a reward, else the file's only public function).
    file: String,
    /// A reward's trainer shape: verl (`compute_score(data_source, solution_str, ground_truth,
    /// extra_info)`), trl (`fn(completions, **kwargs) -> list`), areal (`fn(prompt,
    /// completions, prompt_ids, completion_ids, **data)`) or openrlhf (`reward_func(queries,
    /// prompts, labels)`). Default: told from the function's parameters.
    #[arg(long)]
    style: Option<String>,
    /// The pure-Python dependencies to bundle (a pip requirements file). Default: the
    /// third-party modules the file imports outside `try` blocks.
    #[arg(long)]
    requirements: Option<PathBuf>,
    /// A module to import at build besides the file's own imports (one it imports lazily,
    /// e.g. inside a library); repeatable.
    #[arg(long)]
    preimport: Vec<String>,
    /// Do not score sample answers with a reward at build. By default it scores a few once
    /// (results thrown away), so what it compiles and caches on first use (regexes, parser
    /// tables) is in the snapshot instead of redone on every call.
    #[arg(long)]
    no_warm_up: bool,
    /// The component to write (default: FILE with `.wasm`); the lock of its dependencies is
    /// written beside it (`.lock`).
    #[arg(short, long)]
    out: Option<PathBuf>,
}

/// Build the component and say what went in.
pub fn run(a: BuildArgs) -> anyhow::Result<()> {
    let kind = match a.what {
        What::Reward => Kind::Reward,
        What::Tool => Kind::Tool,
    };
    let mut b = PyBuild::from_spec(kind, std::path::Path::new(&a.file)).ok_or_else(|| {
        anyhow::anyhow!(
            "`{}` is not a Python file: give FILE.py or FILE.py:FUNCTION",
            a.file
        )
    })?;
    b.style = a.style;
    b.requirements = a.requirements;
    b.preimport = a.preimport;
    b.warm_up = !a.no_warm_up;
    let out = a.out.unwrap_or_else(|| b.file.with_extension("wasm"));
    let lock = out.with_extension("lock");
    let built = b.build(&out, Some(&lock))?;
    let size = std::fs::metadata(&built.wasm)?.len();
    println!(
        "built {} ({} MiB): {} `{}` of {}",
        built.wasm.display(),
        size >> 20,
        kind.world(),
        built.function,
        b.file.display()
    );
    for rel in &built.local {
        println!("  with {rel}");
    }
    let pins = built.lock.lines().count();
    if pins > 0 {
        println!("  with {pins} pinned dependencies ({})", lock.display());
    } else {
        println!(
            "  no third-party dependencies ({} is empty)",
            lock.display()
        );
    }
    Ok(())
}
