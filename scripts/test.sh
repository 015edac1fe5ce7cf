#!/usr/bin/env bash
# The README's test command: installs what the tests need into caches under ~/.cache/ (see
# scripts/install/test-env.sh; skipped when present), then runs `cargo test --workspace` with any
# extra arguments passed through, e.g. `scripts/test.sh -p rollbox-tests --test hostile`, and
# (without arguments) builds the `rollbox` Python package and runs its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/install/test-env.sh
# Each phase's wall time, so a slow run says where its time went.
phase_start=$SECONDS
took() {
    echo "test.sh: $1 took $((SECONDS - phase_start)) s"
    phase_start=$SECONDS
}
took "installs"
# The venvs of the trainer checks install while cargo builds and tests, each with its output in
# a private folder (mktemp -d, mode 0700), so nothing another user placed in /tmp can stand in
# for the files: AReaL's (once: ~9 min, 9.4 GB, mostly downloads) and the trainers' (verl, TRL,
# OpenRLHF's client; once: ~3 min, 6.5 GB) and verifiers' (~1.5 min, 570 MB). ROLLBOX_SKIP_AREAL=1 and ROLLBOX_SKIP_TRAINERS=1
# leave them out of a quick local run; CI runs both.
bg_pids=()
bg_dirs=()
trap 'kill "${bg_pids[@]}" 2>/dev/null || true; rm -rf "${bg_dirs[@]}"' EXIT
background_install() { # NAME SCRIPT: run SCRIPT, leaving its output in $NAME_dir
    local dir
    dir="$(mktemp -d)"
    "$2" >"$dir/python" 2>"$dir/log" &
    bg_pids+=("$!")
    bg_dirs+=("$dir")
    printf -v "$1_dir" '%s' "$dir"
    printf -v "$1_pid" '%s' "$!"
}
wait_install() { # NAME: wait for its install; set $NAME_python, or fail with its log
    local pid dir
    pid="$1_pid"
    dir="$1_dir"
    if ! wait "${!pid}"; then
        cat "${!dir}/log" >&2
        echo "installing the $1 venv failed (its log above)" >&2
        exit 1
    fi
    printf -v "$1_python" '%s' "$(cat "${!dir}/python")"
}
areal=0
trainers=0
if [ $# -eq 0 ] && [ "${ROLLBOX_SKIP_AREAL:-0}" != 1 ]; then
    areal=1
    background_install areal scripts/install/areal-venv.sh
fi
if [ $# -eq 0 ] && [ "${ROLLBOX_SKIP_TRAINERS:-0}" != 1 ]; then
    trainers=1
    background_install trainers scripts/install/trainers-venv.sh
    background_install verifiers scripts/install/verifiers-venv.sh
fi
# vLLM's CPU build and the model converted for it (once: ~2.5 min, 6.8 GB) and llama-cpp-python's
# server (once: ~6.5 min, compiling llama.cpp), for the live engine tests;
# ROLLBOX_SKIP_ENGINES=1 leaves them out of a quick local run; CI runs them.
engines=0
if [ $# -eq 0 ] && [ "${ROLLBOX_SKIP_ENGINES:-0}" != 1 ]; then
    engines=1
    background_install vllm scripts/install/vllm-model.sh
    background_install llamacpp scripts/install/llamacpp-venv.sh
fi
# The vendored wasmtime is exactly 48.0.8 plus the patch files (vendor/wasmtime).
vendor/wasmtime/check.sh check
cargo test --workspace --no-fail-fast "$@"
took "cargo test --workspace"
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
    took "the Python extension"
    PYTHONPATH=python "$ROLLBOX_HOST_VENV/bin/python" -m pytest -q python/tests --ignore=python/tests/trainers \
        --ignore=python/tests/verifiers
    took "python/tests"
    # The package the trainer tests import: the release wheel where the caller built one
    # (ROLLBOX_WHEEL, as .ci/run does: scripts/release/build.sh), installed into a folder of
    # its own, so they run against what users install; else the checkout's, built above.
    trainer_path=python
    if [ -n "${ROLLBOX_WHEEL:-}" ]; then
        trainer_path="$(mktemp -d)"
        bg_dirs+=("$trainer_path")
        "$ROLLBOX_HOST_VENV/bin/python" -m pip install --quiet --disable-pip-version-check --no-deps \
            --no-index --target "$trainer_path" "$ROLLBOX_WHEEL"
        PYTHONPATH="$trainer_path" "$ROLLBOX_HOST_VENV/bin/python" -c \
            'import rollbox, sys; assert rollbox.__file__.startswith(sys.argv[1]), rollbox.__file__' \
            "$trainer_path"
        echo "test.sh: the trainer tests import rollbox from $ROLLBOX_WHEEL"
    fi
    # rollbox.verl and rollbox.trl against verl 0.9.1 and TRL 1.16 (a 2-step GRPO run on the
    # CPU), in the trainers' venv (installing since the start, above).
    if [ "$trainers" = 0 ]; then
        echo "python/tests/trainers skipped (ROLLBOX_SKIP_TRAINERS=1)"
    else
        wait_install trainers
        took "waiting for the trainers' venv"
        PYTHONPATH="$trainer_path" "$trainers_python" -m pytest -q -p no:cacheprovider python/tests/trainers
        took "python/tests/trainers"
        # rollbox.verifiers against verifiers 0.4.0, in its own venv (its pins are not verl's).
        wait_install verifiers
        PYTHONPATH="$trainer_path" "$verifiers_python" -m pytest -q -p no:cacheprovider python/tests/verifiers
        took "python/tests/verifiers"
    fi
    # The `openai` backends against live vLLM (CPU) and llama-cpp-python servers, through
    # `rollbox rollout`.
    if [ "$engines" = 0 ]; then
        echo "python/tests/engines_live.py skipped (ROLLBOX_SKIP_ENGINES=1)"
    else
        gguf="${ROLLBOX_MODEL_DIR:-$HOME/.cache/rollbox/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
        wait_install vllm # its output is the model's folder
        "$ROLLBOX_TEST_VENV/bin/python" python/tests/engines_live.py --server vllm \
            --server-python "$(scripts/install/vllm-venv.sh)" --model "$vllm_python" \
            --rollbox "$target_dir/debug/rollbox" --gguf "$gguf"
        wait_install llamacpp
        "$ROLLBOX_TEST_VENV/bin/python" python/tests/engines_live.py --server llamacpp \
            --server-python "$llamacpp_python" --rollbox "$target_dir/debug/rollbox" --gguf "$gguf"
        took "live engines"
    fi
    # rollbox.areal.WasmWorkflow against AReaL 1.0.4's own RLVRWorkflow and WorkflowExecutor,
    # in the AReaL venv (installing since the start, above).
    # ROLLBOX_SKIP_AREAL=1 leaves it out of a quick local run; CI runs it.
    if [ "$areal" = 0 ]; then
        echo "python/tests/areal_parity.py skipped (ROLLBOX_SKIP_AREAL=1)"
    else
        wait_install areal
        PYTHONPATH=python "$areal_python" python/tests/areal_parity.py 2>&1 | grep -v "Timeout is disabled"
        # AReaL's own gsm8k_reward_fn, unchanged, built from its .py path (issue 56).
        PYTHONPATH=python "$areal_python" python/tests/areal_own_reward.py 2>&1 | grep -v "Timeout is disabled"
        # The GSM8K example up to the trainer (training needs GPUs and an inference server).
        PYTHONPATH=python "$areal_python" python/examples/areal/gsm8k_rl.py --check \
            "${ROLLBOX_MODEL_DIR:-$HOME/.cache/rollbox/models}/SmolLM2-135M-Instruct.Q4_1.gguf"
        took "AReaL parity and the GSM8K example"
    fi
fi

