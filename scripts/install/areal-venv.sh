#!/usr/bin/env bash
# AReaL 1.0.4 from PyPI (it brings torch, torchvision and transformers, which run on the CPU;
# about 12 min and 9.4 GB the first time) plus gguf (transformers reads the model's tokenizer
# from the GGUF file), in ~/.cache/rollbox/areal-venv, for python/tests/areal_parity.py and the
# AReaL baselines of the benchmarks. Skipped when that venv is already complete.
#
#   scripts/install/areal-venv.sh        # prints the venv's python
set -euo pipefail
venv="${ROLLBOX_AREAL_VENV:-$HOME/.cache/rollbox/areal-venv}"
marker="$venv/.rollbox-areal-1.0.4-gguf"
if [ ! -e "$marker" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "areal==1.0.4" gguf >&2
    touch "$marker"
fi
echo "$venv/bin/python"
