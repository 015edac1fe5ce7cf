#!/usr/bin/env bash
# The README's test command: installs what the tests need into caches under ~/.cache/ (see
# scripts/test-env.sh; skipped when present), then runs `cargo test --workspace` with any
# extra arguments passed through, e.g. `scripts/test.sh -p rollbox-tests --test hostile`, and
# (without arguments) builds the `rollbox` Python package and runs its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/test-env.sh
cargo test --workspace "$@"
# With no arguments, the `rollbox` Python package too: built into its venv (maturin develop,
# the workspace's target directory), then its tests, which load the components built above.
if [ $# -eq 0 ]; then
    (cd python && VIRTUAL_ENV="$ROLLBOX_HOST_VENV" PATH="$ROLLBOX_HOST_VENV/bin:$PATH" maturin develop --quiet)
    "$ROLLBOX_HOST_VENV/bin/python" -m pytest -q python/tests
    # rollbox.areal.WasmWorkflow against AReaL's own RLVRWorkflow, where the AReaL 1.0.4 venv
    # the fixtures are recorded in exists (scripts/record_concat_fixture.py describes it).
    areal_python="$HOME/.cache/rollbox/areal-venv/bin/python"
    if [ -x "$areal_python" ]; then
        PYTHONPATH=python "$areal_python" python/tests/areal_parity.py 2>&1 | grep -v "Timeout is disabled"
    else
        echo "python/tests/areal_parity.py skipped: no AReaL venv at $areal_python"
    fi
fi
