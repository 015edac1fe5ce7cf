#!/usr/bin/env bash
# The README's test command: installs what the tests need into caches under ~/.cache/ (see
# scripts/install/test-env.sh; skipped when present), then runs `cargo test --workspace` with any
# extra arguments passed through, e.g. `scripts/test.sh -p rollbox-tests --test hostile`, and
# (without arguments) builds the `rollbox` Python package and runs its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install/test-env.sh
# The AReaL venv (once: ~9 min, 9.4 GB, mostly downloads) installs while cargo builds and tests.
areal=0
if [ $# -eq 0 ] && [ "${ROLLBOX_SKIP_AREAL:-0}" != 1 ]; then
    areal=1
    # Its output goes to a private folder (mktemp -d, mode 0700), so nothing another user
    # placed in /tmp can stand in for the files.
    areal_dir="$(mktemp -d)"
    scripts/install/areal-venv.sh >"$areal_dir/python" 2>"$areal_dir/log" &
    areal_pid=$!
    trap 'kill "$areal_pid" 2>/dev/null || true; rm -rf "$areal_dir"' EXIT
fi
cargo test --workspace "$@"
# With no arguments, the `rollbox` Python package too, then its tests, which load the
# components built above.
if [ $# -eq 0 ]; then
    # Its native module is built by cargo in the same feature set as the tests (selecting the
    # test targets makes cargo resolve features as `cargo test --workspace` did, so every crate
    # above is reused and only the extension is linked, ~1 min). `maturin develop` resolves
    # features for the extension alone and would compile a second copy of each crate whose
    # features differ: on a fresh machine, most of the tree. PYO3_PYTHON and
    # PYO3_BUILD_EXTENSION_MODULE (test-env.sh) are what maturin would set.
    cargo build --workspace --lib --tests
    target_dir="$(cargo metadata --format-version 1 --no-deps |
        "$ROLLBOX_HOST_VENV/bin/python" -c 'import json, sys; print(json.load(sys.stdin)["target_directory"])')"
    install -m 0755 "$target_dir/debug/lib_native.so" python/rollbox/_native.abi3.so
    PYTHONPATH=python "$ROLLBOX_HOST_VENV/bin/python" -m pytest -q python/tests
    # rollbox.areal.WasmWorkflow against AReaL 1.0.4's own RLVRWorkflow and WorkflowExecutor,
    # in the AReaL venv (installing since the start, above).
    # ROLLBOX_SKIP_AREAL=1 leaves it out of a quick local run; CI runs it.
    if [ "$areal" = 0 ]; then
        echo "python/tests/areal_parity.py skipped (ROLLBOX_SKIP_AREAL=1)"
    else
        if ! wait "$areal_pid"; then
            cat "$areal_dir/log" >&2
            echo "installing the AReaL venv failed (scripts/install/areal-venv.sh; log above)" >&2
            exit 1
        fi
        areal_python="$(cat "$areal_dir/python")"
        PYTHONPATH=python "$areal_python" python/tests/areal_parity.py 2>&1 | grep -v "Timeout is disabled"
        # The GSM8K example up to the trainer (training needs GPUs and an inference server).
        PYTHONPATH=python "$areal_python" python/examples/areal/gsm8k_rl.py --check \
            "${ROLLBOX_MODEL_DIR:-$HOME/.cache/rollbox/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
    fi
fi

