//! Writes `$OUT_DIR/scaffold_versions.rs`: the pins of the SDK's dependencies that `rollbox new`
//! writes into a new project, and sets `ROLLBOX_COMMIT` for `--version`. (The
//! built-in components are built by `host/setup/build.rs`.)

use std::path::{Path, PathBuf};

#[path = "../setup/commit.rs"]
mod commit;

fn main() {
    let manifest =
        PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"));
    let root = manifest
        .parent()
        .and_then(Path::parent)
        .expect("host/cli is two levels below the workspace root")
        .to_path_buf();
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    println!("cargo:rustc-env=ROLLBOX_COMMIT={}", commit::commit(&root));
    println!(
        "cargo:rerun-if-changed={}",
        root.join("Cargo.toml").display()
    );
    scaffold_versions(&root, &out);
}

/// `$OUT_DIR/scaffold_versions.rs`: the versions of the SDK's dependencies, for the Cargo.toml
/// `rollbox new` writes (the SDK files themselves are `rollbox_host::sdk::FILES`).
fn scaffold_versions(root: &Path, out: &Path) {
    // The workspace's pins of the SDK's dependencies, for the SDK's own Cargo.toml.
    let manifest =
        std::fs::read_to_string(root.join("Cargo.toml")).expect("the workspace Cargo.toml");
    let version = |dep: &str| -> String {
        manifest
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{dep} = ")))
            .and_then(|rest| rest.split("version = \"").nth(1))
            .and_then(|v| v.split('"').next())
            .unwrap_or_else(|| panic!("the workspace pins no version of {dep}"))
            .to_string()
    };
    std::fs::write(
        out.join("scaffold_versions.rs"),
        format!(
            "/// wit-bindgen as the workspace pins it.\npub const WIT_BINDGEN: &str = {:?};\n/// serde_json as the workspace pins it.\npub const SERDE_JSON: &str = {:?};\n",
            version("wit-bindgen"),
            version("serde_json")
        ),
    )
    .expect("writing scaffold_versions.rs");
}
