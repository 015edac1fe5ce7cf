//! `docs/cli.md` is the `rollbox` binary's own help, so the CLI reference cannot drift from
//! clap: `rollbox --help`, then `rollbox SUBCOMMAND --help` for every subcommand it lists. The
//! test fails when the file differs; `ROLLBOX_BLESS=1` rewrites it.

use std::process::Command;

fn help(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rollbox"))
        .args(args)
        .arg("--help")
        .env_remove("COLUMNS")
        .output()
        .expect("rollbox runs");
    assert!(out.status.success(), "rollbox {args:?} --help failed");
    String::from_utf8(out.stdout).expect("utf-8 help")
}

/// The subcommands `rollbox --help` lists (without `help`).
fn subcommands(top: &str) -> Vec<String> {
    top.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

fn cli_page() -> String {
    let top = help(&[]);
    let names = subcommands(&top);
    assert!(names.len() >= 6, "too few subcommands parsed: {names:?}");
    let mut page = String::from(
        "# CLI reference\n\n\
         <!-- Generated from the `rollbox` binary's help by host/cli/tests/docs.rs; \
         `ROLLBOX_BLESS=1 cargo test -p rollbox --test docs` rewrites it. -->\n\n\
         The limit flags are described in [the limits reference](limits.md). Subcommands:",
    );
    for name in &names {
        page.push_str(&format!(" [`{name}`](#rollbox-{name})"));
    }
    page.push_str(&format!(".\n\n## rollbox\n\n```text\n{}```\n", top));
    for name in &names {
        page.push_str(&format!(
            "\n## rollbox {name}\n\n```text\n{}```\n",
            help(&[name])
        ));
    }
    page
}

#[test]
fn the_cli_reference_is_current() {
    rollbox_tests::check_generated_page(
        "docs/cli.md",
        &cli_page(),
        "`rollbox --help` and its subcommands' help",
        "cargo test -p rollbox --test docs",
    );
}
