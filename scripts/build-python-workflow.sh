#!/usr/bin/env bash
# Build a Python workflow into a rollbox workflow component with componentize-py.
#
#   scripts/build-python-workflow.sh path/to/my_workflow.py out.wasm [extra componentize-py -p dirs...]
#
# The module must end with `WitWorld = rollbox.export(MyWorkflow)`. The SDK
# (guest-sdk/python/rollbox) and the module's own folder are on the module path; pure-Python
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
root="$(cd "$(dirname "$0")/.." && pwd)"
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
exec componentize-py -d "$root/wit" -w workflow componentize "${paths[@]}" "$module" -o "$out"
