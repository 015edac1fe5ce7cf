"""Load a safetensors file the way a trainer does and print what it holds as JSON:
{"loader": ..., "tensors": {name: {"dtype": ..., "shape": [...], "data": [...]}}, "metadata": {...}}.

Uses `safetensors.torch.load_file` when torch is importable, else `safetensors.numpy.load_file`
(CI installs only safetensors + numpy). Dtype names are torch's (`int32`, `bool`, `float32`...).

    python3 scripts/ci/check_safetensors.py batch.safetensors
"""

import json
import sys

from safetensors import safe_open


def main(path):
    try:
        from safetensors.torch import load_file

        loader = "safetensors.torch.load_file"
        tensors = {
            k: {"dtype": str(v.dtype).removeprefix("torch."), "shape": list(v.shape), "data": v.flatten().tolist()}
            for k, v in load_file(path).items()
        }
    except ImportError:
        from safetensors.numpy import load_file

        loader = "safetensors.numpy.load_file"
        tensors = {
            k: {"dtype": str(v.dtype), "shape": list(v.shape), "data": v.flatten().tolist()}
            for k, v in load_file(path).items()
        }
    with safe_open(path, framework="numpy") as f:
        metadata = f.metadata() or {}
    print(json.dumps({"loader": loader, "tensors": tensors, "metadata": metadata}))


if __name__ == "__main__":
    main(sys.argv[1])
