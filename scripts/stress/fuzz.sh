#!/usr/bin/env bash
# Long fuzz run of the host-call boundary: the `random_programs_never_break_the_host` test of
# tests/tests/fuzz.rs, built with --release, for HOURS hours (fractional: 0.5 is half an hour),
# then tests/tests/fuzz_components.rs (generated and mutated component files) for a tenth of
# that,
# from SEED when given (default: from the clock; the seed is printed, and progress every
# minute). The seed corpus runs first. A host panic or hang fails the run and leaves the
# program in target/fuzz-crashes/<seed>-<n>.hex; copy it into tests/fixtures/fuzz/corpus/ to
# replay it with every `cargo test`.
#
#   scripts/stress/fuzz.sh HOURS [SEED]
#
# Goes through scripts/test.sh, which puts componentize-py on PATH (the test build compiles the
# Python reward) and fetches the model (its tokenizer serves the tokenizer calls).
set -euo pipefail
cd "$(dirname "$0")/../.."

if [ $# -lt 1 ] || [ $# -gt 2 ]; then
    echo "usage: scripts/stress/fuzz.sh HOURS [SEED]" >&2
    exit 2
fi
if ! secs="$(awk -v h="$1" 'BEGIN { if (h !~ /^[0-9]*\.?[0-9]+$/ || h + 0 <= 0) exit 1; printf "%d", h * 3600 }')"; then
    echo "HOURS must be a positive number, got '$1'" >&2
    exit 2
fi
export ROLLBOX_FUZZ_SECS="$secs"
export ROLLBOX_FUZZ_COMPONENT_SECS="$((secs / 10 + 1))"
if [ $# -eq 2 ]; then
    export ROLLBOX_FUZZ_SEED="$2"
fi
# test.sh runs `cargo test --workspace "$@"`; `--test fuzz` picks this one test binary.
scripts/test.sh --release --test fuzz -- --nocapture random_programs_never_break_the_host
exec scripts/test.sh --release --test fuzz_components -- --nocapture
