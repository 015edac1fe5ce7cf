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

`rollout_func(workflow, engine=..., ...)` runs a whole rollbox workflow per prompt in place of
TRL's generation (`GRPOTrainer(rollout_func=...)`), and `workflow_reward` hands the workflow's
own reward to TRL:

    trainer = GRPOTrainer(model=..., rollout_func=rollout_func("rlvr", engine="openai:http://vllm:8000",
                          rewards={"math": "math"}, config={"reward": "math"}),
                          reward_funcs=[workflow_reward], ...)
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from . import _components

# Per-call options passed through to the component (rollbox's limit keys).
_OPTIONS = _components.OPTIONS

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
            r = {
                k: _plain(v[i])
                for k, v in columns.items()
                if isinstance(v, (list, tuple)) and len(v) == n
            }
            if isinstance(prompts[i], list):
                # A conversational prompt (messages): a `.py` reward in TRL's shape then gets
                # its completions as messages too, as TRL gives them.
                r["prompt"] = _plain(prompts[i])
            return r

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


class RolloutFunc:
    """TRL's `rollout_func(prompts, trainer)` running a rollbox workflow for each prompt (TRL
    passes them already repeated `num_generations` times): one episode per prompt, all at once,
    each in a fresh sandbox, generating with rollbox's `engine` (`embedded`, `openai:URL` for
    TRL's vLLM server, `sglang:URL`, ...).

    The workflow gets the dataset row the prompt came from (found in `trainer.train_dataset`,
    or `eval_dataset`, by its prompt; `{"prompt": ..., "messages": ...}` when none matches), so
    its reward reads the reference as it would in a rollout. Returns `prompt_ids` (the tokens
    before the first trained one), `completion_ids` and `logprobs` (the rest), `env_mask` (1 on
    the model's tokens, 0 on tool and environment tokens) and `rollbox_reward` (the workflow's
    reward, None when the episode produced none). An episode that fails or is rejected gives an
    empty completion and None."""

    def __init__(
        self,
        workflow: str = "rlvr",
        *,
        engine: str,
        rewards: dict[str, Any] | None = None,
        tools: dict[str, Any] | None = None,
        tokenizer: str | None = None,
        config: dict[str, Any] | None = None,
        limits: dict[str, Any] | None = None,
    ):
        from .areal import host_kwargs

        self.kwargs = host_kwargs(workflow, rewards, tools, tokenizer, config, limits, engine)
        # Per dataset: its prompts' JSON -> the first row index holding it. Only the prompt
        # column is read to build it; a row is fetched when its prompt comes up.
        self._index: dict[int, tuple[Any, dict[str, int]]] = {}

    def _host(self):
        from . import areal

        return areal._host(self.kwargs)

    def _row(self, prompt: Any, trainer: Any) -> dict[str, Any]:
        key = json.dumps(prompt, sort_keys=True, default=str)
        for dataset in (getattr(trainer, "train_dataset", None), getattr(trainer, "eval_dataset", None)):
            if dataset is None or not hasattr(dataset, "__getitem__"):
                continue
            held = self._index.get(id(dataset))
            if held is None or held[0] is not dataset:
                try:
                    column = dataset["prompt"]  # a Hugging Face Dataset reads one column
                except (KeyError, TypeError, IndexError):
                    column = [r.get("prompt") for r in dataset]
                index: dict[str, int] = {}
                for i, p in enumerate(column):
                    index.setdefault(json.dumps(p, sort_keys=True, default=str), i)
                held = self._index[id(dataset)] = (dataset, index)
            i = held[1].get(key)
            if i is not None:
                return dict(dataset[i])
        return {"prompt": prompt}

    def __call__(self, prompts: list[Any], trainer: Any = None) -> dict[str, list]:
        host = self._host()
        rows = []
        for p in prompts:
            row = dict(self._row(p, trainer))
            if "messages" not in row:
                row["messages"] = p if isinstance(p, list) else [{"role": "user", "content": str(p)}]
            rows.append(row)

        async def episodes():
            return await asyncio.gather(
                *(host.arun_episode(row, report=True, sample_index=i) for i, row in enumerate(rows))
            )

        out: dict[str, list] = {k: [] for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask")}
        out["rollbox_reward"] = []
        for tensors, _report in asyncio.run(episodes()):
            if tensors is None:
                for k in ("prompt_ids", "completion_ids", "logprobs", "env_mask"):
                    out[k].append([])
                out["rollbox_reward"].append(None)
                continue
            ids = tensors["input_ids"][0].tolist()
            mask = tensors["loss_mask"][0].tolist()
            p = next((i for i, m in enumerate(mask) if m), len(ids))
            out["prompt_ids"].append(ids[:p])
            out["completion_ids"].append(ids[p:])
            out["logprobs"].append(tensors["logprobs"][0].tolist()[p:])
            out["env_mask"].append([int(m) for m in mask[p:]])
            rewards = tensors.get("rewards")
            out["rollbox_reward"].append(None if rewards is None else float(rewards.reshape(-1)[0]))
        return out


def rollout_func(workflow: str = "rlvr", **kwargs: Any) -> RolloutFunc:
    """A TRL `rollout_func` running `workflow` (see [`RolloutFunc`])."""
    return RolloutFunc(workflow, **kwargs)


def workflow_reward(completions: list[Any], rollbox_reward: list[float | None] | None = None, **kwargs):
    """The reward a `rollout_func` workflow computed, as a TRL reward function."""
    if rollbox_reward is None:
        raise ValueError("workflow_reward needs rollbox.trl.rollout_func as the trainer's rollout_func")
    return list(rollbox_reward)
