"""`WasmWorkflow`: a rollbox component as an AReaL `RolloutWorkflow`.

    from rollbox.areal import WasmWorkflow
    workflow = WasmWorkflow(
        "rlvr.wasm",
        rewards={"math": "math.wasm"},
        tokenizer="/path/to/tokenizer.json",
        config={"reward": "math", "gconfig": {"max_new_tokens": 1024}},
    )
    # in place of RLVRWorkflow(...): trainer.train(workflow=workflow, ...)

Every argument is a path, a string or a JSON-like dict, so AReaL's single-controller mode can
send the workflow to each worker as an import string (`"rollbox.areal.WasmWorkflow"`) plus
kwargs. Each worker process builds one `rollbox.Host` per distinct set of arguments (components
compiled once, then cached on disk by content hash) and runs every episode in a fresh sandbox,
generating through the engine AReaL passes to `arun_episode`.
"""

from __future__ import annotations

import json
import threading
from typing import Any

from ._native import Host

try:
    from areal.api import RolloutWorkflow
except Exception:  # noqa: BLE001 - AReaL absent: the class still works as a plain object
    RolloutWorkflow = object

_HOSTS: dict[str, Host] = {}
_LOCK = threading.Lock()


def host_kwargs(
    workflow: str,
    rewards: dict[str, Any] | None = None,
    tools: dict[str, Any] | None = None,
    tokenizer: str | None = None,
    config: dict[str, Any] | None = None,
    limits: dict[str, Any] | None = None,
    engine: str | None = None,
) -> dict[str, Any]:
    """`Host` arguments as plain JSON-like values (paths as strings): the key of the process's
    host cache, and what a worker can be sent."""
    kwargs = {
        "workflow": str(workflow),
        "rewards": rewards,
        "tools": tools,
        "tokenizer": None if tokenizer is None else str(tokenizer),
        "config": config,
        "limits": limits,
    }
    if engine is not None:
        kwargs["engine"] = engine
    return kwargs


def _host(kwargs: dict) -> Host:
    key = json.dumps(kwargs, sort_keys=True, default=str)
    with _LOCK:
        host = _HOSTS.get(key)
        if host is None:
            args = dict(kwargs)
            workflow = args.pop("workflow")
            host = _HOSTS[key] = Host(workflow, **{k: v for k, v in args.items() if v is not None})
        return host


class WasmWorkflow(RolloutWorkflow):
    """AReaL's `RolloutWorkflow` running a rollbox workflow component."""

    def __init__(
        self,
        workflow: str,
        rewards: dict[str, Any] | None = None,
        tools: dict[str, Any] | None = None,
        tokenizer: str | None = None,
        config: dict[str, Any] | None = None,
        limits: dict[str, Any] | None = None,
    ):
        self.kwargs = host_kwargs(workflow, rewards, tools, tokenizer, config, limits)
        self.host = _host(self.kwargs)

    async def arun_episode(self, engine, data: dict[str, Any]):
        out = await self.host.arun_episode(data, engine=engine)
        if out is None:
            return None
        import torch

        return to_areal({k: torch.from_numpy(v) for k, v in out.items()})


def to_areal(tensors: dict) -> dict:
    """A rollbox episode's tensors in AReaL's layout: `multi_modal_input.<name>` keys become
    `multi_modal_input=[{<name>: tensor}]` (one dict per trajectory, as AReaL's
    `VisionRLVRWorkflow` returns it), and then `input_ids` and `mm_token_type_ids` are int64 as
    that workflow builds them. Other dicts are returned as they are."""
    prefix = "multi_modal_input."
    mm = {k[len(prefix):]: tensors.pop(k) for k in [k for k in tensors if k.startswith(prefix)]}
    if not mm:
        return tensors
    import torch

    tensors["multi_modal_input"] = [mm]
    for key in ("input_ids", "mm_token_type_ids"):
        if key in tensors:
            tensors[key] = tensors[key].to(torch.long)
    return tensors
