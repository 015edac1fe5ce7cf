#!/usr/bin/env bash
# The release artifacts of this checkout, into OUT (default dist/; emptied first):
#
#   rollbox-VERSION-cp310-abi3-manylinux_2_28_x86_64.whl
#       the `rollbox` Python package for every CPython >= 3.10: the native module with every
#       built-in component inside (python-exec included), and the `rollbox` command (the binary
#       below, installed onto PATH by pip from the wheel's scripts);
#   rollbox-VERSION-x86_64-linux-gnu
#       the `rollbox` command alone, for machines without Python;
#   SHA256SUMS
#       of both (`sha256sum -c SHA256SUMS`).
#
# Both are linked by zig against glibc 2.28's symbols, so they run on any x86_64 Linux with
# glibc 2.28 or newer (RHEL 8, Debian 10, Ubuntu 20.04 and later); `auditwheel show` checks the
# wheel's tag (scripts/release/wheel.py assembles it around maturin's metadata). The build fails
# if python-exec cannot be built in. Profile `dist` (Cargo.toml),
# in its own target folder (ROLLBOX_DIST_TARGET, default ~/.cache/rollbox/target-dist-TOOLCHAIN).
#
#     scripts/release/build.sh [OUT]
set -euo pipefail
cd "$(dirname "$0")/../.."
out="${1:-dist}"
start=$SECONDS
took() {
    echo "release: $1 took $((SECONDS - start)) s"
    start=$SECONDS
}
toolchain="$(sed -n 's/^channel = "\(.*\)"/\1/p' rust-toolchain.toml)"
rustup run "$toolchain" rustc --print target-libdir --target wasm32-wasip2 >/dev/null 2>&1 ||
    rustup toolchain install "$toolchain" --profile minimal -c rustfmt -c clippy -t wasm32-wasip2
venv="$(scripts/install/release-env.sh)"
export PATH="$venv/bin:$PATH"
# python-exec is built in by host/setup/build.rs with this componentize-py, and must be: with
# ROLLBOX_REQUIRE_GUESTS=1 its absence fails the build instead of leaving it out.
export COMPONENTIZE_PY="$venv/bin/componentize-py" ROLLBOX_REQUIRE_GUESTS=1
# What the test environment sets for its own extension build is not the wheel's business.
unset PYO3_PYTHON PYO3_BUILD_EXTENSION_MODULE
version="$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
target=x86_64-unknown-linux-gnu
glibc=2.28
# A target folder of its own, kept between runs (the zig-linked release tree shares nothing with
# the test build's).
target_dir="${ROLLBOX_DIST_TARGET:-$HOME/.cache/rollbox/target-dist-$toolchain}"
export CARGO_TARGET_DIR="$target_dir"
# cargo-zigbuild runs `$CARGO` (else rustup's default toolchain): the pinned one.
CARGO="$(rustup which --toolchain "$toolchain" cargo)"
export CARGO
took "installs"

# The command and the native module in one cargo invocation, so that the crates they share are
# compiled once, with one set of features. PyO3 builds an abi3 module that does not link
# libpython, as maturin would have it.
PYO3_PYTHON="$venv/bin/python" PYO3_BUILD_EXTENSION_MODULE=1 \
    cargo zigbuild --locked --profile dist --target "$target.$glibc" \
    -p rollbox --bin rollbox -p rollbox-python --lib
binary="$target_dir/$target/dist/rollbox"
native="$target_dir/$target/dist/lib_native.so"
took "the rollbox binary and the native module"

# The wheel: maturin's metadata (pyproject.toml, Cargo.toml), the package's Python files, the
# module and the binary as its `rollbox` script, tagged manylinux_2_28 (scripts/release/wheel.py).
meta="$(mktemp -d)"
trap 'rm -rf "$meta"' EXIT
rm -rf "$out"
mkdir -p "$out"
(cd python && maturin pep517 write-dist-info --metadata-directory "$meta" >/dev/null)
"$venv/bin/python" scripts/release/wheel.py --native "$native" --binary "$binary" \
    --metadata "$meta/rollbox-$version.dist-info" --package python/rollbox \
    --tag "cp310-abi3-manylinux_${glibc/./_}_x86_64" --out "$out"
took "the wheel"

wheels=("$out"/rollbox-"$version"-*.whl)
[ "${#wheels[@]}" = 1 ] && [ -f "${wheels[0]}" ] || {
    echo "expected one rollbox-$version wheel in $out, found: ${wheels[*]}" >&2
    exit 1
}
# The wheel's tag must be the one its symbols allow (a module linked to libpython, or to a
# newer glibc, is only `linux_x86_64`).
report="$(auditwheel show "${wheels[0]}" 2>&1)"
echo "$report"
tr -s ' \n' '  ' <<<"$report" |
    grep -q "is consistent with the following platform tag: \"manylinux_${glibc/./_}_x86_64\"" || {
    echo "auditwheel does not find ${wheels[0]} consistent with manylinux_${glibc/./_}_x86_64 (above)" >&2
    exit 1
}
install -m 0755 "$binary" "$out/rollbox-$version-x86_64-linux-gnu"
(cd "$out" && sha256sum "rollbox-$version-x86_64-linux-gnu" "$(basename "${wheels[0]}")" >SHA256SUMS)
ls -l "$out"
took "checks"
