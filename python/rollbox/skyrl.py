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

For tool-integrated reasoning, `PythonToolGroup` is skyrl-gym's `PythonCodeExecutorToolGroup`
(the same group name, the same `python(code)` tool, the same text back) run in a rollbox
python-exec session instead of `python -c` in a subprocess: no files, network or processes, and
what one call defines is there in the next call of the same episode. `RollboxCodeEnv`
(`"rollbox-code"`) is a multi-turn environment on it, in skyrl-gym's `<tool><python>...</python>
</tool>` format, scored by a rollbox reward when the model gives `<solution>...</solution>`:

    env = skyrl_gym.make("rollbox-code", env_config={"reward": "math"},
                         extras={"reward_spec": {"ground_truth": "72"}, "max_turns": 5})
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import skyrl_gym
from skyrl_gym.envs.base_text_env import BaseTextEnv, BaseTextEnvStepOutput
from skyrl_gym.tools.core import ToolGroup, tool

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


class PythonToolGroup(ToolGroup):
    """skyrl-gym's `PythonCodeExecutorToolGroup` in a rollbox sandbox (see the module's doc).
    `python(code)` gives what the code printed, stripped, or `Error executing Python code: `
    and the exception (python-exec's one line, where skyrl-gym's gives the whole traceback
    from stderr), or the timeout text skyrl-gym's gives. The first call opens the group's
    session (one python-exec instance); a call that faults ends it, and the next call opens a
    new one. `close()` frees it; so does dropping the group. `component`: python-exec's
    built-in name or a `.wasm` path; `memory`: the session's memory (default 512 MiB)."""

    def __init__(
        self, timeout: float = 10.0, component: str = "python-exec", memory: str = "512MiB"
    ):
        self.timeout = timeout
        spec = {"path": str(component), "timeout": f"{timeout}s", "retries": 0, "memory": memory}
        self._components = _components.cached(tools={"python": spec})
        self._session = None
        super().__init__(name="PythonCodeExecutorToolGroup")

    @tool
    def python(self, code: str) -> str:
        return asyncio.run(self._run(code))

    async def _run(self, code: str) -> str:
        if self._session is None:
            self._session = await self._components.open_session("python")
        r = await self._session.call({"code": code})
        if r["fault"] is not None:
            if r["fault"] != "guest_error":  # any other fault ended the session
                self._session = None
            if r["fault"] == "timeout":
                return f"Error executing Python code: Execution timed out after {self.timeout} seconds."
            return f"Error executing Python code: {r['error'].split('; ')[0]}"
        out = json.loads(r["output"])
        if not out.get("ok", True):
            return f"Error executing Python code: {out.get('error') or out.get('error_type')}"
        stdout = out.get("stdout") or ""
        return stdout.strip()

    def close(self) -> None:
        """End the session now and free its instance."""
        session, self._session = self._session, None
        if session is not None:

            async def close():
                await session.close()

            asyncio.run(close())


class RollboxCodeEnv(BaseTextEnv):
    """Tool-integrated reasoning in skyrl-gym's format (see the module's doc): each step's
    `<tool><python>code</python></tool>` runs in the episode's python-exec session and its
    text comes back as the next user message; a step with `<solution>...</solution>`, or the
    `max_turns`-th step (`extras`, default 5), ends the episode, and that step is scored by the
    rollbox reward (`env_config["reward"]`, default `math`) against
    `extras["reward_spec"]["ground_truth"]`. `env_config`: `reward`, `python_exec` (a
    `.wasm` path; default the built-in), `timeout` per call in seconds (default 10),
    `memory`."""

    def __init__(self, env_config: Any = None, extras: dict[str, Any] | None = None):
        super().__init__()
        config = dict(env_config or {})
        extras = extras or {}
        spec = extras.get("reward_spec") or {}
        if "ground_truth" not in spec:
            raise ValueError(
                'RollboxCodeEnv needs extras={"reward_spec": {"ground_truth": ...}}'
            )
        self.row = {"reward_model": {"ground_truth": spec["ground_truth"]}}
        self.max_turns = int(extras.get("max_turns", 5))
        self.scorer = _components.cached(rewards={"reward": str(config.get("reward", "math"))})
        self.python = PythonToolGroup(
            timeout=float(config.get("timeout", 10.0)),
            component=str(config.get("python_exec", "python-exec")),
            memory=str(config.get("memory", "512MiB")),
        )
        self.init_tool_groups([self.python])

    def step(self, action: str) -> BaseTextEnvStepOutput:
        self.turns += 1
        if self.turns >= self.max_turns or re.search(r"<solution>.*?</solution>", action, re.S):

            async def score():
                return await self.scorer.score("reward", action, data=self.row)

            r = asyncio.run(score())
            self.python.close()
            faulted = r["fault"] is not None
            return BaseTextEnvStepOutput(
                observations=[],
                reward=0.0 if faulted else float(r["score"]),
                done=True,
                metadata={"fault": r["fault"], "turns": self.turns},
            )
        found = re.search(r"<tool>\s*<python>(.*?)</python>\s*</tool>", action, re.S)
        if found is None:
            text = "No <tool><python>...</python></tool> block found in the action."
        else:
            text = self._execute_tool("PythonCodeExecutorToolGroup", "python", [found.group(1)])
        return BaseTextEnvStepOutput(
            observations=[{"role": "user", "content": text}],
            reward=0.0,
            done=False,
            metadata={"tool_called": found is not None},
        )

    def close(self) -> None:
        self.python.close()


skyrl_gym.register(id="rollbox", entry_point="rollbox.skyrl:RollboxEnv")
skyrl_gym.register(id="rollbox-code", entry_point="rollbox.skyrl:RollboxCodeEnv")
