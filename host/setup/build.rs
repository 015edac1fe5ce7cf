//! Builds the reference components that ship inside rollbox (the rlvr, multi-turn,
//! tool-agent and vision-rlvr workflows, the math and code rewards, the calculator tool) for
//! `wasm32-wasip2`, and writes `$OUT_DIR/builtin.rs`, the table `rollbox_host::builtin` embeds
//! them from. The guests build in their own target directory (`target/wasm-builtin`), in two cargo
//! invocations: cargo unifies the SDK's features within one build, and a reward must not carry
//! the workflow world.
//!
//! `ROLLBOX_BUILTIN_DIR=DIR` takes the `.wasm` files from `DIR` instead (packagers, offline
//! builds). Each entry records the component's sha256, which loading it checks.
//!
//! python-exec (`workflows/tools/python-exec`, CPython as a component) is built in too where
//! componentize-py is (`$COMPONENTIZE_PY`, or `$ROLLBOX_TEST_VENV/bin/componentize-py`, as
//! `scripts/install/test-env.sh` sets them); a rustup-only build leaves it out with a warning,
//! and `python_exec_absent.rs` says why, for the error shown when it is asked for. With
//! `ROLLBOX_REQUIRE_GUESTS=1` (the test command, the release script) its absence fails the build.

use std::path::{Path, PathBuf};

use sha2::{Digest as _, Sha256};

#[path = "guest_build.rs"]
mod guest_build;

use guest_build::{
    COMPONENTIZE_PY, PROFILE, TARGET, build_guests, componentize_py_command, newest,
};

/// (name, world, crate, what it is): the workflows first, then the untrusted components.
const BUILTINS: &[(&str, &str, &str, &str)] = &[
    (
        "rlvr",
        "workflow",
        "rollbox-workflow-rlvr",
        "single-turn RLVR (AReaL's RLVRWorkflow)",
    ),
    (
        "multi-turn",
        "workflow",
        "rollbox-workflow-multi-turn",
        "retry with feedback until the reward is positive (AReaL's MultiTurnWorkflow)",
    ),
    (
        "tool-agent",
        "workflow",
        "rollbox-workflow-tool-agent",
        "a tool-using agent: Hermes tool calls or stop markers, token-in/token-out",
    ),
    (
        "vision-rlvr",
        "workflow",
        "rollbox-workflow-vision-rlvr",
        "single-turn RLVR with images: Qwen2-VL processing on the host (AReaL's VisionRLVRWorkflow)",
    ),
    (
        "math",
        "reward",
        "rollbox-reward-math",
        "math answers against a reference (AReaL's gsm8k_reward_fn)",
    ),
    (
        "code",
        "reward",
        "rollbox-reward-code",
        "a program against test cases, each in a fresh Python sandbox (verl's prime_code or SandboxFusion semantics)",
    ),
    (
        "calculator",
        "tool",
        "rollbox-tool-calculator",
        "arithmetic expressions, for tool-using agents",
    ),
];

fn main() {
    let manifest =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest
        .parent()
        .and_then(Path::parent)
        .expect("host/setup is two levels below the workspace root")
        .to_path_buf();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    wasmtime_info(&root, &out);
    println!("cargo:rerun-if-env-changed=ROLLBOX_BUILTIN_DIR");
    println!("cargo:rerun-if-env-changed=ROLLBOX_REQUIRE_GUESTS");
    for d in [
        "wit",
        "guest-sdk/src",
        "guest-sdk/python/rollbox_sdk",
        "guest-sdk/python/rollbox_wrap",
        "Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(d).display());
    }
    sdk_files(&root, &out);
    let dir = match std::env::var_os("ROLLBOX_BUILTIN_DIR") {
        Some(d) => PathBuf::from(d),
        None => {
            for d in [
                "guest-sdk/Cargo.toml",
                "workflows",
                "host/setup/guest_build.rs",
            ] {
                println!("cargo:rerun-if-changed={}", root.join(d).display());
            }
            let target_dir = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .map(|p| if p.is_absolute() { p } else { root.join(p) })
                .unwrap_or_else(|| root.join("target"))
                .join("wasm-builtin");
            let crates = |workflows: bool| -> Vec<&str> {
                BUILTINS
                    .iter()
                    .filter(|b| (b.1 == "workflow") == workflows)
                    .map(|b| b.2)
                    .collect()
            };
            let hint = "to use components built elsewhere, set ROLLBOX_BUILTIN_DIR to their folder";
            build_guests(&root, &target_dir, &crates(true), hint);
            build_guests(&root, &target_dir, &crates(false), hint);
            target_dir.join(TARGET).join(PROFILE)
        }
    };
    let mut table = String::from("&[\n");
    for (name, world, krate, about) in BUILTINS {
        let wasm = dir.join(format!("{}.wasm", krate.replace('-', "_")));
        assert!(
            wasm.is_file(),
            "{} is missing (ROLLBOX_BUILTIN_DIR must hold the built components)",
            wasm.display()
        );
        table.push_str(&entry(name, world, krate, about, &wasm, &out));
    }
    let builtin_dir = std::env::var_os("ROLLBOX_BUILTIN_DIR").map(PathBuf::from);
    let absent = match python_exec(&root, &out, builtin_dir.as_deref()) {
        Ok(entry) => {
            table.push_str(&entry);
            None
        }
        Err(why) if std::env::var_os("ROLLBOX_REQUIRE_GUESTS").is_some_and(|v| v == "1") => {
            panic!(
                "python-exec could not be built in ({why}), and ROLLBOX_REQUIRE_GUESTS=1 requires it: pip install componentize-py=={COMPONENTIZE_PY} and set COMPONENTIZE_PY to it"
            )
        }
        Err(why) => {
            println!(
                "cargo:warning=python-exec is not built in ({why}): the code reward and python_exec then need its path; pip install componentize-py=={COMPONENTIZE_PY} (or source scripts/install/test-env.sh) and build again to build it in"
            );
            Some(why)
        }
    };
    table.push_str("]\n");
    std::fs::write(out.join("builtin.rs"), table).expect("writing builtin.rs");
    std::fs::write(out.join("python_exec_absent.rs"), format!("{absent:?}\n"))
        .expect("writing python_exec_absent.rs");
}

/// `$OUT_DIR/sdk_files.rs`: the SDK and WIT files rollbox carries, as (path, contents): the
/// Rust SDK crate's sources (`rollbox-sdk/src/`), the WIT (`wit/`), the Python SDK package
/// (`rollbox_sdk/`), which `rollbox new` writes into a project, and the wrappers
/// `rollbox build` puts around plain Python functions (`rollbox_wrap/`).
fn sdk_files(root: &Path, out: &Path) {
    let mut files = String::from("&[\n");
    for (from, to, ext) in [
        ("guest-sdk/src", "rollbox-sdk/src", "rs"),
        ("wit", "wit", "wit"),
        ("guest-sdk/python/rollbox_sdk", "rollbox_sdk", "py"),
        ("guest-sdk/python/rollbox_wrap", "rollbox_wrap", "py"),
    ] {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(root.join(from))
            .unwrap_or_else(|e| panic!("reading {from}: {e}"))
            .map(|e| e.expect("directory entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == ext))
            .collect();
        entries.sort();
        for path in entries {
            let name = path
                .file_name()
                .and_then(|n| n.to_str())
                .expect("utf-8 name");
            files.push_str(&format!(
                "    ({:?}, include_str!({:?})),\n",
                format!("{to}/{name}"),
                path.display().to_string()
            ));
        }
    }
    files.push_str("]\n");
    std::fs::write(out.join("sdk_files.rs"), files).expect("writing sdk_files.rs");
}

/// The table entry of the built-in `name` from `wasm`, with its sha256. The bytes embedded are
/// a copy in this script's `OUT_DIR`, hashed there: the shared `wasm-builtin` folder may be
/// rebuilt by another configuration's build script (another checkout sharing the target folder,
/// other features), and rustc would embed those bytes under this script's older hash. A file
/// from `ROLLBOX_BUILTIN_DIR` reruns this script when it changes.
fn entry(name: &str, world: &str, krate: &str, about: &str, wasm: &Path, out: &Path) -> String {
    if std::env::var_os("ROLLBOX_BUILTIN_DIR").is_some() {
        println!("cargo:rerun-if-changed={}", wasm.display());
    }
    let bytes = std::fs::read(wasm).unwrap_or_else(|e| panic!("{}: {e}", wasm.display()));
    let embedded = if wasm.starts_with(out) {
        wasm.to_path_buf()
    } else {
        let copy = out.join(format!("builtin-{name}.wasm"));
        if std::fs::read(&copy).ok().as_deref() != Some(&bytes[..]) {
            std::fs::write(&copy, &bytes).unwrap_or_else(|e| panic!("{}: {e}", copy.display()));
        }
        copy
    };
    let sha256 = hex::encode(Sha256::digest(&bytes));
    format!(
        "    Builtin {{ name: {name:?}, world: {world:?}, crate_name: {krate:?}, about: {about:?}, sha256: {sha256:?}, bytes: include_bytes!({:?}) }},\n",
        embedded.display().to_string()
    )
}

/// `$OUT_DIR/wasmtime_info.rs`: the vendored wasmtime's version (`vendor/wasmtime/crate`) and
/// its patches (`vendor/wasmtime/patches/*.patch`, in the order they apply), for the version line.
fn wasmtime_info(root: &Path, out: &Path) {
    let vendor = root.join("vendor/wasmtime");
    let manifest = vendor.join("crate/Cargo.toml");
    let patches = vendor.join("patches");
    println!("cargo:rerun-if-changed={}", manifest.display());
    println!("cargo:rerun-if-changed={}", patches.display());
    let text = std::fs::read_to_string(&manifest)
        .unwrap_or_else(|e| panic!("{}: {e}", manifest.display()));
    let version = text
        .lines()
        .skip_while(|l| l.trim() != "[package]")
        .find_map(|l| {
            let v = l.trim().strip_prefix("version")?.trim().strip_prefix('=')?;
            Some(v.trim().trim_matches('"').to_string())
        })
        .unwrap_or_else(|| panic!("{}: no [package] version", manifest.display()));
    let mut names: Vec<String> = std::fs::read_dir(&patches)
        .unwrap_or_else(|e| panic!("{}: {e}", patches.display()))
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter_map(|n| n.strip_suffix(".patch").map(str::to_string))
        .collect();
    names.sort();
    let code = format!(
        "/// The vendored wasmtime's version.\npub const WASMTIME_VERSION: &str = {version:?};\n/// Its patches, in the order they apply.\npub const WASMTIME_PATCHES: &[&str] = &{names:?};\n"
    );
    std::fs::write(out.join("wasmtime_info.rs"), code).expect("write wasmtime_info.rs");
}

/// python-exec (`workflows/tools/python-exec`) as a built-in tool, when componentize-py is here
/// (`$COMPONENTIZE_PY`, else the one in `$ROLLBOX_TEST_VENV`), or from `ROLLBOX_BUILTIN_DIR`
/// (`python_exec.wasm`): the table entry, or why there is none (a rustup-only build; the
/// binary then names the install command when python-exec is asked for).
fn python_exec(root: &Path, out: &Path, builtin_dir: Option<&Path>) -> Result<String, String> {
    let about =
        "runs model-written Python (a fresh CPython per call; no files, network or processes)";
    let table_entry = |wasm: &Path| entry("python-exec", "tool", "python-exec", about, wasm, out);
    if let Some(dir) = builtin_dir {
        let wasm = dir.join("python_exec.wasm");
        return if wasm.is_file() {
            Ok(table_entry(&wasm))
        } else {
            Err(format!("{} is absent", wasm.display()))
        };
    }
    let src = root.join("workflows/tools/python-exec");
    println!("cargo:rerun-if-changed={}", src.display());
    let componentize = componentize_py_command()?;
    let wasm = out.join("python_exec.wasm");
    let sources = [newest(&src), newest(&root.join("wit"))]
        .into_iter()
        .flatten()
        .max();
    let built = std::fs::metadata(&wasm).and_then(|m| m.modified()).ok();
    if built.is_some_and(|b| sources.is_some_and(|s| b > s)) {
        return Ok(table_entry(&wasm));
    }
    let status = std::process::Command::new(&componentize)
        .current_dir(root)
        .args(["-d", "wit", "-w", "tool", "componentize", "-p"])
        .arg(&src)
        .arg("app")
        .arg("-o")
        .arg(&wasm)
        .status();
    // A componentize-py that fails is a reason to leave python-exec out, like an absent one:
    // the caller warns, or fails the build where ROLLBOX_REQUIRE_GUESTS asks for python-exec.
    if !status.as_ref().is_ok_and(|s| s.success()) {
        // Whatever it left is not python-exec: the next build must not take it as built.
        let _ = std::fs::remove_file(&wasm);
    }
    match status {
        Ok(s) if s.success() => Ok(table_entry(&wasm)),
        Ok(s) => Err(format!(
            "{} failed ({s}) building {}; its output is above",
            componentize.display(),
            src.display()
        )),
        Err(e) => Err(format!("running {}: {e}", componentize.display())),
    }
}
