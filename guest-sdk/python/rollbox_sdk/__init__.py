"""rollbox's Python guest SDK: write a rollout workflow the way AReaL's are written.

    import rollbox_sdk as rollbox
    from rollbox_sdk import GenerationHyperparameters, ModelRequest, RolloutWorkflow

    class MyWorkflow(RolloutWorkflow):
        async def arun_episode(self, engine, data):
            ...
            resp = await engine.agenerate(ModelRequest(input_ids=ids, gconfig=gconfig))
            ...
            return {"input_ids": rollbox.tensor(seq, dtype=rollbox.int32).unsqueeze(0), ...}

    WitWorld = rollbox.export(MyWorkflow)

Build with `scripts/guests/build-python-workflow.sh` (componentize-py); see `guest-sdk/python/README.md`.
The package was `rollbox` before 0.1.1, the trainer package's name too; `import rollbox` still
works in a component for a release (`guest-sdk/python/rollbox`, an alias that warns at build).
"""

from .api import GenerationHyperparameters, ModelRequest, ModelResponse
from .engine import EpisodeLoop, InferenceEngine, engine
from .errors import HostError
from .rewards import AsyncRewardWrapper, ScoreResult, names as reward_names, score, score_result
from .stats import getLogger, stats_tracker
from .tensor import (
    Tensor,
    bfloat16,
    bool_,
    cat,
    concat_padded_tensors,
    dtype,
    float32,
    int32,
    int64,
    ones,
    tensor,
    uint8,
    zeros,
)
from .tokenizer import Tokenizer, apply_chat_template, tokenizer
from .trajectory import TrajectoryBuilder, merge, single_turn
from .workflow import (
    PROMPT_KEYS,
    Episode,
    Output,
    RolloutWorkflow,
    episode,
    export,
    prompt_messages,
    reward_data,
    run,
    workflow_context,
)

bool = bool_  # noqa: A001 - torch's name for the dtype (`rollbox.bool`)

__all__ = [
    "AsyncRewardWrapper", "Episode", "EpisodeLoop", "GenerationHyperparameters", "HostError",
    "InferenceEngine", "ModelRequest", "ModelResponse", "Output", "PROMPT_KEYS",
    "RolloutWorkflow", "ScoreResult", "Tensor", "Tokenizer", "TrajectoryBuilder",
    "apply_chat_template", "bfloat16", "bool", "bool_", "cat", "concat_padded_tensors", "dtype",
    "engine", "episode", "export", "float32", "getLogger", "int32", "int64", "merge", "ones",
    "prompt_messages", "reward_data", "reward_names", "run", "score", "score_result",
    "single_turn", "stats_tracker", "tensor", "tokenizer", "uint8", "workflow_context", "zeros",
]
