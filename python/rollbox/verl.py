"""rollbox in verl (0.9.1): a reward function that scores each response in a sandbox.

    # verl's reward config (YAML or Hydra overrides):
    reward.custom_reward_function.path=pkg://rollbox.verl
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.reward=math            # optional
    +reward.custom_reward_function.reward_kwargs.timeout=5s             # optional

`compute_score` is async, so verl's reward loop awaits it on its event loop; the component runs
on rollbox's threads with the GIL released. A reward that hangs, traps or runs out of memory
is stopped at its limit and scores 0.0 with `fault` set; it never hangs the training step
(verl's `naive` manager has no timeout of its own).

Which component scores a sample: `reward` in `reward_kwargs` (a built-in's name or a `.wasm`
path), else the one for its `data_source` (`DATA_SOURCES`). The built-in `math` reward is
AReaL's `gsm8k_reward_fn` (math-verify on the response's last answer against the reference):
it is not verl's `openai/gsm8k` rule (a strict `#### N` regex over the last 300 characters), so
scores differ where a response states its answer without `####`.

Function tools for `actor_rollout_ref.rollout.multi_turn.function_tool_path`: see
`rollbox.verl_tools`.
"""

from __future__ import annotations

from typing import Any

from . import _components

# verl's data_source names whose answers the `math` reward scores (verl's own default scorers
# for them: `gsm8k.py`, `math_reward.py`, `math_dapo.py`, `prime_math`).
_MATH_SOURCES = (
    "openai/gsm8k",
    "lighteval/MATH",
    "DigitalLearningGmbH/MATH-lighteval",
    "HuggingFaceH4/MATH-500",
    "math_dapo",
    "math",
    "math_dapo_reasoning",
)
_MATH_PREFIXES = ("aime", "numina_")

# The keys of every result, the same for every sample (verl builds its extra-info columns from
# the first sample's keys).
RESULT_KEYS = ("score", "acc", "fault", "error", "reward_ms", "attempts")

# Per-call options passed through to the component (see rollbox's limit keys).
_OPTIONS = ("timeout", "retries", "max_memory", "memory", "fuel")


def reward_for(data_source: str) -> str:
    """The built-in reward for a verl `data_source`, or a ValueError naming the fix."""
    if data_source in _MATH_SOURCES or data_source.startswith(_MATH_PREFIXES):
        return "math"
    raise ValueError(
        f"rollbox.verl has no reward for data_source `{data_source}`; name one with "
        "+reward.custom_reward_function.reward_kwargs.reward=<built-in name or .wasm path>"
    )


def _spec(reward: str, options: dict[str, Any]) -> dict[str, Any] | str:
    opts = {k: v for k, v in options.items() if k in _OPTIONS and v is not None}
    return {"path": str(reward), **opts} if opts else str(reward)


async def compute_score(
    data_source: str,
    solution_str: str,
    ground_truth: Any,
    extra_info: dict[str, Any] | None = None,
    reward: str | None = None,
    max_host_memory: str | int | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Score `solution_str` against `ground_truth` with a rollbox reward component.

    Returns `{"score", "acc", "fault", "error", "reward_ms", "attempts"}` for every sample:
    `score` is the reward (0.0 when the component faulted), `acc` the same value or None on a
    fault (verl then counts it as 0 in `acc` and leaves it out of `acc_success_only`), `fault`
    the fault's kind (`timeout`, `trap`, `out_of_fuel`, `memory_limit`, ...) or None, `error`
    what happened and which option to raise. `timeout`, `retries`, `max_memory`, `fuel` in
    `reward_kwargs` set the component's limits; other verl keywords are ignored.
    """
    name = reward or reward_for(data_source)
    components = _components.cached(
        rewards={"reward": _spec(name, kwargs)}, max_host_memory=max_host_memory
    )
    row = {
        "data_source": data_source,
        "reward_model": {"ground_truth": ground_truth},
        "extra_info": _plain(extra_info or {}),
    }
    r = await components.score("reward", solution_str, data=row)
    faulted = r["fault"] is not None
    return {
        "score": 0.0 if faulted else float(r["score"]),
        "acc": None if faulted else float(r["score"]),
        "fault": r["fault"],
        "error": r["error"],
        "reward_ms": r["wall_s"] * 1e3,
        "attempts": r["attempts"],
    }


def _plain(value: Any) -> Any:
    """verl's extra_info with numpy values as plain Python (JSON for the component)."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    return str(value)
