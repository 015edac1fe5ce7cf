#!/usr/bin/env bash
# verifiers 0.4.0 from PyPI with its own dependencies (openai, anthropic, math-verify, ...;
# about 570 MB, ~70 s), in a venv under ~/.cache/rollbox/ keyed by the pins, for
# python/tests/verifiers/ (rollbox.verifiers against the real package). Its own venv: its pins
# (numpy, httpx, pydantic) need not agree with verl's or TRL's. Skipped when complete.
#
#   scripts/install/verifiers-venv.sh        # prints the venv's python
set -euo pipefail
pins=("verifiers==0.4.0" "pytest==8.4.2")
key="$(printf '%s\n' "${pins[@]}" | sha256sum | cut -c1-12)"
venv="${ROLLBOX_VERIFIERS_VENV:-$HOME/.cache/rollbox/verifiers-venv-$key}"
marker="$venv/.rollbox-complete"
if [ ! -e "$marker" ]; then
    rm -rf "$venv"
    python3 -m venv "$venv"
    "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-cache-dir "${pins[@]}" >&2
    touch "$marker"
fi
echo "$venv/bin/python"
