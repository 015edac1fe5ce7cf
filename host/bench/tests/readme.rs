//! The bench README's table lists exactly the benchmarks `rollbox-bench --help` lists, so the
//! map cannot go stale when one is added.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

#[test]
fn the_readme_lists_every_benchmark() {
    let out = Command::new(env!("CARGO_BIN_EXE_rollbox-bench"))
        .arg("--help")
        .output()
        .expect("rollbox-bench runs");
    let help = String::from_utf8(out.stdout).expect("utf-8 help");
    let benches: BTreeSet<&str> = help
        .lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .collect();
    assert!(benches.len() >= 9, "too few benchmarks parsed: {benches:?}");
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md"))
        .expect("README.md");
    // Table rows: "| `name` | ...".
    let listed: BTreeSet<&str> = readme
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .collect();
    assert_eq!(
        listed, benches,
        "host/bench/README.md's table must list exactly the subcommands of rollbox-bench"
    );
}
