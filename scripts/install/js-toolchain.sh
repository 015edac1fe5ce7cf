#!/usr/bin/env bash
# Install the JavaScript component toolchain (componentize-js 0.23.0 through jco 1.35.0) into
# ~/.cache/rollbox/js-<versions>, once, and print the NODE_PATH to use:
#   NODE_PATH=$(scripts/install/js-toolchain.sh) node scripts/guests/build-js-component.mjs reward SRC.js OUT.wasm
set -euo pipefail
dir="${ROLLBOX_CACHE:-$HOME/.cache/rollbox}/js-0.23.0-1.35.0"
if [ ! -f "$dir/node_modules/@bytecodealliance/componentize-js/package.json" ]; then
    command -v npm >/dev/null || { echo "$0: npm (node >= 18) is needed" >&2; exit 2; }
    mkdir -p "$dir"
    echo '{"name":"rollbox-js-toolchain","private":true}' > "$dir/package.json"
    (cd "$dir" && npm install --no-audit --no-fund --loglevel=error \
        @bytecodealliance/jco@1.35.0 @bytecodealliance/componentize-js@0.23.0 >&2)
fi
echo "$dir/node_modules"
