#!/usr/bin/env bash
# Build a Python workflow into a rollbox workflow component with componentize-py.
#
#   scripts/guests/build-python-workflow.sh path/to/my_workflow.py out.wasm [extra componentize-py -p dirs...]
#
# The module must end with `WitWorld = rollbox.export(MyWorkflow)`. The SDK
# (guest-sdk/python/rollbox_sdk) and the module's own folder are on the module path; pure-Python
# dependencies can be added as more folders (e.g. a `pip install --target DIR` of them).
# Needs componentize-py 0.25.1 (`pip install componentize-py==0.25.1`; scripts/test.sh puts it
# in ~/.cache/rollbox/venv-test-*).
set -euo pipefail
if [ $# -lt 2 ]; then
    echo "usage: $0 WORKFLOW.py OUT.wasm [MODULE_DIR...]" >&2
    exit 2
fi
app="$1"
out="$2"
shift 2
root="$(cd "$(dirname "$0")/../.." && pwd)"
if [ ! -f "$app" ]; then
    echo "$0: $app: no such file (give the workflow's .py file)" >&2
    exit 2
fi
if ! command -v componentize-py >/dev/null; then
    echo "$0: componentize-py is not on PATH; pip install componentize-py==0.25.1" >&2
    exit 2
fi
dir="$(cd "$(dirname "$app")" && pwd)"
module="$(basename "$app" .py)"
paths=(-p "$root/guest-sdk/python" -p "$dir")
for extra in "$@"; do
    paths+=(-p "$extra")
done
mkdir -p "$(dirname "$out")"
cd "$root"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
if componentize-py -d "$root/wit" -w workflow componentize "${paths[@]}" "$module" -o "$out" >"$log" 2>&1; then
    cat "$log"
    exit 0
fi
cat "$log" >&2
# The module is imported at build time: say what an import failure means in the sandbox.
if grep -q "ModuleNotFoundError\|ImportError" "$log"; then
    missing="$(grep -o "No module named '[^']*'" "$log" | head -1)"
    echo "$0: importing $module failed${missing:+ ($missing)}. Only pure-Python modules can run" >&2
    echo "  in the sandbox: install them with 'pip install --target DIR PKG' and pass DIR as an extra" >&2
    echo "  argument. Packages with C extensions (numpy, torch, tokenizers, ...) cannot be used in a" >&2
    echo "  workflow; the host does tokenization (rollbox.tokenizer) and tensors (rollbox.tensor)." >&2
fi
exit 1
