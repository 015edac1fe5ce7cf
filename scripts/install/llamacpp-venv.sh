#!/usr/bin/env bash
# llama-cpp-python 0.3.36 with its server (`python -m llama_cpp.server`), built from source from
# PyPI (it compiles llama.cpp: ~6 min on two cores; cmake and ninja come from PyPI as build
# requirements) in a venv under ~/.cache/rollbox/ keyed by the pins and the build flags, for the
# live llama.cpp test (python/tests/engines_live.py), scripts/baselines/llamacpp_baseline.py and
# scripts/fixtures/record_openai_fixtures.py. Skipped when the venv is already complete.
#
# Built for a portable baseline, never for what this CPU advertises (`GGML_NATIVE=OFF`): a
# `-march=native` build trapped with an invalid opcode in libggml-cpu.so on its first batch on a
# fresh machine of the same kind (issue 52), since what a VM's CPU flags advertise is not what
# it runs. x86-64-v3 (AVX2, FMA, F16C, BMI2) where the CPU has all four, else plain x86-64.
#
#   scripts/install/llamacpp-venv.sh        # prints the venv's python
set -euo pipefail
pins=("llama-cpp-python[server]==0.3.36")
cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX=OFF -DGGML_AVX2=OFF -DGGML_FMA=OFF -DGGML_F16C=OFF -DGGML_BMI2=OFF"
flags=" $(grep -m1 '^flags' /proc/cpuinfo | cut -d: -f2) "
if [[ "$flags" == *" avx2 "* && "$flags" == *" fma "* && "$flags" == *" f16c "* && "$flags" == *" bmi2 "* ]]; then
    cmake_args="-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON"
fi
cmake_args+=" -DGGML_AVX512=OFF -DGGML_AVX_VNNI=OFF -DGGML_AMX_TILE=OFF -DGGML_AMX_INT8=OFF"
# The key is what was built (pins and flags), so a cache built another way is never reused.
key="$(printf '%s\n' "${pins[@]}" "$cmake_args" | sha256sum | cut -c1-12)"
venv="${ROLLBOX_LLAMACPP_VENV:-$HOME/.cache/rollbox/llamacpp-venv-$key}"
marker="$venv/.rollbox-complete"
if [ ! -e "$marker" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    CMAKE_ARGS="$cmake_args" CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" \
        "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir \
        "${pins[@]}" >&2
    touch "$marker"
fi
echo "$venv/bin/python"
