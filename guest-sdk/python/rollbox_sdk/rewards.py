"""Reward functions: each a separate sandboxed component registered with the host
(`--reward NAME=PATH`), called by name."""

from __future__ import annotations

import json

from wit_world.imports import rewards as _wit
from wit_world.imports import types as _types

from .api import token_ids
from .errors import call


class ScoreResult:
    """What a reward call returned: `value`, `timed_out` (the value is the 0.0 fallback after
    every attempt timed out) and `accounting` (wall time, fuel, memory, attempts)."""

    __slots__ = ("value", "timed_out", "accounting")

    def __init__(self, r):
        self.value = r.value
        self.timed_out = r.timed_out
        self.accounting = r.accounting


def score_result(name: str, prompt, completions, prompt_ids, completion_ids, **data) -> ScoreResult:
    """Score with the reward registered as `name`, in AReaL's reward-function argument order:
    `(prompt, completions, prompt_ids, completion_ids, **data)`; `data` is the row."""
    inp = _types.RewardInput(
        prompt=str(prompt),
        completion=str(completions),
        prompt_ids=token_ids(prompt_ids),
        completion_ids=token_ids(completion_ids),
        data=json.dumps(data),
    )
    return ScoreResult(call(_wit.score, str(name), inp))


def score(name: str, prompt, completions, prompt_ids, completion_ids, **data) -> float:
    """The reward value of `score_result`."""
    return score_result(name, prompt, completions, prompt_ids, completion_ids, **data).value


def names() -> list[str]:
    """The names of the registered rewards."""
    return list(_wit.names())


class AsyncRewardWrapper:
    """AReaL's `AsyncRewardWrapper(reward_fn)`, for a reward registered with the host:
    `await wrapper(prompt, completions, prompt_ids, completion_ids, **data)` gives the reward.
    The host applies the timeout and retries (a timed-out reward is 0.0, as in AReaL).

    `reward_fn` is the registered name (`"math"`), or an object whose `__name__` is one.
    """

    def __init__(self, reward_fn, *args, **kwargs):
        name = reward_fn if isinstance(reward_fn, str) else getattr(reward_fn, "__name__", None)
        if not isinstance(name, str):
            raise TypeError(
                "AsyncRewardWrapper takes the name of a registered reward (--reward NAME=PATH), "
                f"not {reward_fn!r}"
            )
        self.name = name
        self.last = None

    async def __call__(self, prompt, completions, prompt_ids, completion_ids, **data) -> float:
        self.last = score_result(self.name, prompt, completions, prompt_ids, completion_ids, **data)
        return self.last.value
