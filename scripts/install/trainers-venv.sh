#!/usr/bin/env bash
# verl 0.9.1, TRL 1.16.0, skyrl-gym 0.4.0 and OpenRLHF 0.11.2's client code from PyPI, in one
# venv under ~/.cache/rollbox/ keyed by the pins, for python/tests/trainers/ (rollbox.verl,
# rollbox.trl, rollbox.skyrl and the OpenRLHF reward protocol against the real packages). torch comes with verl from PyPI (CUDA
# wheels included, though everything here runs on the CPU; about 6.5 GB). verl's agent loop also
# needs cachetools, uvicorn and fastapi (its `verl-core` extra, without vLLM or SGLang);
# transformers reads the project's GGUF model with gguf. OpenRLHF is installed without its
# dependencies (vLLM, DeepSpeed): its HTTP reward client needs only aiohttp. Skipped when the venv
# is already complete.
#
#   scripts/install/trainers-venv.sh        # prints the venv's python
set -euo pipefail
pins=(
    "verl==0.9.1" "trl==1.16.0" "transformers==5.9.0" "gguf==0.19.0" "math-verify==0.9.0"
    "skyrl-gym==0.4.0" "cachetools" "uvicorn" "fastapi" "aiohttp" "pytest==8.4.2"
)
key="$(printf '%s\n' "${pins[@]}" "openrlhf==0.11.2" | sha256sum | cut -c1-12)"
venv="${ROLLBOX_TRAINERS_VENV:-$HOME/.cache/rollbox/trainers-venv-$key}"
marker="$venv/.rollbox-complete"
if [ ! -e "$marker" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    # No pip cache: the wheels (torch's CUDA libraries are most of them) would be stored twice.
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir "${pins[@]}" >&2
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir --no-deps "openrlhf==0.11.2" >&2
    touch "$marker"
fi
echo "$venv/bin/python"
