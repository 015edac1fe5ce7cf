"""A plain Python reward function in a trainer's shape as the `reward` world's `score`.

`rollbox build reward FILE.py[:FUNCTION] --style ...` generates the component's app module:

    from rollbox_wrap.reward import world
    WitWorld = world("my_reward", "compute_score", "verl", ())

and componentize-py imports it at build, so the user's module is imported (and its imports
done) once, in the snapshot. Each style calls the function as its trainer does, passing only
the arguments the function accepts (unless it takes `**kwargs`):

* `verl`: `data_source`, `solution_str` (the completion), `ground_truth` (the row's
  `reward_model.ground_truth`, else `ground_truth`, `answer`, ...), `extra_info`, as keywords;
  a number, or a dict whose `score` is the reward and whose other numeric keys are stats;
* `trl`: `prompts`, `completions`, `completion_ids` and every other column of the row, each a
  list of one (conversational when the row's `prompt` is a list of messages: the completion is
  then `[{"role": "assistant", "content": ...}]`); a list, whose first value is the reward;
* `areal`: `prompt, completions, prompt_ids, completion_ids` positionally, then the row's
  columns as keywords; a number;
* `openrlhf`: `queries` (prompt + completion), `prompts`, `labels` (the row's `label`, else
  its reference answer), lists of one; a number, a list or a dict with `rewards` (its
  `extra_logs` become stats).

A score must be a finite number (a bool or a numpy/torch scalar counts); anything else, an
exception, or something the sandbox refused during the call fails the call with its reason.
"""

import inspect
import json
import math

import wit_world
from componentize_py_types import Err
from wit_world.imports import log as host_log

from rollbox_wrap import sandbox, warmup

STYLES = ("verl", "trl", "areal", "openrlhf")

# Where a row keeps its reference answer: the Rust `math` reward's REFERENCE_KEYS, in order.
_GOLD_KEYS = ("answer", "solution", "reward_model.ground_truth", "ground_truth", "final_answer",
              "gold")
# Stats a result may carry at most (verl's dict keys, OpenRLHF's extra_logs).
_MAX_STATS = 32


def _dig(row, dotted):
    value = row
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def _gold(row, first=()):
    for key in (*first, *_GOLD_KEYS):
        value = _dig(row, key)
        if value is not None:
            return value
    return None


def infer_style(params) -> str:
    """The trainer whose reward shape `params` (parameter names) has, or an error naming them."""
    names = set(params)
    if names & {"solution_str", "data_source"}:
        return "verl"
    if names & {"queries", "labels"}:
        return "openrlhf"
    if "prompt" in names and names & {"prompt_ids", "completion_ids"}:
        return "areal"
    if "completions" in names:
        return "trl"
    raise ValueError(
        f"cannot tell which trainer's reward this is from its parameters ({', '.join(params)}); "
        f"give the style: --style {'|'.join(STYLES)} (or style=... where the reward is registered)"
    )


def _number(value, what):
    if isinstance(value, bool):
        return float(value)
    if not isinstance(value, (int, float)):
        item = getattr(value, "item", None)  # numpy and torch scalars, one-element tensors
        if callable(item):
            value = item()
        if not isinstance(value, (int, float)):
            raise Err(f"{what} is {type(value).__name__}, not a number")
    value = float(value)
    if not math.isfinite(value):
        raise Err(f"{what} is {value}, not a finite number")
    return value


def _first(value, what):
    """A trainer's batch result (a list, a tuple or a 1-element tensor) for the one sample."""
    if isinstance(value, (list, tuple)):
        if len(value) != 1:
            raise Err(f"{what} has {len(value)} values for one sample")
        return value[0]
    tolist = getattr(value, "tolist", None)
    if callable(tolist):
        listed = tolist()
        return _first(listed, what) if isinstance(listed, list) else listed
    return value


def _stats(extras):
    for key, value in list(extras.items())[:_MAX_STATS]:
        try:
            host_log.stat(str(key), _number(_first(value, key), key))
        except Err:
            pass  # a non-numeric extra is not a stat


class _Call:
    """The function and how its style calls it."""

    def __init__(self, fn, style):
        sig = inspect.signature(fn)
        self.fn = fn
        self.style = style or infer_style(list(sig.parameters))
        if self.style not in STYLES:
            raise ValueError(f"unknown style {self.style!r}; use {', '.join(STYLES)}")
        self.params = sig.parameters
        self.any_keyword = any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values())

    def accepted(self, kwargs):
        """The keywords the function takes (all of them with **kwargs)."""
        if self.any_keyword:
            return kwargs
        return {k: v for k, v in kwargs.items() if k in self.params}

    def __call__(self, inp):
        try:
            row = json.loads(inp.data) if inp.data else {}
        except ValueError as e:
            raise Err(f"the row is not JSON: {e}")
        if not isinstance(row, dict):
            raise Err("the row is not a JSON object")
        return getattr(self, self.style)(inp, row)

    def verl(self, inp, row):
        out = self.fn(**self.accepted({
            "data_source": row.get("data_source"),
            "solution_str": inp.completion,
            "ground_truth": _gold(row, ("reward_model.ground_truth", "ground_truth")),
            "extra_info": row.get("extra_info"),
        }))
        if isinstance(out, dict):
            if "score" not in out:
                raise Err(f"the result dict has no `score` (keys: {', '.join(map(str, out))})")
            _stats({k: v for k, v in out.items() if k != "score"})
            return _number(out["score"], "the result's `score`")
        return _number(out, "the result")

    def trl(self, inp, row):
        prompt = row.get("prompt")
        if isinstance(prompt, list):  # conversational: messages in, a message out
            prompts = [prompt]
            completions = [[{"role": "assistant", "content": inp.completion}]]
        else:
            prompts = [inp.prompt]
            completions = [inp.completion]
        columns = {k: [v] for k, v in row.items() if k not in ("prompt", "completion")}
        out = self.fn(**self.accepted({
            **columns,
            "prompts": prompts,
            "completions": completions,
            "completion_ids": [list(inp.completion_ids)],
        }))
        value = _first(out, "the result")
        if value is None:
            raise Err("the result is None for the sample (TRL leaves such a sample out): no score")
        return _number(value, "the result")

    def areal(self, inp, row):
        out = self.fn(inp.prompt, inp.completion, list(inp.prompt_ids),
                      list(inp.completion_ids), **self.accepted(row))
        return _number(out, "the result")

    def openrlhf(self, inp, row):
        label = row.get("label")
        if label is None:
            label = _gold(row)
        out = self.fn(**self.accepted({
            "queries": [inp.prompt + inp.completion],
            "prompts": [inp.prompt],
            "labels": [label],
        }))
        if isinstance(out, dict):
            if "rewards" not in out:
                raise Err(f"the result dict has no `rewards` (keys: {', '.join(map(str, out))})")
            extra = out.get("extra_logs")
            if isinstance(extra, dict):
                _stats(extra)
            out = out["rewards"]
        return _number(_first(out, "the result"), "the result")


class _Input:
    """A reward-input for the warm-up."""

    def __init__(self, completion, answer):
        self.prompt = "Question: what is it?\n"
        self.completion = completion
        self.prompt_ids = [1, 2, 3]
        self.completion_ids = [4, 5]
        self.data = json.dumps({
            "data_source": "openai/gsm8k", "answer": answer, "solution": answer,
            "reward_model": {"ground_truth": answer}, "label": answer, "extra_info": {},
            "prompt": [{"role": "user", "content": "Question: what is it?"}],
        })


def warm_up(call) -> None:
    """Score `warmup.PAIRS` (both ways) at build, results and exceptions discarded: what the
    function compiles and caches on first use (regexes, parser tables, a worker object) is
    then in the snapshot, so a call does not redo it; natively a trainer's process warms it
    once too."""
    global _stats
    stats, _stats = _stats, lambda extras: None  # no host imports before the snapshot
    try:
        for gold, completion in warmup.PAIRS:
            for answer, text in ((gold, completion), (completion, gold)):
                try:
                    call(_Input(text, answer))
                except BaseException:  # noqa: BLE001 - a warm-up result is thrown away
                    pass
    finally:
        _stats = stats


def world(module: str, function: str, style: str | None, preimport=(), warm=True):
    """The `WitWorld` class scoring with `module.function` in `style` (None: inferred),
    warmed up on sample answers unless `warm` is false."""
    fn = getattr(sandbox.load(module), function, None)
    if not callable(fn):
        raise ValueError(f"{module}.py has no function `{function}`")
    call = _Call(fn, style)
    if warm:
        warm_up(call)
    sandbox.seal(preimport)

    class WitWorld(wit_world.WitWorld):
        def score(self, input) -> float:
            with sandbox.calling() as c:
                value, failure = None, None
                try:
                    value = call(input)
                except Err as e:
                    failure = e
                except BaseException as e:  # SystemExit too: a call's end is a result
                    failure = Err(f"{function} raised {type(e).__name__}: {str(e)[:2000]}")
            if c.violations:
                raise Err(
                    f"{function} needed what the sandbox lacks, so its score could differ from "
                    "the function's own: " + "; ".join(c.violations)
                    + (f" (then: {failure.value})" if failure is not None else "")
                )
            if failure is not None:
                raise failure
            return value

    return WitWorld
