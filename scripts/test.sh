#!/usr/bin/env bash
# The README's test command: installs what the tests need into caches under ~/.cache/ (see
# scripts/test-env.sh; skipped when present), then runs `cargo test --workspace` with any
# extra arguments passed through, e.g. `scripts/test.sh -p rollbox-tests --test hostile`.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/test-env.sh
exec cargo test --workspace "$@"
