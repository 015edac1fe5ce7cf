"""`RolloutWorkflow` and `export`: the component's `run-episode`, driving `arun_episode`."""

from __future__ import annotations

import asyncio
import gc
import inspect
import json
import random
import traceback

from componentize_py_types import Err

from wit_world.imports import episode as _episode

from .engine import EpisodeLoop, engine
from .tensor import Tensor, bool_


class RolloutWorkflow:
    """AReaL's `RolloutWorkflow`: subclass it and define `async def arun_episode(self, engine,
    data)` returning a dict of tensors (each with a leading batch dimension), or `None` to
    reject the episode."""

    async def arun_episode(self, engine, data):
        raise NotImplementedError("define arun_episode(self, engine, data)")


class Output:
    """Tensors plus per-trajectory metadata (a JSON object) for `trajectories.jsonl`."""

    def __init__(self, tensors: dict, metadata: dict | None = None):
        self.tensors = tensors
        self.metadata = metadata or {}


class Episode:
    """The episode being run: `id`, `sample_index`, `seed`, the workflow `config`, the row
    (`data`), and `metadata` (a dict returned with the trajectory; fill it freely)."""

    def __init__(self):
        self.id = ""
        self.sample_index = 0
        self.seed = 0
        self.config = {}
        self.data = {}
        self.metadata = {}


episode = Episode()
"""The current episode."""


class _WorkflowContext:
    """AReaL's `areal.workflow_context`: one stats scope per episode here."""

    @staticmethod
    def stat_scope():
        return None


workflow_context = _WorkflowContext()

PROMPT_KEYS = ("messages", "prompt", "question", "problem")
"""Where the prompt is looked for in a row, in order, unless the config names `prompt_key`."""


def _lookup(row, key: str):
    value = row
    for part in key.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def prompt_messages(data: dict, config: dict | None = None) -> list:
    """The chat messages of a row, as the Rust SDK reads them: `messages`, else `prompt`, else
    `question`, else `problem` (or the config's `prompt_key`); a text becomes one user message
    with the config's `prompt_suffix`; the config's `system_prompt` goes first."""
    config = config or {}
    named = config.get("prompt_key")
    keys = (named,) if isinstance(named, str) else PROMPT_KEYS
    for key in keys:
        value = _lookup(data, key)
        if value is not None:
            break
    else:
        names = ", ".join(f"`{k}`" for k in keys)
        raise ValueError(
            f"the row has no prompt: none of {names} "
            "(set prompt_key in the config to the column that holds it)"
        )
    if isinstance(value, list):
        for i, m in enumerate(value):
            if not (isinstance(m, dict) and isinstance(m.get("role"), str)):
                raise ValueError(f'`{key}`[{i}] is not a {{"role", "content"}} message')
        messages = list(value)
    elif isinstance(value, str):
        messages = [{"role": "user", "content": value + str(config.get("prompt_suffix") or "")}]
    else:
        raise ValueError(
            f'`{key}` must be a list of {{"role", "content"}} messages or a text, not {value!r}'
        )
    system = config.get("system_prompt")
    if isinstance(system, str) and not (messages and messages[0].get("role") == "system"):
        messages.insert(0, {"role": "system", "content": system})
    return messages


def reward_data(data: dict, config: dict | None = None) -> dict:
    """The row as the reward sees it: with the config's `answer_key` column as `answer`."""
    key = (config or {}).get("answer_key")
    if not isinstance(key, str):
        return data
    answer = _lookup(data, key)
    if answer is None:
        raise ValueError(f"the row has no `{key}` (the config's answer_key)")
    return {**data, "answer": answer}


def _parse(what: str, text: str):
    if not text.strip():
        return {}
    try:
        return json.loads(text)
    except ValueError as e:
        raise Err(f"episode {what} is not valid JSON: {e}") from None


def _tensors(result) -> tuple[list, dict]:
    if isinstance(result, Output):
        tensors, metadata = result.tensors, result.metadata
    elif isinstance(result, dict):
        tensors, metadata = result, {}
    else:
        raise TypeError(
            f"arun_episode returned {type(result).__name__}; return a dict of tensors "
            "(rollbox.tensor(...)), rollbox.Output(tensors, metadata) or None"
        )
    out = []
    for name, t in tensors.items():
        if not isinstance(t, Tensor):
            raise TypeError(
                f"tensor `{name}` is a {type(t).__name__}; build it with "
                "rollbox.tensor(values, dtype=rollbox.int32 / float32 / bool_ ...)"
            )
        out.append((str(name), t._to_host(str(name))))
    merged = dict(episode.metadata)
    merged.update(metadata or {})
    return out, merged


def _fault(e: BaseException) -> Err:
    text = "".join(traceback.format_exception(type(e), e, e.__traceback__))
    note = ""
    if isinstance(e, OSError):
        note = (
            "note: the workflow sandbox has no files, network, subprocesses or environment; "
            "pass what the workflow needs in the row or the config\n"
        )
    return Err(f"the workflow raised {type(e).__name__}: {e}\n{note}{text}")


_GC_THRESHOLD = 50_000
"""Young-generation threshold of CPython's cycle collector in an episode."""


def _warm_up(rounds: int = 8) -> None:
    """Run the SDK's own per-episode Python (the event loop with a suspension and a gather,
    row and config parsing, request and response conversion, tensors, trajectories) a few
    times with no host call, when the snapshot is made. CPython specializes the bytecode it
    runs and fills its lookup caches by writing into code objects and tables; done here, that
    is in the snapshot every episode starts from, instead of in every episode (faster code, and
    fewer pages written that the sandbox must reset after it). Nothing of it reaches an
    episode: it touches no episode state and no random state, and its loop is closed."""
    from .api import request_to_wit, response_from_wit, _wit as _types
    from .areal_types import GenerationHyperparameters, ModelRequest
    from .tensor import float32, int32, ones, tensor
    from .trajectory import single_turn

    row = '{"messages": [{"role": "user", "content": "1 + 1?"}], "answer": "2"}'
    ids = list(range(1, 40))

    async def answer(req):
        future = asyncio.get_running_loop().create_future()
        wit = request_to_wit(req)
        response = _types.ModelResponse(
            input_tokens=list(wit.input_ids),
            output_tokens=[7] * 16,
            output_logprobs=[-0.5] * 16,
            output_versions=[0] * 16,
            stop_reason=_types.StopReason.STOP,
            latency=0.0,
            ttft=0.0,
        )
        future.get_loop().call_soon(future.set_result, response_from_wit(response))
        return await future

    async def episode():
        data = _parse("data", row)
        config = _parse("config", "")
        messages = prompt_messages(data, config)
        reward_data(data, config)
        json.dumps(messages)
        gconfig = GenerationHyperparameters.from_config(None).new(n_samples=1)
        req = ModelRequest(input_ids=ids, gconfig=gconfig)
        resp = await answer(req)
        await asyncio.gather(answer(req), answer(req))
        seq = resp.input_tokens + resp.output_tokens
        out = {
            "input_ids": tensor(seq, dtype=int32),
            "logprobs": tensor([0.0] * resp.input_len + resp.output_logprobs, dtype=float32),
            "attention_mask": ones(len(seq), dtype=bool_),
            "rewards": tensor(1.0, dtype=float32),
        }
        {k: v.unsqueeze(0) for k, v in out.items()}
        single_turn(resp, 1.0)
        json.dumps({"prompt": "", "completion": "", "stop_reason": resp.stop_reason})

    for _ in range(rounds):
        loop = EpisodeLoop()
        try:
            loop.run_until_complete(episode())
        finally:
            loop.close()


# The episode's event loop, made when the snapshot is (~10 µs of CPython natively, several
# times that in the instance): an instance runs one episode, so the snapshot's loop is new to
# it. A second run in the same instance makes its own.
_snapshot_loop: EpisodeLoop | None = EpisodeLoop()


def _episode_loop() -> EpisodeLoop:
    global _snapshot_loop
    loop, _snapshot_loop = _snapshot_loop, None
    return loop if loop is not None else EpisodeLoop()


def run(make, input) -> _episode.EpisodeOutput | None:
    """Run one episode with the workflow `make(config)` builds."""
    data = _parse("data", input.data)
    config = _parse("config", input.config)
    episode.id, episode.sample_index, episode.seed = input.episode_id, input.sample_index, input.seed
    episode.config, episode.data, episode.metadata = config, data, {}
    # The interpreter was snapshotted with `random` already seeded: without this, every
    # episode would draw the same numbers.
    random.seed(input.seed)
    try:
        workflow = make(config)
        result = workflow.arun_episode(engine, data)
        if inspect.isawaitable(result):
            loop = _episode_loop()
            try:
                result = loop.run_until_complete(result)
            finally:
                loop.close()
        if result is None:
            return None
        tensors, metadata = _tensors(result)
    except Err:
        raise
    except BaseException as e:  # noqa: BLE001 - every failure is the episode's fault message
        raise _fault(e) from None
    return _episode.EpisodeOutput(tensors=tensors, metadata=json.dumps(metadata))


def export(workflow):
    """The component's world class for `workflow`: a `RolloutWorkflow` subclass (built per
    episode with `from_config(config)` when it defines one, else `cls(**config)`) or a
    function `config -> workflow`. In the app module: `WitWorld = rollbox.export(MyWorkflow)`.
    """
    if isinstance(workflow, type):
        factory = getattr(workflow, "from_config", None)
        make = factory if factory is not None else (lambda config: workflow(**config))
    elif callable(workflow):
        make = workflow
    else:
        raise TypeError(f"export() takes a RolloutWorkflow class or a factory, not {workflow!r}")

    class WitWorld:
        def run_episode(self, input):
            return run(make, input)

    _warm_up()
    # An instance runs one episode, and its whole heap is discarded after it: collect cyclic
    # garbage only once an episode has made a lot of it (50,000 new container objects instead
    # of CPython's 2,000; ~6% less CPU per Python rlvr episode, same pages written).
    gc.set_threshold(_GC_THRESHOLD, *gc.get_threshold()[1:])
    return WitWorld
