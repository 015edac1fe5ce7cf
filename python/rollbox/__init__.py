"""rollbox inside the trainer: run sandboxed WebAssembly rollout workflows with the trainer's
own inference engine.

    import rollbox
    host = rollbox.Host("rlvr.wasm", rewards={"math": "math.wasm"}, tokenizer="tokenizer.json",
                        config={"reward": "math", "gconfig": {"max_new_tokens": 512}})
    tensors = await host.arun_episode(row, engine=areal_engine)   # dict of numpy arrays

`rollbox.areal.WasmWorkflow` wraps a Host as an AReaL `RolloutWorkflow`.
"""

from ._native import EpisodeError, Host
from .areal_types import GenerationHyperparameters, ModelRequest, ModelResponse

__all__ = ["EpisodeError", "GenerationHyperparameters", "Host", "ModelRequest", "ModelResponse"]
