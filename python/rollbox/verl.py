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

A tool whose state lasts the trajectory (python-exec whose variables persist from one call to
the next), for `multi_turn.tool_config_path`: `SessionTool` (below).

Function tools for `actor_rollout_ref.rollout.multi_turn.function_tool_path`: see
`rollbox.verl_tools` (a calculator and python_exec, ready made), or name any rollbox tool
components in a file of your own, each offered with the schema its component describes:

    # my_tools.py, given as multi_turn.function_tool_path
    from rollbox.verl import register_function_tools
    register_function_tools({"python": "/models/python_exec.wasm", "calculator": "calculator"})

`WasmAgentLoop` (with verl installed) runs a whole rollbox workflow as a verl agent loop, verl's
`server_manager` answering each generate:

    # agent_loops.yaml, given as actor_rollout_ref.rollout.agent.agent_loop_config_path
    - name: wasm_agent
      _target_: rollbox.verl.WasmAgentLoop
      workflow: rlvr                  # a built-in's name or a .wasm path
      rewards: {math: math}             # tool_components: {calculator: calculator}
      config: {reward: math}
      # tokenizer_path: default actor_rollout_ref.model.tokenizer_path, else model.path

and `actor_rollout_ref.rollout.agent.default_agent_loop=wasm_agent` (or `agent_name` per row).
"""

from __future__ import annotations

import json
import time
import weakref
from pathlib import Path
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
# The data_source names verl's own `default_compute_score` scores as code (with `prime_code`,
# or SandboxFusion when `sandbox_fusion_url` is set).
_CODE_SOURCES = ("codecontests", "apps", "codeforces", "taco")

# The keys of every result, the same for every sample (verl builds its extra-info columns from
# the first sample's keys).
RESULT_KEYS = ("score", "acc", "fault", "error", "reward_ms", "attempts")

# Per-call options passed through to the component (see rollbox's limit keys).
_OPTIONS = _components.OPTIONS + ("max_boundary_bytes",)


def reward_for(data_source: str) -> str:
    """The built-in reward for a verl `data_source`, or a ValueError naming the fix."""
    if data_source in _MATH_SOURCES or data_source.startswith(_MATH_PREFIXES):
        return "math"
    if data_source in _CODE_SOURCES:
        return "code"
    raise ValueError(
        f"rollbox.verl has no reward for data_source `{data_source}`; name one with "
        "+reward.custom_reward_function.reward_kwargs.reward=<built-in name or .wasm path>"
    )


# The code reward's own limit: its cases run 4 at a time, 10 s each at most.
CODE_REWARD_TIMEOUT = "60s"


def python_exec_tool(
    path: str | None = None, timeout: str = "10s", memory: str | None = "1GiB"
) -> dict[str, Any]:
    """python-exec as the runner of code: the component at `path` (else `ROLLBOX_PYTHON_EXEC`,
    else the one built into rollbox, `python-exec`), `timeout` and `memory` per program (verl's
    and SandboxFusion's defaults), no retries, and a reply large enough for a program's 1 Mi
    characters of stdout escaped as JSON. What the `code` reward and `rollbox.verl_plugin` both
    register. A rollbox built without componentize-py has no python-exec inside: using it then
    fails with an error that names the install command."""
    import os

    path = path or os.environ.get("ROLLBOX_PYTHON_EXEC") or "python-exec"
    spec: dict[str, Any] = {
        "path": str(path),
        "timeout": timeout,
        "retries": 0,
        "max_boundary_bytes": "16MiB",
    }
    if memory is not None:
        spec["memory"] = memory
    return spec


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
    python_exec: str | None = None,
    code_reward: dict[str, Any] | None = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Score `solution_str` against `ground_truth` with a rollbox reward component.

    Returns `{"score", "acc", "fault", "error", "reward_ms", "attempts"}` for every sample:
    `score` is the reward (0.0 when the component faulted), `acc` the same value or None on a
    fault (verl then counts it as 0 in `acc` and leaves it out of `acc_success_only`), `fault`
    the fault's kind (`timeout`, `trap`, `out_of_fuel`, `memory_limit`, ...) or None, `error`
    what happened and which option to raise. `timeout`, `retries`, `max_memory`, `fuel` in
    `reward_kwargs` set the component's limits; other verl keywords are ignored.

    Code sources (`codecontests`, `apps`, `codeforces`, `taco`) go to the `code` reward, which
    runs each test case in a fresh python-exec instance (10 s and 1 GiB per case, as verl's
    `prime_code` and SandboxFusion default): `python_exec` (or `ROLLBOX_PYTHON_EXEC`) names
    the component, else the built-in one runs them; `code_reward` (`{"semantics":
    "sandbox_fusion"}`, ...) sets its options.
    """
    name = reward or reward_for(data_source)
    tools = None
    options = dict(kwargs)
    if name == "code":
        tools = {"python": python_exec_tool(python_exec)}
        options.setdefault("timeout", CODE_REWARD_TIMEOUT)
        # The cases' programs and stdin pass through the reward to its tool calls.
        options.setdefault("max_boundary_bytes", "64MiB")
    components = _components.cached(
        rewards={"reward": _spec(name, options)}, tools=tools, max_host_memory=max_host_memory
    )
    row = {
        "data_source": data_source,
        "reward_model": {"ground_truth": ground_truth},
        "extra_info": _plain(extra_info or {}),
    }
    if code_reward is not None:
        row["code_reward"] = _plain(code_reward)
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


def tool_text(result: dict[str, Any]) -> str:
    """What the model sees of a `Components.call_tool` result: the tool's output, or for a
    fault `error: ` and what happened (without the operator's hint after the `;`)."""
    if result["fault"] is not None:
        return f"error: {result['error'].split('; ')[0]}"
    return result["output"]


def _component_tool(components, name: str):
    """One rollbox tool component as a verl function: keyword arguments in, text out."""

    async def call(**args: Any) -> str:
        return tool_text(await components.call_tool(name, args))

    call.__name__ = call.__qualname__ = name
    return call


def function_tools(tools: dict[str, Any], max_host_memory: str | int | None = None) -> list:
    """rollbox tool components (name -> a built-in's name, a `.wasm` path or a spec with limits)
    as verl `FunctionTool`s, in name order, each with the schema its component describes (what
    rollbox's own tool-agent offers the model). Each call runs in a fresh sandbox; its output
    is the tool's text unchanged, a fault is `error: ...` text (the rollout goes on). For
    verl's `ToolAgentLoop` directly (`tools=ToolListWrap(function_tools(...))`); see
    `register_function_tools` for `function_tool_path`."""
    from verl.tools.function_tool import FunctionTool
    from verl.tools.schemas import OpenAIFunctionToolSchema

    components = _components.cached(tools=_plain(tools), max_host_memory=max_host_memory)
    out = []
    for schema in components.tool_schemas():
        name = schema["function"]["name"]
        out.append(
            FunctionTool(
                name=name,
                fn=_component_tool(components, name),
                tool_schema=OpenAIFunctionToolSchema.model_validate(schema),
                is_async=True,
            )
        )
    return out


def register_function_tools(
    tools: dict[str, Any], max_host_memory: str | int | None = None
) -> list[str]:
    """Register `function_tools(tools)` with verl's `@function_tool` registry (call it from the
    file named by `multi_turn.function_tool_path`); returns the names. verl refuses a name
    registered twice."""
    from verl.tools.function_tool import function_tool

    names = []
    for tool in function_tools(tools, max_host_memory):
        function_tool(tool.name, schema=tool.tool_schema)(tool.fn)
        names.append(tool.name)
    return names


# What a session tool's description says in place of python-exec's "Nothing is kept between
# calls.".
SESSION_NOTE = (
    "Variables, functions and imports are kept from one call to the next in this conversation."
)


def python_exec_text(output: str) -> str:
    """What the model sees of a python-exec reply: what the snippet printed, then its last
    expression's value, then its error; the reply unchanged when it is not python-exec's."""
    try:
        r = json.loads(output)
    except (ValueError, TypeError):
        return output
    if not isinstance(r, dict):
        return output
    text = r.get("stdout") or ""
    if r.get("value") is not None:
        text += ("" if not text or text.endswith("\n") else "\n") + str(r["value"])
    if not r.get("ok", True):
        text += str(r.get("error") or r.get("error_type"))
    return text


try:  # a stateful tool needs verl's BaseTool; compute_score does not
    from verl.tools.base_tool import BaseTool as _BaseTool
    from verl.tools.schemas import OpenAIFunctionToolSchema as _Schema
    from verl.tools.schemas import ToolResponse as _ToolResponse
except Exception:  # noqa: BLE001 - verl absent
    _BaseTool = None

if _BaseTool is not None:

    class SessionTool(_BaseTool):
        """A rollbox tool component as a verl `BaseTool` whose state lasts a trajectory: the
        first call of a trajectory opens a session of the component (one sandboxed instance,
        `Components.open_session`), its later calls run in that instance (python-exec's
        variables, functions and imports persist), and the session is closed when verl frees
        the trajectory's `AgentData`. verl's `ToolAgentLoop` creates and releases a tool
        instance around every call, so the trajectory, not the instance, is what a session
        lives for; called without `agent_data`, a session lives from `create` to `release`.

            # tool_config.yaml (actor_rollout_ref.rollout.multi_turn.tool_config_path)
            tools:
              - class_name: rollbox.verl.SessionTool
                config: {type: native, component: python-exec, name: python, timeout: 10s}

        `config`: `component` (a built-in's name or a `.wasm` path; default `python-exec`),
        `name` (the tool's name for the model; default the component's stem), and rollbox's
        limit keys (`timeout` per call, `memory`, `fuel`, ...). The schema is the one the
        component describes unless the YAML gives `tool_schema`. A call that faults (a timeout,
        memory) returns `error: ...` as the tool's text and ends the session: the trajectory's
        next call starts a fresh one. python-exec's replies are given as text (what the
        snippet printed, its last value, its error); other components' output unchanged."""

        def __init__(self, config: dict, tool_schema: Any = None):
            config = dict(config or {})
            component = str(config.get("component", "python-exec"))
            name = str(config.get("name") or Path(component).stem.replace("_", "-"))
            opts = {k: config[k] for k in _OPTIONS if config.get(k) is not None}
            self._python = "python" in Path(component).stem
            self._components = _components.cached(
                tools={name: {"path": component, **opts} if opts else component}
            )
            self._tool = name
            # Open sessions: by id of the trajectory's AgentData (a finalizer drops the entry
            # when verl frees it), or by instance id when no AgentData is given.
            self._sessions: dict[Any, Any] = {}
            if tool_schema is None:
                schema = self._components.tool_schemas()[0]
                f = schema["function"]
                # python-exec describes its fresh calls; in a session, state is kept.
                f["description"] = f.get("description", "").replace(
                    "Nothing is kept between calls.", SESSION_NOTE
                )
                tool_schema = _Schema.model_validate(schema)
            super().__init__(config, tool_schema)

        async def execute(self, instance_id: str, parameters: dict[str, Any], **kwargs):
            agent_data = kwargs.get("agent_data")
            key = ("trajectory", id(agent_data)) if agent_data is not None else instance_id
            session = self._sessions.get(key)
            if session is None:
                session = await self._components.open_session(self._tool)
                self._sessions[key] = session
                if agent_data is not None:
                    weakref.finalize(agent_data, self._sessions.pop, key, None)
            r = await session.call(parameters)
            if r["fault"] is not None:
                # Any fault but the tool's own error value ended the session; the
                # trajectory's next call opens a new one.
                if r["fault"] != "guest_error":
                    self._sessions.pop(key, None)
                text = tool_text(r)
            else:
                text = python_exec_text(r["output"]) if self._python else r["output"]
            return _ToolResponse(text=text), 0.0, {"wall_s": r["wall_s"]}

        async def release(self, instance_id: str, **kwargs) -> None:
            session = self._sessions.pop(instance_id, None)
            if session is not None:
                await session.close()

        def open_sessions(self) -> int:
            """Sessions this tool holds open now."""
            return len(self._sessions)


try:  # the agent loop needs verl itself; compute_score does not
    from verl.experimental.agent_loop.agent_loop import (
        AgentLoopBase,
        AgentLoopMetrics,
        AgentLoopOutput,
    )
except Exception:  # noqa: BLE001 - verl absent or incomplete (its agent loop needs verl-core)
    AgentLoopBase = None


class _ServerManagerEngine:
    """AReaL's `agenerate` over verl's `server_manager.generate` (token in, token out): verl's
    sampling parameters are kept, the workflow's `max_new_tokens` and stop ids are added, and
    `length` vs `stop` is inferred (vLLM reports both as `completed`)."""

    def __init__(self, server_manager, sampling_params: dict, eos_ids: set[int], budget: int):
        self.server_manager = server_manager
        self.sampling_params = dict(sampling_params)
        self.eos_ids = eos_ids
        self.budget = budget
        self.prompt_len: int | None = None
        self.generate_s = 0.0

    async def agenerate(self, req):
        from .areal_types import ModelResponse

        # verl's `response_length` bounds the whole response, tool tokens included: each turn
        # gets what the turns before it left.
        if self.prompt_len is None:
            self.prompt_len = len(req.input_ids)
        left = self.budget - (len(req.input_ids) - self.prompt_len)
        max_tokens = max(1, min(int(req.gconfig.max_new_tokens), left))
        params = {**self.sampling_params, "max_tokens": max_tokens}
        if req.gconfig.stop_token_ids:
            params["stop_token_ids"] = list(req.gconfig.stop_token_ids)
        start = time.monotonic()
        out = await self.server_manager.generate(
            request_id=req.rid, prompt_ids=list(req.input_ids), sampling_params=params
        )
        self.generate_s += time.monotonic() - start
        tokens = list(out.token_ids)
        stops = self.eos_ids | set(req.gconfig.stop_token_ids or [])
        if out.stop_reason == "aborted":
            reason = "abort"
        elif len(tokens) >= max_tokens and (not tokens or tokens[-1] not in stops):
            reason = "length"
        else:
            reason = "stop"
        version = (out.extra_fields or {}).get("global_steps")
        return ModelResponse(
            input_tokens=list(req.input_ids),
            output_tokens=tokens,
            output_logprobs=list(out.log_probs or [0.0] * len(tokens)),
            output_versions=[int(version) if version is not None else -1] * len(tokens),
            stop_reason=reason,
        )


def to_agent_loop_output(
    tensors: dict | None, report: dict, response_length: int, generate_s: float, fallback_prompt
):
    """An episode's AReaL tensors as verl's `AgentLoopOutput`: the prompt is everything before
    the first trained token, the response the rest (cut to `response_length`), `loss_mask`
    becomes `response_mask`, `logprobs` the response's, `rewards` the `reward_score` (verl then
    skips its own reward for the sample), the policy versions of the trained tokens
    `min_global_steps`/`max_global_steps`. A rejected or failed episode gives an empty response
    that trains nothing, with reward 0.0 and the fault in `extra_fields["rollbox_fault"]`."""
    fault = None if tensors is not None else (report.get("error") or report["outcome"])
    extra = {"turn_scores": [], "tool_rewards": [], "rollbox_fault": fault}
    metrics = AgentLoopMetrics(generate_sequences=generate_s)
    if tensors is None:
        return AgentLoopOutput(
            prompt_ids=list(fallback_prompt),
            response_ids=[],
            response_mask=[],
            response_logprobs=[],
            reward_score=0.0,
            num_turns=1 + int(report["generate_calls"]),
            metrics=metrics,
            extra_fields=extra,
        )
    ids = tensors["input_ids"][0].tolist()
    mask = tensors["loss_mask"][0].tolist()
    logprobs = tensors["logprobs"][0].tolist()
    versions = tensors["versions"][0].tolist()
    p = next((i for i, m in enumerate(mask) if m), len(ids))
    # verl counts the prompt, each generation and each run of context (tool) tokens after it.
    context_runs = sum(1 for i in range(p + 1, len(mask)) if not mask[i] and mask[i - 1])
    trained = [v for v, m in zip(versions, mask) if m]
    if trained:
        extra["min_global_steps"] = min(trained)
        extra["max_global_steps"] = max(trained)
    rewards = tensors.get("rewards")
    return AgentLoopOutput(
        prompt_ids=ids[:p],
        response_ids=ids[p:][:response_length],
        response_mask=[int(m) for m in mask[p:][:response_length]],
        response_logprobs=logprobs[p:][:response_length],
        reward_score=None if rewards is None else float(rewards.reshape(-1)[0]),
        num_turns=1 + int(report["generate_calls"]) + context_runs,
        metrics=metrics,
        extra_fields=extra,
    )


if AgentLoopBase is not None:
    from verl.experimental.agent_loop.agent_loop import register

    @register("wasm_agent")
    class WasmAgentLoop(AgentLoopBase):
        """A rollbox workflow as a verl agent loop (see the module's doc). Each worker process
        loads the components once per distinct set of arguments; each sample runs in a fresh
        sandbox. The row reaches the workflow with `raw_prompt` as its `messages`; GRPO groups
        come from verl's `rollout.n`, one episode per sample."""

        def __init__(
            self,
            *args,
            workflow: str = "rlvr",
            rewards: dict | None = None,
            tool_components: dict | None = None,
            tokenizer_path: str | None = None,
            config: dict | None = None,
            limits: dict | None = None,
            **kwargs,
        ):
            # verl's own keywords (its `tokenizer` object, its `tools` list) go to verl; this
            # loop's are `tokenizer_path` and `tool_components` (rollbox components by name).
            super().__init__(*args, **kwargs)
            from . import areal

            self.prompt_length = self.rollout_config.prompt_length
            self.response_length = self.rollout_config.response_length
            config = dict(config or {})
            gconfig = dict(config.get("gconfig") or {})
            gconfig.setdefault("max_new_tokens", int(self.response_length))
            # A multi-turn workflow stops where verl would cut the sample anyway.
            gconfig.setdefault("max_tokens", int(self.prompt_length) + int(self.response_length))
            config["gconfig"] = gconfig
            model = self.config.actor_rollout_ref.model
            tokenizer_path = tokenizer_path or model.get("tokenizer_path") or model.get("path")
            self.host = areal._host(
                areal.host_kwargs(
                    workflow,
                    _plain(rewards) if rewards else None,
                    _plain(tool_components) if tool_components else None,
                    tokenizer_path,
                    _plain(config),
                    _plain(limits) if limits else None,
                )
            )
            eos = getattr(self.tokenizer, "eos_token_id", None)
            self.eos_ids = {int(eos)} if eos is not None else set()

        async def run(self, sampling_params: dict[str, Any], **kwargs) -> AgentLoopOutput:
            row = _plain({k: v for k, v in kwargs.items() if k not in ("priority",)})
            row.setdefault("messages", row.get("raw_prompt"))
            engine = _ServerManagerEngine(
                self.server_manager, sampling_params, self.eos_ids, int(self.response_length)
            )
            tensors, report = await self.host.arun_episode(row, engine=engine, report=True)
            fallback = []
            if tensors is None:
                fallback = await self.ct_build_initial_tokens(list(kwargs["raw_prompt"]))
            return to_agent_loop_output(
                tensors, report, int(self.response_length), engine.generate_s, fallback
            )
