#!/usr/bin/env bash
# Kill storm for `rollbox rollout` resume (scripts/stress/storm.py does the work; its header explains
# the method and every check):
#
#   scripts/stress/storm.sh [KILLS=30] [ROWS=400] [SEED=1] [WINDOW=spread|uniform] [WORK=DIR] [--storm.py flags]
#
# KILLS `kill -9` at random moments of one `rollbox rollout` (--n-samples 4 --batch-size 4
# --seed SEED, a deterministic replay engine recorded once from the embedded model), restarted
# (resumed) after each, then run to the end; the output must equal an uninterrupted reference
# run: the same (row, sample) trajectories with the same deterministic fields, no row lost or
# duplicated across batches and dropped-rows.jsonl, every batch-*.safetensors valid. Prints a
# summary ending in "identical: yes|no"; exit 0 when identical, 1 otherwise, 2 when the setup is
# missing. Work files and logs: target/robustness/storm/ (WORK=...).
#
# When the release binary or the guest components are missing it builds them with the build
# lines of scripts/quickstart.sh (and fetches the default model); it never rebuilds an existing
# binary, so run `cargo build --release -p rollbox` yourself after changing the code.
set -euo pipefail
cd "$(dirname "$0")/../.."

args=()
for a in "$@"; do
    case "$a" in
        KILLS=*) args+=(--kills "${a#KILLS=}") ;;
        ROWS=*) args+=(--rows "${a#ROWS=}") ;;
        SEED=*) args+=(--seed "${a#SEED=}") ;;
        WINDOW=*) args+=(--kill-window "${a#WINDOW=}") ;;
        WORK=*) args+=(--work "${a#WORK=}") ;;
        *) args+=("$a") ;;
    esac
done
# KILLS/ROWS/SEED may also come from the environment.
[ -n "${KILLS:-}" ] && args=(--kills "$KILLS" "${args[@]}")
[ -n "${ROWS:-}" ] && args=(--rows "$ROWS" "${args[@]}")
[ -n "${SEED:-}" ] && args=(--seed "$SEED" "${args[@]}")

guests=target/wasm-guests/wasm32-wasip2/guest
model="$(scripts/install/fetch-model.sh)"
if [ ! -x target/release/rollbox ] || [ ! -f "$guests/rollbox_workflow_rlvr.wasm" ] \
    || [ ! -f "$guests/rollbox_reward_math.wasm" ]; then
    echo "storm: building rollbox and the guest components (as scripts/quickstart.sh does)" >&2
    rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
    cargo build --quiet --release -p rollbox
    # Workflow and reward components build in separate cargo invocations: within one, cargo
    # unifies rollbox-sdk's features and the reward would carry the workflow world's imports.
    for package in rollbox-workflow-rlvr rollbox-reward-math; do
        cargo build --quiet --target wasm32-wasip2 --profile guest --target-dir target/wasm-guests -p "$package"
    done
fi
exec python3 scripts/stress/storm.py --model "$model" "${args[@]}"
