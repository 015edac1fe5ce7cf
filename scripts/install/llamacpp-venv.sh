#!/usr/bin/env bash
# llama-cpp-python 0.3.36 with its server (`python -m llama_cpp.server`), built from source from
# PyPI (it compiles llama.cpp: ~6 min on two cores; cmake and ninja come from PyPI as build
# requirements) for this machine's CPU, in a venv under ~/.cache/rollbox/ keyed by the pins and
# the CPU's flags (a build with -march=native runs only where it was built), for the live
# llama.cpp test (python/tests/engines_live.py), scripts/baselines/llamacpp_baseline.py and
# scripts/fixtures/record_openai_fixtures.py. Skipped when the venv is already complete.
#
#   scripts/install/llamacpp-venv.sh        # prints the venv's python
set -euo pipefail
pins=("llama-cpp-python[server]==0.3.36")
cpu="$(grep -m1 '^flags' /proc/cpuinfo | sha256sum | cut -c1-8)"
key="$(printf '%s\n' "${pins[@]}" "$cpu" | sha256sum | cut -c1-12)"
venv="${ROLLBOX_LLAMACPP_VENV:-$HOME/.cache/rollbox/llamacpp-venv-$key}"
marker="$venv/.rollbox-complete"
if [ ! -e "$marker" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    CMAKE_ARGS="-DGGML_NATIVE=ON" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
        "${pins[@]}" >&2
    touch "$marker"
fi
echo "$venv/bin/python"
