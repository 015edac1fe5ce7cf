"""rollbox in TRL (1.16): reward functions that score each completion in a sandbox.

    from rollbox.trl import reward_func
    trainer = GRPOTrainer(model=..., reward_funcs=[reward_func("math")], train_dataset=ds, ...)

`reward_func(component, **options)` is an async callable TRL awaits with its other async reward
functions. Each completion is scored by `component` (a built-in's name or a `.wasm` path) in a
fresh sandbox, on rollbox's threads with the GIL released. The reward reads the reference from
the row's columns as the dataset ships them (`answer`, `solution`, `ground_truth`,
`reward_model.ground_truth`, ...). A completion whose call faulted (hung past `timeout`,
trapped, out of memory or fuel) gets None, which TRL leaves out of that reward's mean, and the
faults are counted in the `rollbox/<name>/faults` metric.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from . import _components

# Per-call options passed through to the component (rollbox's limit keys).
_OPTIONS = ("timeout", "retries", "max_memory", "memory", "fuel")

# Keyword arguments TRL passes that are not dataset columns.
_NOT_COLUMNS = ("trainer_state", "log_extra", "log_metric", "environments")


def _text(value: Any) -> str:
    """A prompt or completion as text: a string, or (conversational) the messages' contents."""
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        return "".join(m.get("content") or "" for m in value if isinstance(m, dict))
    return str(value)


def _plain(value: Any) -> Any:
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


class RewardFunc:
    """A TRL reward function backed by a rollbox reward component (see the module's doc).
    Picklable: it holds only the component's spec, and each process loads the component once."""

    def __init__(
        self,
        component: str = "math",
        *,
        name: str | None = None,
        max_host_memory: str | int | None = None,
        **options: Any,
    ):
        unknown = set(options) - set(_OPTIONS)
        if unknown:
            raise ValueError(
                f"unknown option(s) {sorted(unknown)} for reward_func; use {', '.join(_OPTIONS)}"
            )
        self.component = str(component)
        self.options = {k: v for k, v in options.items() if v is not None}
        self.max_host_memory = max_host_memory
        # TRL names the reward's metrics (`rewards/<name>/mean`) after `__name__`.
        self.__name__ = name or f"rollbox_{Path(self.component).stem.replace('-', '_')}"

    def _components(self):
        spec = {"path": self.component, **self.options} if self.options else self.component
        return _components.cached(rewards={"reward": spec}, max_host_memory=self.max_host_memory)

    async def __call__(
        self,
        prompts: list[Any],
        completions: list[Any],
        completion_ids: list[list[int]] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        components = self._components()
        columns = {k: v for k, v in kwargs.items() if k not in _NOT_COLUMNS}
        n = len(completions)

        def row(i: int) -> dict[str, Any]:
            return {
                k: _plain(v[i])
                for k, v in columns.items()
                if isinstance(v, (list, tuple)) and len(v) == n
            }

        results = await asyncio.gather(
            *(
                components.score(
                    "reward",
                    _text(completions[i]),
                    prompt=_text(prompts[i]),
                    data=row(i),
                    completion_ids=list(completion_ids[i]) if completion_ids else [],
                )
                for i in range(n)
            )
        )
        log_metric = kwargs.get("log_metric")
        if log_metric is not None:
            log_metric(
                f"rollbox/{self.__name__}/faults", float(sum(r["fault"] is not None for r in results))
            )
        return [None if r["fault"] is not None else r["score"] for r in results]


def reward_func(component: str = "math", **options: Any) -> RewardFunc:
    """A TRL reward function scoring with `component` (see [`RewardFunc`]); `options`: `name`,
    `max_host_memory`, and the component's `timeout`, `retries`, `max_memory`, `fuel`."""
    return RewardFunc(component, **options)
