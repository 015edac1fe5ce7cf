#!/usr/bin/env bash
# The README's main job for now: build the `echo` workflow component and run one sandboxed
# episode on the replay engine, then inspect the component. (The full `rollbox rollout` on the
# embedded model replaces this when it lands.)
set -euo pipefail
cd "$(dirname "$0")/.."
rustup target add wasm32-wasip2 >/dev/null 2>&1 || true
cargo build --quiet --release -p rollbox
cargo build --quiet --target wasm32-wasip2 --profile guest --target-dir target/wasm-guests \
    -p rollbox-workflow-echo -p rollbox-test-programs
wasm=target/wasm-guests/wasm32-wasip2/guest/rollbox_workflow_echo.wasm
./target/release/rollbox inspect "$wasm"
echo
./target/release/rollbox run "$wasm" \
    --engine replay:tests/fixtures/echo-replay.jsonl \
    --data '{"input_ids": [1, 9690, 198]}'
