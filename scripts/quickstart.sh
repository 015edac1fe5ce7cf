#!/usr/bin/env bash
# The README's main job: `rollbox rollout` on the embedded default model (SmolLM2-135M-Instruct
# Q4_1, fetched on first use) over the project's arithmetic word problems
# (workflows/rlvr/data/arith.jsonl): the rlvr workflow component, 4 samples per row (a GRPO
# group), the math reward component in its own sandbox, safetensors batches + trajectories.jsonl
# + stats.json in rollout-out/. Re-running resumes (rows already written are skipped); pass
# another directory as the first argument to start afresh.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-rollout-out}"
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
scripts/fetch-model.sh >/dev/null
cargo build --quiet --release -p rollbox
# Workflow and reward components build in separate cargo invocations: within one, cargo unifies
# rollbox-sdk's features and the reward would carry the workflow world's imports.
for package in rollbox-workflow-rlvr rollbox-reward-math; do
    cargo build --quiet --target wasm32-wasip2 --profile guest --target-dir target/wasm-guests -p "$package"
done
./target/release/rollbox rollout workflows/rlvr/data/arith.jsonl --out "$out"
