"""Glue the native module calls: JSON of rows, and one `engine.agenerate` round trip."""

from __future__ import annotations

import json
import math


def _default(o):
    if hasattr(o, "tolist"):  # numpy arrays and scalars, torch tensors
        return o.tolist()
    if isinstance(o, (set, tuple)):
        return list(o)
    raise TypeError(f"a {type(o).__name__} in the row cannot be passed to the workflow as JSON")


def dumps(obj) -> str:
    return json.dumps(obj, default=_default)


try:  # the engine gets AReaL's own request type when AReaL is there
    from areal.api.cli_args import GenerationHyperparameters as _Gen
    from areal.api.io_struct import ModelRequest as _Req
except Exception:  # noqa: BLE001 - any import failure means "no AReaL"
    from .areal_types import GenerationHyperparameters as _Gen
    from .areal_types import ModelRequest as _Req


def _finite(x):
    return None if x is None or not math.isfinite(float(x)) else float(x)


async def agenerate(engine, req: dict) -> dict:
    """Build the request, await `engine.agenerate`, return the response's fields."""
    gconfig = _Gen(**req["gconfig"])
    request = _Req(
        rid=req["rid"],
        input_ids=list(req["input_ids"]),
        gconfig=gconfig,
        image_data=list(req["image_data"]) or None,
        # The chat messages for chat-completions servers (AReaL's vLLM client), when sent.
        vision_msg_vllm=[json.loads(req["chat_messages"])] if req.get("chat_messages") else None,
    )
    resp = await engine.agenerate(request)
    versions = list(getattr(resp, "output_versions", None) or [])
    return {
        "output_tokens": [int(t) for t in resp.output_tokens],
        "output_logprobs": [float(x) for x in resp.output_logprobs],
        "output_versions": [int(v) for v in versions] if versions else None,
        "stop_reason": str(getattr(resp, "stop_reason", "stop") or "stop"),
        "ttft": _finite(getattr(resp, "ttft", None)),
    }
