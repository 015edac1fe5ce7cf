//! Sets `ROLLBOX_COMMIT` for `rollbox.build_info()` (the commit this extension is built from).

#[path = "../host/setup/commit.rs"]
mod commit;

fn main() {
    let manifest = std::path::PathBuf::from(
        std::env::var("CARGO_MANIFEST_DIR").expect("cargo sets CARGO_MANIFEST_DIR"),
    );
    println!(
        "cargo:rustc-env=ROLLBOX_COMMIT={}",
        commit::commit(&manifest)
    );
}
