#!/usr/bin/env bash
# Build the python-exec tool component (workflows/tools/python-exec) with componentize-py, into
# the path given (default: python_exec.wasm). Installs nothing: run scripts/install/test-env.sh first, or
# `pip install componentize-py==0.25.1`.
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
out="$(realpath -m "${1:-python_exec.wasm}")"
cd "$root"
componentize-py -d wit -w tool componentize -p workflows/tools/python-exec app -o "$out"
