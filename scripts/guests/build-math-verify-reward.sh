#!/usr/bin/env bash
# Build workflows/rewards/math-verify (AReaL 1.0.4's gsm8k_reward_fn: math-verify + sympy) into
# target/wasm-guests/python/math_verify_reward.wasm with componentize-py 0.25.1 (--stub-wasi).
#
#   scripts/guests/build-math-verify-reward.sh [OUTPUT.wasm]
#
# The pure-Python dependencies are pinned (versions and wheel sha256) and installed once into
# ~/.cache/rollbox/math-verify-deps-<hash of the pins>/ (skipped when present). componentize-py
# is taken from $COMPONENTIZE_PY, else PATH, else $ROLLBOX_TEST_VENV (scripts/install/test-env.sh).
#
# The component embeds CPython 3.14 (componentize-py 0.25.1's), which cannot use the .pyc files
# a host pip writes, so the install skips them (--no-compile) and primes the cache with one
# throw-away componentize-py run: it writes cpython-314 .pyc files next to the sources. Without
# them every build compiles ~570 modules from source inside the pre-initialisation and the
# garbage left in the snapshotted heap makes the component ~79 MB instead of ~53 MB.
set -euo pipefail

root="$(cd "$(dirname "$0")/../.." && pwd)"
out="${1:-$root/target/wasm-guests/python/math_verify_reward.wasm}"
componentize_version="0.25.1"

# name==version sha256 (the py3-none-any wheels on PyPI); mirrors AReaL 1.0.4's environment.
pins=(
    "math-verify==0.8.0 31ca651296d817a9bb3fd58ca1fd0d192dcea709b1e5ecf2d0a4514c16f89087"
    "latex2sympy2_extended==1.10.2 f910442c5b02a466c1046f47d05cc5285181068b882399281f30102715337fb7"
    "sympy==1.14.0 e091cc3e99d2141a0ba2847328f5479b05d94a6635cb96148ccb3f34671bd8f5"
    "mpmath==1.3.0 a0b2b9fe80bbcd81a6647ff13108738cfb482d481d826cc0e02f5b35e5c88d2c"
    "antlr4-python3-runtime==4.13.2 fe3835eb8d33daece0e799090eda89719dbccee7aa39ef94eed3818cafa5a7e8"
)

# componentize-py, at the pinned version.
cpy="${COMPONENTIZE_PY:-}"
if [ -z "$cpy" ]; then
    if command -v componentize-py >/dev/null 2>&1; then
        cpy="$(command -v componentize-py)"
    elif [ -n "${ROLLBOX_TEST_VENV:-}" ] && [ -x "$ROLLBOX_TEST_VENV/bin/componentize-py" ]; then
        cpy="$ROLLBOX_TEST_VENV/bin/componentize-py"
    fi
fi
if [ -z "$cpy" ] || [ "$("$cpy" --version 2>/dev/null)" != "componentize-py $componentize_version" ]; then
    echo "componentize-py $componentize_version is needed (found: ${cpy:-none}); pip install componentize-py==$componentize_version, or source scripts/install/test-env.sh" >&2
    exit 1
fi

# The dependencies, once per set of pins.
key="$(printf '%s\n' "${pins[@]}" "componentize-py==$componentize_version" | sha256sum | cut -c1-12)"
deps="$HOME/.cache/rollbox/math-verify-deps-$key"
if [ ! -f "$deps/.complete" ]; then
    rm -rf "$deps" "$deps.tmp"
    mkdir -p "$deps.tmp"
    requirements="$deps.tmp/.requirements.txt"
    for pin in "${pins[@]}"; do
        echo "${pin% *} --hash=sha256:${pin#* }"
    done >"$requirements"
    pip=("$(dirname "$cpy")/python" -m pip)
    [ -x "${pip[0]}" ] || pip=(python3 -m pip)
    "${pip[@]}" install --quiet --disable-pip-version-check --no-deps --no-compile \
        --require-hashes --only-binary :all: --target "$deps.tmp" -r "$requirements"
    rm -rf "$deps.tmp/bin" "$deps.tmp/share"
    # Prime: one build writes the cpython-314 .pyc files the component's interpreter uses.
    (cd "$root" && "$cpy" -d wit -w reward componentize --stub-wasi \
        -p workflows/rewards/math-verify -p "$deps.tmp" -p guest-sdk/python app -o "$deps.tmp/.prime.wasm" >/dev/null)
    rm -f "$deps.tmp/.prime.wasm"
    touch "$deps.tmp/.complete"
    mv "$deps.tmp" "$deps"
fi

mkdir -p "$(dirname "$out")"
cd "$root"
# The exact command (the deps directory is a second -p, the shared sandbox module a third; the
# app directory comes first).
"$cpy" -d wit -w reward componentize --stub-wasi \
    -p workflows/rewards/math-verify -p "$deps" -p guest-sdk/python app -o "$out"
ls -l "$out" >&2
