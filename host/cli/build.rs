//! Writes `$OUT_DIR/scaffold_files.rs` and `scaffold_versions.rs`: the SDK files and pins that
//! `rollbox new` writes into a new project, and sets `ROLLBOX_COMMIT` for `--version`. (The
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
    for d in [
        "wit",
        "guest-sdk/src",
        "guest-sdk/python/rollbox_sdk",
        "Cargo.toml",
    ] {
        println!("cargo:rerun-if-changed={}", root.join(d).display());
    }
    scaffold_files(&root, &out);
}

/// `$OUT_DIR/scaffold.rs`: the SDK files `rollbox new` writes into a new project (the Rust
/// SDK crate's sources, the WIT, the Python SDK package), as (path in the project, contents),
/// and the versions of the SDK's dependencies.
fn scaffold_files(root: &Path, out: &Path) {
    let mut files = String::from("&[\n");
    for (from, to, ext) in [
        ("guest-sdk/src", "rollbox-sdk/src", "rs"),
        ("wit", "wit", "wit"),
        ("guest-sdk/python/rollbox_sdk", "rollbox_sdk", "py"),
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
    std::fs::write(out.join("scaffold_files.rs"), files).expect("writing scaffold_files.rs");
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
