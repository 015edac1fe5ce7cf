#!/usr/bin/env bash
# The project's model (SmolLM2-135M-Instruct Q4_1, scripts/install/fetch-model.sh) as a
# transformers checkpoint that vLLM's CPU build loads: read from the GGUF and dequantised by
# transformers (gguf), saved as float32 safetensors with its tokenizer and config, ~520 MB, in
#   ${ROLLBOX_MODEL_DIR:-$HOME/.cache/rollbox/models}/SmolLM2-135M-Instruct-Q4_1-f32/
# The same weights the embedded engine runs, without its quantised activations. Converted with
# the vLLM venv's python (scripts/install/vllm-venv.sh, installed first if need be; or $1).
# Skipped when the folder is complete.
#
#   scripts/install/vllm-model.sh [PYTHON]     # prints the folder
set -euo pipefail
cd "$(dirname "$0")/../.."
python="${1:-$(scripts/install/vllm-venv.sh)}"
gguf="$(scripts/install/fetch-model.sh)"
out="$(dirname "$gguf")/SmolLM2-135M-Instruct-Q4_1-f32"
if [ ! -e "$out/.rollbox-complete" ]; then
    rm -rf "$out" "$out.part"
    "$python" - "$gguf" "$out.part" >&2 <<'PY'
import os, sys

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

gguf, out = sys.argv[1], sys.argv[2]
folder, name = os.path.split(gguf)
model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
# Dequantised on load: saved as a plain checkpoint, not as a GGUF-quantised one.
model.hf_quantizer = None
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained(out, safe_serialization=True)
tokenizer.save_pretrained(out)
PY
    touch "$out.part/.rollbox-complete"
    mv "$out.part" "$out"
fi
echo "$out"
