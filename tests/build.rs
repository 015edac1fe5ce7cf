//! Builds every guest test program (`tests/programs/src/bin/*.rs`) and every workflow crate
//! (`workflows/*`) for `wasm32-wasip2`, and writes their paths as constants into
//! `$OUT_DIR/components.rs` (wasmtime's test-programs pattern), so `cargo test` alone builds and
//! runs everything.

use std::path::{Path, PathBuf};
use std::process::Command;

#[path = "../host/setup/guest_build.rs"]
mod guest_build;

use guest_build::{PROFILE, TARGET, componentize_py_command, newest};

fn build(root: &Path, target_dir: &Path, packages: &[String]) {
    let packages: Vec<&str> = packages.iter().map(String::as_str).collect();
    guest_build::build_guests(
        root,
        target_dir,
        &packages,
        "fix the error in that guest crate",
    );
}

/// Guests whose toolchain a machine with only rustup lacks (componentize-py, componentize-js,
/// the C toolchain) are skipped with a cargo warning when it is absent: `cargo build` and
/// `cargo test -p <host crate>` then work anyway, and the tests that need a skipped guest say
/// so (`rollbox_tests::built`). `ROLLBOX_REQUIRE_GUESTS=1` (set by `scripts/test.sh`, so by
/// CI) turns a skip into a build failure.
#[derive(Default)]
struct Skips {
    /// (path the guest would have, why it was not built)
    skipped: Vec<(String, String)>,
}

impl Skips {
    /// Record that `src` (to be built at `wasm`) was skipped because `why`, and return `wasm`;
    /// a build failure instead when `ROLLBOX_REQUIRE_GUESTS` is set.
    fn skip(&mut self, src: &str, wasm: PathBuf, why: String) -> PathBuf {
        if std::env::var_os("ROLLBOX_REQUIRE_GUESTS").is_some_and(|v| v != "0") {
            panic!("{src} was not built: {why} (ROLLBOX_REQUIRE_GUESTS is set)");
        }
        println!("cargo:warning=skipped {src}: {why}");
        self.skipped.push((wasm.display().to_string(), why));
        wasm
    }

    fn constant(&self) -> String {
        let mut s = String::from(
            "/// Guests not built, with the reason: their toolchain was absent (see `built`).\npub const SKIPPED: &[(&str, &str)] = &[\n",
        );
        for (path, why) in &self.skipped {
            s.push_str(&format!("    ({path:?}, {why:?}),\n"));
        }
        s.push_str("];\n");
        s
    }
}

fn main() {
    println!("cargo:rerun-if-env-changed=ROLLBOX_REQUIRE_GUESTS");
    let mut skips = Skips::default();
    let manifest =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    let target_dir = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .map(|p| if p.is_absolute() { p } else { root.join(p) })
        .unwrap_or_else(|| root.join("target"))
        .join("wasm-guests");

    for dir in [
        "wit",
        "guest-sdk",
        "tests/programs",
        "tests/reward-programs",
        "tests/env-programs",
        "workflows",
        "host/setup/guest_build.rs",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }

    // Workflow components (workflow world), untrusted components (reward and tool worlds) and
    // environments are built in separate cargo invocations: cargo unifies the SDK's features
    // within one build, and a reward component must not carry another world's imports.
    let mut packages = vec!["rollbox-test-programs".to_string()];
    let mut untrusted = vec!["rollbox-test-reward-programs".to_string()];
    let mut environments = vec!["rollbox-test-env-programs".to_string()];
    let mut component_crates = Vec::new();
    for (dir, group) in [
        ("workflows", 0),
        ("workflows/rewards", 1),
        ("workflows/tools", 1),
        ("workflows/environments", 2),
    ] {
        let Ok(entries) = std::fs::read_dir(root.join(dir)) else {
            continue;
        };
        for entry in entries {
            let manifest = entry.expect("directory entry").path().join("Cargo.toml");
            if let Ok(text) = std::fs::read_to_string(&manifest) {
                let name = text
                    .lines()
                    .find_map(|l| {
                        l.trim()
                            .strip_prefix("name = ")
                            .map(|n| n.trim_matches('"').to_string())
                    })
                    .expect("component crate has a name");
                match group {
                    0 => packages.push(name.clone()),
                    1 => untrusted.push(name.clone()),
                    _ => environments.push(name.clone()),
                }
                component_crates.push(name);
            }
        }
    }
    build(&root, &target_dir, &packages);
    build(&root, &target_dir, &untrusted);
    build(&root, &target_dir, &environments);

    let bin_dir = target_dir.join(TARGET).join(PROFILE);
    let mut consts = String::new();
    let bins = [
        "tests/programs/src/bin",
        "tests/reward-programs/src/bin",
        "tests/env-programs/src/bin",
    ]
    .iter()
    .flat_map(|d| std::fs::read_dir(root.join(d)).expect("reading a programs directory"));
    for entry in bins {
        let path = entry.expect("bin entry").path();
        let stem = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("utf-8 file name")
            .to_string();
        let wasm = bin_dir.join(format!("{stem}.wasm"));
        consts.push_str(&format!(
            "/// The `{stem}` test program.\npub const {}: &str = {:?};\n",
            stem.to_uppercase(),
            wasm.display().to_string()
        ));
    }
    for name in &component_crates {
        let file = name.replace('-', "_");
        let wasm = bin_dir.join(format!("{file}.wasm"));
        let constant = name
            .trim_start_matches("rollbox-")
            .replace('-', "_")
            .to_uppercase();
        consts.push_str(&format!(
            "/// The `{name}` component.\npub const {constant}: &str = {:?};\n",
            wasm.display().to_string()
        ));
    }
    let python = componentize_py(
        &root,
        &target_dir,
        &mut skips,
        Python {
            world: "reward",
            module: "app",
            dirs: &["workflows/rewards/gsm8k"],
            stub_wasi: true,
            out: "python_reward.wasm",
        },
    );
    consts.push_str(&format!(
        "/// The Python reward component (`workflows/rewards/gsm8k`, componentize-py).\npub const PYTHON_REWARD: &str = {:?};\n",
        python.display().to_string()
    ));
    let python_exec = componentize_py(
        &root,
        &target_dir,
        &mut skips,
        Python {
            world: "tool",
            module: "app",
            dirs: &["workflows/tools/python-exec"],
            stub_wasi: false,
            out: "python_exec_tool.wasm",
        },
    );
    consts.push_str(&format!(
        "/// The python-exec tool (`workflows/tools/python-exec`, componentize-py).\npub const PYTHON_EXEC_TOOL: &str = {:?};\n",
        python_exec.display().to_string()
    ));
    let math_verify = build_math_verify_reward(&root, &target_dir, &mut skips);
    consts.push_str(&format!(
        "/// AReaL's reward with the real math-verify (`workflows/rewards/math-verify`, componentize-py).\npub const MATH_VERIFY_REWARD: &str = {:?};\n",
        math_verify.display().to_string()
    ));
    // Python workflows: the SDK (guest-sdk/python) plus the workflow's folder; real WASI (the
    // host's deny-by-default context), not stubs.
    for (module, dir, constant) in [
        ("rlvr", "workflows/rlvr", "PYTHON_RLVR"),
        ("multi_turn", "workflows/multi-turn", "PYTHON_MULTI_TURN"),
        ("probe", "tests/python-workflows", "PYTHON_PROBE"),
    ] {
        let wasm = componentize_py(
            &root,
            &target_dir,
            &mut skips,
            Python {
                world: "workflow",
                module,
                dirs: &["guest-sdk/python", dir],
                stub_wasi: false,
                out: &format!("{module}_py.wasm"),
            },
        );
        consts.push_str(&format!(
            "/// The Python workflow `{dir}/{module}.py` (componentize-py).\npub const {constant}: &str = {:?};\n",
            wasm.display().to_string()
        ));
    }
    // JavaScript components (componentize-js through scripts/guests/build-js-component.mjs).
    for (world, src, out_name, constant) in [
        (
            "workflow",
            "workflows/rlvr/rlvr.js",
            "rlvr_js.wasm",
            "JS_RLVR",
        ),
        (
            "reward",
            "workflows/rewards/gsm8k/gsm8k.js",
            "gsm8k_reward_js.wasm",
            "JS_REWARD",
        ),
    ] {
        let wasm = build_js(&root, &target_dir, &mut skips, (world, src, out_name));
        consts.push_str(&format!(
            "/// The JavaScript {world} `{src}` (componentize-js).\npub const {constant}: &str = {:?};\n",
            wasm.display().to_string()
        ));
    }
    // C components (wit-bindgen + zig + wasm-tools through scripts/guests/build-c-component.sh).
    for (world, src, out_name, constant) in [
        (
            "reward",
            "workflows/rewards/gsm8k/gsm8k.c",
            "gsm8k_reward_c.wasm",
            "C_REWARD",
        ),
        ("workflow", "workflows/rlvr/rlvr.c", "rlvr_c.wasm", "C_RLVR"),
    ] {
        let wasm = build_c(&root, &target_dir, &mut skips, (world, src, out_name));
        consts.push_str(&format!(
            "/// The C {world} `{src}` (zig).\npub const {constant}: &str = {:?};\n",
            wasm.display().to_string()
        ));
    }
    consts.push_str(&skips.constant());
    std::fs::write(out.join("components.rs"), consts).expect("writing components.rs");
}

/// Build a C component with `scripts/guests/build-c-component.sh` (tools from `$ROLLBOX_C_TOOLS`,
/// which `scripts/install/test-env.sh` sets), unless it is newer than its sources.
fn build_c(
    root: &Path,
    target_dir: &Path,
    skips: &mut Skips,
    (world, src, out_name): (&str, &str, &str),
) -> PathBuf {
    let source = root.join(src);
    let script = root.join("scripts/guests/build-c-component.sh");
    let header = root.join("guest-sdk/c/rollbox_json.h");
    println!("cargo:rerun-if-changed={}", header.display());
    println!("cargo:rerun-if-changed={}", source.display());
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:rerun-if-env-changed=ROLLBOX_C_TOOLS");
    let wasm = target_dir.join("c").join(out_name);
    let newest_source = [
        newest(&root.join("wit")),
        std::fs::metadata(&source).and_then(|m| m.modified()).ok(),
        std::fs::metadata(&script).and_then(|m| m.modified()).ok(),
        std::fs::metadata(&header).and_then(|m| m.modified()).ok(),
    ]
    .into_iter()
    .flatten()
    .max();
    let built = std::fs::metadata(&wasm).and_then(|m| m.modified()).ok();
    if let (Some(b), Some(s)) = (built, newest_source)
        && b > s
    {
        return wasm;
    }
    if std::env::var_os("ROLLBOX_C_TOOLS").is_none() {
        let why = "the C toolchain is absent: set ROLLBOX_C_TOOLS=$(scripts/install/c-toolchain.sh), or run scripts/test.sh";
        return skips.skip(src, wasm, why.into());
    }
    let status = Command::new("bash")
        .current_dir(root)
        .arg(&script)
        .arg(world)
        .arg(&source)
        .arg(&wasm)
        .stdout(std::process::Stdio::null())
        .status();
    match status {
        Ok(s) if s.success() => wasm,
        Ok(s) => panic!("building {src} with scripts/guests/build-c-component.sh failed ({s})"),
        Err(e) => panic!("running scripts/guests/build-c-component.sh for {src}: {e}"),
    }
}

/// Build a JavaScript component with `scripts/guests/build-js-component.mjs` (componentize-js from
/// `$ROLLBOX_JS_MODULES`, which `scripts/install/test-env.sh` sets), unless it is newer than its source.
fn build_js(
    root: &Path,
    target_dir: &Path,
    skips: &mut Skips,
    (world, src, out_name): (&str, &str, &str),
) -> PathBuf {
    let source = root.join(src);
    let script = root.join("scripts/guests/build-js-component.mjs");
    println!("cargo:rerun-if-changed={}", source.display());
    println!("cargo:rerun-if-changed={}", script.display());
    println!("cargo:rerun-if-env-changed=ROLLBOX_JS_MODULES");
    let out_dir = target_dir.join("js");
    std::fs::create_dir_all(&out_dir).expect("creating the js output directory");
    let wasm = out_dir.join(out_name);
    let newest_source = [source.clone(), script.clone(), root.join("wit")]
        .iter()
        .filter_map(|p| {
            if p.is_dir() {
                newest(p)
            } else {
                std::fs::metadata(p).and_then(|m| m.modified()).ok()
            }
        })
        .max();
    let built = std::fs::metadata(&wasm).and_then(|m| m.modified()).ok();
    if let (Some(b), Some(s)) = (built, newest_source)
        && b > s
    {
        return wasm;
    }
    let Some(modules) = std::env::var_os("ROLLBOX_JS_MODULES") else {
        let why = "componentize-js is absent: set ROLLBOX_JS_MODULES=$(scripts/install/js-toolchain.sh), or run scripts/test.sh";
        return skips.skip(src, wasm, why.into());
    };
    let status = Command::new("node")
        .current_dir(root)
        .env("NODE_PATH", modules)
        .arg(&script)
        .arg(world)
        .arg(&source)
        .arg(&wasm)
        .status();
    match status {
        Ok(s) if s.success() => wasm,
        Ok(s) => panic!("building {src} with componentize-js failed ({s})"),
        Err(e) => panic!("node is needed to build {src} ({e}); install node 18 or later"),
    }
}

/// Build `workflows/rewards/math-verify` with `scripts/guests/build-math-verify-reward.sh` (pinned
/// wheels into a cache, then componentize-py), unless the output is newer than its sources.
fn build_math_verify_reward(root: &Path, target_dir: &Path, skips: &mut Skips) -> PathBuf {
    let src = root.join("workflows/rewards/math-verify");
    let shared = root.join("guest-sdk/python/rollbox_wrap");
    let script = root.join("scripts/guests/build-math-verify-reward.sh");
    println!("cargo:rerun-if-changed={}", src.display());
    println!("cargo:rerun-if-changed={}", shared.display());
    println!("cargo:rerun-if-changed={}", script.display());
    let wasm = target_dir.join("python").join("math_verify_reward.wasm");
    let newest_source = std::fs::read_dir(&src)
        .expect("reading workflows/rewards/math-verify")
        .chain(std::fs::read_dir(&shared).expect("reading guest-sdk/python/rollbox_wrap"))
        .chain(std::fs::read_dir(root.join("wit")).expect("reading wit/"))
        .filter_map(|e| e.ok()?.metadata().ok()?.modified().ok())
        .chain(std::fs::metadata(&script).and_then(|m| m.modified()).ok())
        .max();
    let built = std::fs::metadata(&wasm).and_then(|m| m.modified()).ok();
    if let (Some(b), Some(s)) = (built, newest_source)
        && b > s
    {
        return wasm;
    }
    let componentize = match componentize_py_command() {
        Ok(c) => c,
        Err(why) => return skips.skip("workflows/rewards/math-verify", wasm, why),
    };
    let status = Command::new("bash")
        .env("COMPONENTIZE_PY", componentize)
        .arg(&script)
        .arg(&wasm)
        .status();
    match status {
        Ok(s) if s.success() => wasm,
        Ok(s) => panic!("{} failed ({s})", script.display()),
        Err(e) => panic!("running {}: {e}", script.display()),
    }
}

/// One componentize-py build: `module` found on `dirs` (relative to the root), for `world`.
struct Python<'a> {
    world: &'a str,
    module: &'a str,
    dirs: &'a [&'a str],
    /// Replace every WASI import with a trapping stub (rewards: they import only `log`).
    stub_wasi: bool,
    out: &'a str,
}

/// Build a Python component with componentize-py, unless the output is newer than its sources
/// (the module folders and `wit/`).
fn componentize_py(root: &Path, target_dir: &Path, skips: &mut Skips, p: Python) -> PathBuf {
    let out_dir = target_dir.join("python");
    std::fs::create_dir_all(&out_dir).expect("creating the python output directory");
    let wasm = out_dir.join(p.out);
    let mut sources = vec![root.join("wit")];
    for dir in p.dirs {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
        sources.push(root.join(dir));
    }
    let newest_source = sources.iter().filter_map(|d| newest(d)).max();
    let built = std::fs::metadata(&wasm).and_then(|m| m.modified()).ok();
    if let (Some(b), Some(s)) = (built, newest_source)
        && b > s
    {
        return wasm;
    }
    let componentize = match componentize_py_command() {
        Ok(c) => c,
        Err(why) => {
            return skips.skip(
                &format!("{}/{}.py", p.dirs[p.dirs.len() - 1], p.module),
                wasm,
                why,
            );
        }
    };
    let mut cmd = Command::new(componentize);
    cmd.current_dir(root)
        .args(["-d", "wit", "-w", p.world, "componentize"]);
    if p.stub_wasi {
        cmd.arg("--stub-wasi");
    }
    for dir in p.dirs {
        cmd.arg("-p").arg(root.join(dir));
    }
    let status = cmd.arg(p.module).arg("-o").arg(&wasm).status();
    match status {
        Ok(s) if s.success() => wasm,
        Ok(s) => panic!(
            "componentize-py failed ({s}) building {} from {:?}",
            p.module, p.dirs
        ),
        Err(e) => panic!("running componentize-py for {}: {e}", p.module),
    }
}
