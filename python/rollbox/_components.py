"""One `Components` per distinct set of arguments per process, for the trainer adapters: verl
and TRL call a reward function per sample, and each call must not reload the components."""

from __future__ import annotations

import json
import threading
from typing import Any

from ._native import Components

# The options a trainer adapter passes on to a reward's spec: its limits and retries, and for a
# `.py` reward its style and requirements file (`rollbox build`).
OPTIONS = ("timeout", "retries", "max_memory", "memory", "fuel", "style", "requirements")

_CACHE: dict[str, Components] = {}
_LOCK = threading.Lock()


def cached(
    rewards: dict[str, Any] | None = None,
    tools: dict[str, Any] | None = None,
    max_host_memory: str | int | None = None,
) -> Components:
    """The process's `Components` for these arguments, loaded on first use."""
    key = json.dumps([rewards, tools, max_host_memory], sort_keys=True, default=str)
    with _LOCK:
        found = _CACHE.get(key)
        if found is None:
            found = _CACHE[key] = Components(
                rewards=rewards, tools=tools, max_host_memory=max_host_memory
            )
        return found
