"""rollbox inside the trainer: run sandboxed WebAssembly rollout workflows with the trainer's
own inference engine.

    import rollbox
    host = rollbox.Host("rlvr.wasm", rewards={"math": "math.wasm"}, tokenizer="tokenizer.json",
                        config={"reward": "math", "gconfig": {"max_new_tokens": 512}})
    tensors = await host.arun_episode(row, engine=areal_engine)   # dict of numpy arrays

`rollbox.areal.WasmWorkflow` wraps a Host as an AReaL `RolloutWorkflow`. `rollbox.Components`
holds rewards and tools without a workflow; `rollbox.verl.compute_score`, `rollbox.verl_tools`
and `rollbox.trl.reward_func` put them in verl and TRL.
"""

import os as _os
import sys as _sys

# A `.py` reward or tool is built with the componentize-py and pip of this Python (its venv's
# `rollbox[build]` extra), found through ROLLBOX_PYTHON.
_os.environ.setdefault("ROLLBOX_PYTHON", _sys.executable)

from ._native import Components, EpisodeError, Host, build_info  # noqa: E402
from .areal_types import GenerationHyperparameters, ModelRequest, ModelResponse  # noqa: E402

__all__ = [
    "Components",
    "EpisodeError",
    "GenerationHyperparameters",
    "Host",
    "ModelRequest",
    "ModelResponse",
    "build_info",
]

# The package version (the wheel's); `build_info()` adds the commit, the WIT package and the
# wasmtime with its patches.
__version__: str = build_info()["version"]
