//! The commit a build is made from, for `rollbox --version` and `rollbox.build_info()`
//! (included by the build scripts of the crates that print it: `host/cli`, `python`).

use std::path::Path;
use std::process::Command;

/// `ROLLBOX_COMMIT` when set (a build from a source archive, with no repository), else the
/// repository's `HEAD` (12 hex digits) as git names it from `dir`, else `unknown`. Tells cargo to
/// run the script again when `HEAD` or the branch it names moves.
pub fn commit(dir: &Path) -> String {
    println!("cargo:rerun-if-env-changed=ROLLBOX_COMMIT");
    if let Ok(c) = std::env::var("ROLLBOX_COMMIT") {
        return c;
    }
    let git = |args: &[&str]| -> Option<String> {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .ok()?;
        out.status
            .success()
            .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
            .filter(|s| !s.is_empty())
    };
    for watched in ["HEAD", "packed-refs"] {
        if let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", watched]) {
            println!("cargo:rerun-if-changed={p}");
        }
    }
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"])
        && let Some(p) = git(&["rev-parse", "--path-format=absolute", "--git-path", &branch])
    {
        println!("cargo:rerun-if-changed={p}");
    }
    git(&["rev-parse", "--short=12", "HEAD"]).unwrap_or_else(|| "unknown".into())
}
