"""rollbox in verifiers (0.4.0): a `@vf.reward` scoring each rollout in a sandbox.

verifiers 0.4.0 has no `Rubric`: rewards are async `@vf.reward` methods of a `vf.Task`
(or functions plugged by config), called with the arguments they name out of
`task` (the row, a `vf.TaskData`), `trace` (the rollout, a `vf.Trace`) and `runtime`.

    import verifiers.v1 as vf
    from rollbox.verifiers import reward

    class MathData(vf.TaskData):
        answer: str

    class MathTask(vf.Task[MathData]):
        correct = reward("math", timeout="5s")          # recorded as trace.rewards["correct"]

or, with no task code, plugged in by the task's config (`fn` is an import path):

    vf.TaskConfig(rewards={"correct": vf.RewardFunctionConfig(fn="rollbox.verifiers:math_reward")})

Each call scores `trace.last_reply` with `component` (a built-in's name or a `.wasm` path) in a
fresh sandbox, on rollbox's threads with the GIL released. The component gets the task's own
fields (`answer`, `solution`, `ground_truth`, ... as the row has them) as its data. A call that
faulted (hung past `timeout`, trapped, ran out of memory or fuel) scores 0.0; the fault is
recorded in `trace.info["rollbox"][name]` and the metric `rollbox/<name>/faults`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from . import _components

# Per-call options passed through to the component (rollbox's limit keys).
_OPTIONS = _components.OPTIONS

# vf.TaskData's fields that describe how to run the task, not the row: not sent to the component.
_PLUMBING = (
    "prompt", "system_prompt", "image", "workdir", "agent_user", "skills", "network_allow",
    "network_block", "artifacts", "artifact_max_bytes", "timeout", "resources",
)


def _content(message: Any) -> str:
    content = message.get("content") if isinstance(message, dict) else getattr(message, "content", None)
    if isinstance(content, list):  # content parts
        return "".join(
            (p.get("text") if isinstance(p, dict) else getattr(p, "text", None)) or "" for p in content
        )
    return content or ""


def _role(message: Any) -> str | None:
    return message.get("role") if isinstance(message, dict) else getattr(message, "role", None)


def completion_text(completion: Any) -> str:
    """The text to score: a `vf.Trace`'s `last_reply`, a string, or the last assistant
    message's content in a list of chat messages."""
    if hasattr(completion, "last_reply"):
        return completion.last_reply
    if isinstance(completion, str):
        return completion
    if isinstance(completion, (list, tuple)):
        for message in reversed(completion):
            if _role(message) == "assistant":
                return _content(message)
        return ""
    return str(completion)


def _row(task: Any) -> dict[str, Any]:
    """The task's row as the component's data (a dict is taken as it is)."""
    if task is None:
        return {}
    if isinstance(task, dict):
        return dict(task)
    dump = task.model_dump(mode="json", exclude_none=True)
    return {k: v for k, v in dump.items() if k not in _PLUMBING}


def _prompt(task: Any) -> str:
    text = getattr(task, "prompt_text", None)
    return text if isinstance(text, str) else ""


class Reward:
    """A verifiers reward backed by a rollbox reward component (see the module's doc). It
    carries the tags `@vf.reward` sets (`reward`, `reward_priority`, `_vf_weight`), and is an
    object rather than a function so that, as a `vf.Task` class attribute, it is not bound
    to the task; it takes the attribute's name. Picklable: it holds only the component's spec,
    and each process loads the component once."""

    def __init__(
        self,
        component: str = "math",
        *,
        name: str | None = None,
        weight: float = 1.0,
        priority: int = 0,
        max_host_memory: str | int | None = None,
        **options: Any,
    ):
        unknown = set(options) - set(_OPTIONS)
        if unknown:
            raise ValueError(
                f"unknown option(s) {sorted(unknown)} for rollbox.verifiers.reward; "
                f"use {', '.join(_OPTIONS)}"
            )
        self.component = str(component)
        self.options = {k: v for k, v in options.items() if v is not None}
        self.max_host_memory = max_host_memory
        # The tags verifiers' `@vf.reward(weight=, priority=)` sets (v1/utils/decorators.py).
        self.reward = True
        self.reward_priority = priority
        self._vf_weight = float(weight)
        self._named = name is not None
        self.__name__ = name or f"rollbox_{Path(self.component).stem.replace('-', '_')}"

    def __set_name__(self, owner: type, name: str) -> None:
        if not self._named:
            self.__name__ = name

    def _components(self):
        spec = {"path": self.component, **self.options} if self.options else self.component
        return _components.cached(rewards={"reward": spec}, max_host_memory=self.max_host_memory)

    async def __call__(self, task: Any, trace: Any) -> float:
        r = await self._components().score(
            "reward", completion_text(trace), prompt=_prompt(task), data=_row(task)
        )
        faulted = r["fault"] is not None
        if hasattr(trace, "record_metric"):
            trace.record_metric(f"rollbox/{self.__name__}/faults", float(faulted))
            if faulted:
                trace.info.setdefault("rollbox", {})[self.__name__] = {
                    k: r.get(k) for k in ("fault", "error", "attempts", "wall_s")
                }
        return 0.0 if faulted else float(r["score"])


def reward(component: str = "math", **options: Any) -> Reward:
    """A verifiers reward scoring with `component` (see [`Reward`]); `options`: `name`,
    `weight`, `priority`, `max_host_memory`, and the component's `timeout`, `retries`,
    `max_memory`, `fuel`."""
    return Reward(component, **options)


# For `vf.RewardFunctionConfig(fn="rollbox.verifiers:math_reward")`.
math_reward = Reward("math", name="math_reward")
