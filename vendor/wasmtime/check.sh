#!/usr/bin/env bash
# The wasmtime crate rollbox builds (vendor/wasmtime/crate) is crates.io's, with the patches in
# vendor/wasmtime/patches/ applied (see PATCHES.md beside this script).
#
#   vendor/wasmtime/check.sh check          the vendored crate is exactly the pinned release
#                                           with the patches applied, in order
#   vendor/wasmtime/check.sh apply VERSION  replace the vendored crate with wasmtime VERSION
#                                           (a 48.x point release) and apply the patches to it
#
# The release comes from crates.io through cargo (a throwaway package depending on
# `wasmtime = "=VERSION"`, `cargo fetch`), so it is the exact published source.
set -euo pipefail
cd "$(dirname "$0")/../.."
dir=vendor/wasmtime
crate="$dir/crate"

die() { echo "wasmtime-patches: $*" >&2; exit 1; }

# The unpacked source of wasmtime $1 from crates.io (in cargo's registry cache).
fetch_release() {
    local version="$1" tmp
    tmp="$(mktemp -d)"
    # Called as $(fetch_release ...): the trap cleans up when this subshell ends, failed or not.
    trap "rm -rf '$tmp'" EXIT
    mkdir -p "$tmp/src"
    : > "$tmp/src/lib.rs"
    cat > "$tmp/Cargo.toml" <<EOF
[package]
name = "wasmtime-release-probe"
version = "0.0.0"
edition = "2024"
[dependencies]
wasmtime = { version = "=$version", default-features = false }
[workspace]
EOF
    (cd "$tmp" && cargo fetch --quiet) >&2 || die "cargo could not fetch wasmtime $version from crates.io"
    local manifest
    manifest="$(cd "$tmp" && cargo metadata --format-version 1 --quiet |
        python3 -c 'import json,sys; m=json.load(sys.stdin); print(next(p["manifest_path"] for p in m["packages"] if p["name"]=="wasmtime"))')"
    # A builtin last: bash runs a final external command in place of the subshell, trap unrun.
    echo "${manifest%/*}"
}

# The version the vendored crate is.
vendored_version() {
    sed -n 's/^version = "\(.*\)"$/\1/p' "$crate/Cargo.toml" | head -1
}

# Copy release source $1 to $2 and apply every patch to it.
patched_copy() {
    local src="$1" out="$2" p
    cp -r "$src" "$out"
    rm -f "$out/.cargo-ok"
    for p in "$dir"/patches/*.patch; do
        patch --quiet --directory="$out" -p1 --no-backup-if-mismatch < "$p" ||
            die "$(basename "$p") does not apply to $(basename "$src"); rebase it (see PATCHES.md)"
    done
}

case "${1:-}" in
check)
    version="$(vendored_version)"
    [[ -n "$version" ]] || die "no version in $crate/Cargo.toml"
    src="$(fetch_release "$version")"
    tmp="$(mktemp -d)"
    trap "rm -rf '$tmp'" EXIT
    patched_copy "$src" "$tmp/crate"
    if ! diff -r "$tmp/crate" "$crate" > "$tmp/diff"; then
        cat "$tmp/diff" >&2
        die "$crate is not wasmtime $version with patches/*.patch applied: change the crate through a patch file"
    fi
    echo "wasmtime-patches: $crate is wasmtime $version with $(ls "$dir"/patches/*.patch | wc -l) patches"
    ;;
apply)
    version="${2:-}"
    [[ "$version" =~ ^48\.[0-9]+\.[0-9]+$ ]] || die "usage: $0 apply 48.x.y (the LTS line rollbox builds with Rust 1.95)"
    src="$(fetch_release "$version")"
    tmp="$(mktemp -d)"
    trap "rm -rf '$tmp'" EXIT
    patched_copy "$src" "$tmp/crate"
    rm -rf "$crate"
    mv "$tmp/crate" "$crate"
    echo "wasmtime-patches: $crate is now wasmtime $version with the patches applied."
    echo "Next: set every wasmtime and wasmtime-wasi version in Cargo.toml to =$version, cargo update, and run scripts/test.sh."
    ;;
*)
    sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
    ;;
esac
