//! Building guest components from a build script, shared by `host/setup/build.rs` (the built-in
//! components) and `tests/build.rs` (every test program and component), which includes this
//! file with `#[path]`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The guests' target.
pub const TARGET: &str = "wasm32-wasip2";
/// The guests' cargo profile (the workspace's `[profile.guest]`).
pub const PROFILE: &str = "guest";

/// `cargo build --target wasm32-wasip2 --profile guest -p ...` run from `root` into
/// `target_dir`, without the outer build's flags and profile overrides (they are for the
/// host). Panics with cargo's failure, naming the missing target when that is the cause, and
/// `hint`.
pub fn build_guests(root: &Path, target_dir: &Path, packages: &[&str], hint: &str) {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(root)
        .args(["build", "--target", TARGET, "--profile", PROFILE])
        .arg("--target-dir")
        .arg(target_dir);
    for p in packages {
        cmd.arg("-p").arg(p);
    }
    for (key, _) in std::env::vars_os() {
        let key = key.to_string_lossy().into_owned();
        if key.starts_with("CARGO_PROFILE_")
            || key.starts_with("CARGO_ENCODED_")
            || key.starts_with("CARGO_BUILD_")
            || key.starts_with("CARGO_FEATURE_")
            || matches!(
                key.as_str(),
                "RUSTFLAGS" | "RUSTC_WORKSPACE_WRAPPER" | "CARGO_TARGET_DIR" | "CARGO_LLVM_COV"
            )
        {
            cmd.env_remove(&key);
        }
    }
    let status = cmd
        .status()
        .expect("running cargo to build the guest components");
    if status.success() {
        return;
    }
    let installed = Command::new("rustc")
        .args(["--print", "target-libdir", "--target", TARGET])
        .output()
        .map(|o| {
            o.status.success() && Path::new(String::from_utf8_lossy(&o.stdout).trim()).exists()
        })
        .unwrap_or(false);
    if !installed {
        panic!(
            "building the guest components failed: the {TARGET} target is missing; run `rustup target add {TARGET}`"
        );
    }
    panic!("building the guest components for {TARGET} failed (see cargo's output above); {hint}");
}

/// componentize-py's version the Python guests (python-exec among them) are built with
/// (`pip install componentize-py==…`).
pub const COMPONENTIZE_PY: &str = "0.25.1";

/// componentize-py: `$COMPONENTIZE_PY`, else the one in `$ROLLBOX_TEST_VENV`
/// (`scripts/install/test-env.sh` sets it), else why there is none.
pub fn componentize_py_command() -> Result<PathBuf, String> {
    println!("cargo:rerun-if-env-changed=COMPONENTIZE_PY");
    println!("cargo:rerun-if-env-changed=ROLLBOX_TEST_VENV");
    let path = match std::env::var_os("COMPONENTIZE_PY") {
        Some(p) => PathBuf::from(p),
        None => match std::env::var_os("ROLLBOX_TEST_VENV") {
            Some(venv) => PathBuf::from(venv).join("bin").join("componentize-py"),
            None => {
                return Err(format!(
                    "componentize-py is absent: set ROLLBOX_TEST_VENV (source scripts/install/test-env.sh) or COMPONENTIZE_PY (pip install componentize-py=={COMPONENTIZE_PY}), or run scripts/test.sh"
                ));
            }
        },
    };
    if path.is_file() {
        Ok(path)
    } else {
        Err(format!(
            "componentize-py is not at {} (pip install componentize-py=={COMPONENTIZE_PY})",
            path.display()
        ))
    }
}

/// The newest modification time of the files below `dir` (`__pycache__` left out), for
/// rebuilding a component only when one of its sources changed.
pub fn newest(dir: &Path) -> Option<std::time::SystemTime> {
    let mut best = None;
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let path = entry.path();
        let t = if path.is_dir() {
            if path.file_name().is_some_and(|n| n == "__pycache__") {
                continue;
            }
            newest(&path)
        } else {
            entry.metadata().ok()?.modified().ok()
        };
        best = best.max(t);
    }
    best
}
