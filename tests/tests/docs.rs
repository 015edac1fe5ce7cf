//! Reference pages made from the code, so they cannot drift from it: `docs/limits.md` is
//! rendered from `rollbox_runtime::limits::LIMIT_KEYS` and the three default `Limits`. The test
//! fails when the file differs from the rendering; `ROLLBOX_BLESS=1` rewrites it.

use std::path::Path;

use rollbox_runtime::Limits;
use rollbox_runtime::limits::{LIMIT_KEYS, show_size};

/// The page `docs/limits.md` should hold.
fn limits_page() -> String {
    let workflow = Limits::DEFAULT;
    let reward = Limits::untrusted_call();
    let tool = Limits::untrusted_tool();
    let mut page = String::from(
        "# Limits reference\n\n\
         <!-- Generated from LIMIT_KEYS and the default Limits (host/runtime/src/limits.rs) by \
         tests/tests/docs.rs; `ROLLBOX_BLESS=1 cargo test -p rollbox-tests --test docs` \
         rewrites it. -->\n\n\
         Every limit has one key. The same key is a flag of `rollbox run`, `rollout` and `serve` \
         (`--max-memory 1GiB`), a key of a config file's `[limits]` table, a key of \
         `limits={...}` in Python's `rollbox.Host`, a key of a `HostSpec`'s `limits`, and an \
         option of one reward or tool (`--reward NAME=PATH,timeout=5s,fuel=2000000000`). An \
         unknown key is refused with the list. Sizes are bytes or `512MiB`, `1GiB`, `64KiB`; \
         durations are seconds or `1.5s`, `250ms`; counts are whole numbers.\n\n\
         Defaults differ by who runs: a workflow episode, a reward call, a tool call.\n\n\
         | key | flag | bounds | workflow episode | reward call | tool call |\n\
         |---|---|---|---|---|---|\n",
    );
    for key in LIMIT_KEYS {
        page.push_str(&format!(
            "| `{}` | `--{}` | {} | {} | {} | {} |\n",
            key.key,
            key.key.replace('_', "-"),
            key.help,
            key.show(&workflow),
            key.show(&reward),
            key.show(&tool),
        ));
    }
    page.push_str(
        "\n`memory` is accepted for `max_memory`. Fuel is unmetered unless a limit sets it; \
         setting it anywhere turns metering on for the whole host (it instruments compiled \
         code).\n\n\
         ## Fixed per call\n\n\
         | what | workflow episode | reward call | tool call |\n\
         |---|---|---|---|\n",
    );
    for (what, get) in [
        (
            "log lines and stats (more are counted and dropped)",
            (|l: &Limits| l.max_log_lines.to_string()) as fn(&Limits) -> String,
        ),
        (
            "bytes per log line or stat key (longer ones are cut)",
            |l| show_size(l.max_log_line_bytes as u64),
        ),
    ] {
        page.push_str(&format!(
            "| {what} | {} | {} | {} |\n",
            get(&workflow),
            get(&reward),
            get(&tool)
        ));
    }
    page.push_str(
        "\n## Host-wide\n\n\
         <!-- Generated from HOST_KEYS (host/setup/src/spec.rs). -->\n\n\
         The limits above hold per episode or call. These hold for a host as a whole. Each key \
         is, by the same name, a flag of `rollbox run`, `rollout` and `serve` (with dashes), a \
         top-level key of a config file and of a `HostSpec`, and a key of `limits={...}` in \
         Python's `rollbox.Host` (`rollbox.Components` takes `max_host_memory=`). See \
         [the security model](security.md) for what the budget guards.\n\n\
         | key | flag | what |\n\
         |---|---|---|\n",
    );
    for key in rollbox_host::HOST_KEYS {
        page.push_str(&format!(
            "| `{}` | `--{}` | {} |\n",
            key.key,
            key.key.replace('_', "-"),
            key.help
        ));
    }
    page
}

#[test]
fn the_limits_reference_is_current() {
    rollbox_tests::check_generated_page(
        "docs/limits.md",
        &limits_page(),
        "the rendering of LIMIT_KEYS",
        "cargo test -p rollbox-tests --test docs",
    );
}

/// The files under `dir` (relative to it, `/`-separated), skipping `__pycache__`.
fn files_under(dir: &Path, prefix: &str, out: &mut Vec<String>) {
    for entry in std::fs::read_dir(dir).expect("reading a folder") {
        let entry = entry.expect("a folder entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        if name == "__pycache__" {
            continue;
        }
        let rel = format!("{prefix}{name}");
        if entry.file_type().expect("file type").is_dir() {
            files_under(&entry.path(), &format!("{rel}/"), out);
        } else {
            out.push(rel);
        }
    }
}

/// `scripts/README.md` names every script (as `` `install/test-env.sh` ``, with or without
/// arguments after it), so a new or moved script cannot go unmapped.
#[test]
fn the_scripts_map_names_every_script() {
    let scripts = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts");
    let map = std::fs::read_to_string(scripts.join("README.md")).expect("scripts/README.md");
    let mut files = Vec::new();
    files_under(&scripts, "", &mut files);
    let missing: Vec<_> = files
        .iter()
        .filter(|f| f.as_str() != "README.md")
        .filter(|f| !map.contains(&format!("`{f}`")) && !map.contains(&format!("`{f} ")))
        .collect();
    assert!(
        missing.is_empty(),
        "scripts/README.md does not name {missing:?}: add a row for each"
    );
}
