"""Load AReaL's own `concat_padded_tensors` (areal/utils/data.py) from an installed `areal`
package, for scripts/fixtures/record_concat_fixture.py and scripts/baselines/concat_baseline.py.

`import areal` pulls in the whole framework (aiohttp, ray, transformers, hydra, ...). When the
plain import fails, only the package `__init__`s and two modules that `areal/utils/data.py`
imports but `concat_padded_tensors` never uses (`areal.api.cli_args`, `areal.infra.platforms`)
are replaced; `areal/utils/data.py` itself, and the function that runs, come from the package.
Light deps it still needs: torch, numpy, einops, torchdata, colorlog, numba.

Setup (see the docstrings of the two scripts):
    python3 -m venv ~/.cache/rollbox/areal-venv
    ~/.cache/rollbox/areal-venv/bin/pip install torch numpy safetensors einops colorlog numba requests
    ~/.cache/rollbox/areal-venv/bin/pip install --no-deps areal==1.0.4 torchdata
"""

import hashlib
import importlib.metadata
import importlib.util
import os
import sys
import types


def _package(name, path):
    mod = types.ModuleType(name)
    mod.__path__ = [path]  # submodules load from the real files; the __init__ is skipped
    sys.modules[name] = mod


def _stub(name, **attrs):
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    sys.modules[name] = mod


def load():
    """Return (concat_padded_tensors, info dict with versions and the source file hash)."""
    try:
        from areal.utils.data import concat_padded_tensors
    except ImportError:
        for name in [m for m in sys.modules if m == "areal" or m.startswith("areal.")]:
            del sys.modules[name]
        spec = importlib.util.find_spec("areal")
        if spec is None or spec.origin is None:
            sys.exit("areal is not installed: pip install --no-deps areal==1.0.4")
        root = os.path.dirname(spec.origin)
        _package("areal", root)
        _package("areal.infra", os.path.join(root, "infra"))
        _package("areal.api", os.path.join(root, "api"))
        _stub("areal.api.cli_args", MicroBatchSpec=type("MicroBatchSpec", (), {}), NormConfig=type("NormConfig", (), {}))
        _stub("areal.infra.platforms", current_platform=None)
        from areal.utils.data import concat_padded_tensors
    import torch

    source = concat_padded_tensors.__code__.co_filename
    assert source.endswith(os.path.join("areal", "utils", "data.py")), source
    with open(source, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    info = {
        "areal_version": importlib.metadata.version("areal"),
        "torch_version": torch.__version__,
        "areal_source": f"areal/utils/data.py sha256:{digest}",
    }
    return concat_padded_tensors, info
