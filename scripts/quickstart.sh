#!/usr/bin/env bash
# The README's main job for now: one sandboxed RLVR episode — the rlvr workflow component, the
# SmolLM2 tokenizer and chat template on the host, a recorded engine response (replay), and the
# math reward component in its own sandbox — then the tensors it returns.
# (`rollbox rollout` on the embedded model replaces this when the engine and rollout land.)
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
model="$(scripts/fetch-model.sh)"
cargo build --quiet --release -p rollbox
# Workflow and reward components build in separate cargo invocations: within one, cargo unifies
# rollbox-sdk's features and the reward would carry the workflow world's imports.
for package in rollbox-workflow-rlvr rollbox-reward-math; do
    cargo build --quiet --target wasm32-wasip2 --profile guest --target-dir target/wasm-guests -p "$package"
done
guests=target/wasm-guests/wasm32-wasip2/guest
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
# A recorded response and its row from the RLVR parity fixture.
python3 - "$work" <<'PY'
import json, sys
case = json.load(open("tests/fixtures/rlvr/areal_layout.json"))["cases"][0]
open(f"{sys.argv[1]}/replay.jsonl", "w").write(json.dumps(case["record"]) + "\n")
open(f"{sys.argv[1]}/row.json", "w").write(json.dumps(case["row"]))
PY
./target/release/rollbox inspect "$guests/rollbox_workflow_rlvr.wasm"
echo
./target/release/rollbox run "$guests/rollbox_workflow_rlvr.wasm" \
    --tokenizer "$model" \
    --engine "replay:$work/replay.jsonl" \
    --reward "math=$guests/rollbox_reward_math.wasm" \
    --config '{"reward": "math"}' \
    --data "$(cat "$work/row.json")"
