"""rollbox in SkyRL (skyrl-gym 0.4.0): a text environment whose reward is a rollbox component.

    import rollbox.skyrl                      # registers the environment id "rollbox"
    env = skyrl_gym.make("rollbox", env_config={"reward": "math", "timeout": "5s"},
                         extras={"reward_spec": {"ground_truth": "72"}})
    out = env.step(model_output)              # reward from the sandboxed component

`RollboxEnv` is single-turn like skyrl-gym's own `gsm8k`: `step` scores the model's output
against `extras["reward_spec"]["ground_truth"]` (the row's `extra_info` goes along) and ends
the episode. SkyRL's generator calls `step` from its thread pool; the component runs on
rollbox's threads, so the calling thread waits with the GIL released. A call that faults scores
0.0 with the fault in `metadata`; it never hangs the step.
"""

from __future__ import annotations

import asyncio
from typing import Any

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput

from . import _components

# Per-call options passed through to the component (rollbox's limit keys).
_OPTIONS = _components.OPTIONS


class RollboxEnv(BaseTextEnv):
    """A skyrl-gym text environment scored by a rollbox reward component (see the module's
    doc). `env_config`: `reward` (a built-in's name or a `.wasm` path; default `math`),
    `timeout`, `retries`, `max_memory`, `fuel`."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        config = dict(env_config or {})
        extras = extras or {}
        spec = extras.get("reward_spec") or {}
        if "ground_truth" not in spec:
            raise ValueError('RollboxEnv needs extras={"reward_spec": {"ground_truth": ...}}')
        self.row = {"reward_model": {"ground_truth": spec["ground_truth"]}}
        if "extra_info" in extras:
            self.row["extra_info"] = extras["extra_info"]
        reward = str(config.get("reward", "math"))
        opts = {k: config[k] for k in _OPTIONS if config.get(k) is not None}
        self.components = _components.cached(
            rewards={"reward": {"path": reward, **opts} if opts else reward}
        )

    def step(self, action: str) -> BaseTextEnvStepOutput:
        async def score():  # the native call needs the running loop asyncio.run starts
            return await self.components.score("reward", action, data=self.row)

        r = asyncio.run(score())
        faulted = r["fault"] is not None
        return BaseTextEnvStepOutput(
            observations=[],
            reward=0.0 if faulted else float(r["score"]),
            done=True,
            metadata={"fault": r["fault"], "error": r["error"], "reward_ms": r["wall_s"] * 1e3},
        )


skyrl_gym.register(id="rollbox", entry_point="rollbox.skyrl:RollboxEnv")
