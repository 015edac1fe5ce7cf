"""AReaL's request and response types (from `areal_types`, the one Python source of them) and
their conversion to and from the WIT records the host takes."""

from __future__ import annotations

import json

from wit_world.imports import types as _wit

from .areal_types import GenerationHyperparameters, ModelRequest, ModelResponse

__all__ = ["GenerationHyperparameters", "ModelRequest", "ModelResponse"]


def token_ids(ids) -> list[int]:
    """`ids` as a list of ints for a host call: the list itself when it already is one (token
    lists from the host and from list arithmetic), else each element through `int`."""
    if type(ids) is list and set(map(type, ids)) <= _INT:
        return ids
    return list(map(int, ids))


_INT = {int}


def gconfig_to_wit(g: GenerationHyperparameters) -> _wit.GenConfig:
    """`g` as the host's `gen-config`, each count checked to fit a u32."""
    stop = g.stop
    if stop is None:
        stop = []
    elif isinstance(stop, str):
        stop = [stop]

    def count(name, v):
        if isinstance(v, bool) or not isinstance(v, int) or v < 0 or v > 0xFFFFFFFF:
            raise TypeError(f"gconfig.{name} must be an int in 0..2**32, not {v!r}")
        return v

    return _wit.GenConfig(
        n_samples=count("n_samples", g.n_samples),
        max_new_tokens=count("max_new_tokens", g.max_new_tokens),
        min_new_tokens=count("min_new_tokens", g.min_new_tokens),
        max_tokens=count("max_tokens", g.max_tokens),
        greedy=bool(g.greedy),
        temperature=float(g.temperature),
        top_p=float(g.top_p),
        top_k=count("top_k", g.top_k),
        stop_token_ids=token_ids(g.stop_token_ids),
        stop=[str(s) for s in stop],
        ignore_eos=bool(g.ignore_eos),
        skip_special_tokens=bool(g.skip_special_tokens),
        frequency_penalty=float(g.frequency_penalty),
        seed=None if g.seed is None else int(g.seed),
        exclude_default_stop_ids=bool(g.exclude_default_stop_ids),
    )


def request_to_wit(r: ModelRequest) -> _wit.ModelRequest:
    """`r` as the host's `model-request`; an empty prompt is refused here."""
    if not r.input_ids:
        raise ValueError("ModelRequest.input_ids is empty: the prompt must have tokens")
    return _wit.ModelRequest(
        rid=str(r.rid),
        input_ids=token_ids(r.input_ids),
        gconfig=gconfig_to_wit(r.gconfig),
        image_data=list(r.image_data or []),
        metadata=json.dumps(r.metadata) if r.metadata else "{}",
    )


_STOP_REASONS = {
    _wit.StopReason.STOP: "stop",
    _wit.StopReason.LENGTH: "length",
    _wit.StopReason.TOOL_CALLS: "tool_calls",
    _wit.StopReason.ABORT: "abort",
}


def response_from_wit(r: _wit.ModelResponse) -> ModelResponse:
    """The host's `model-response` as AReaL's `ModelResponse`."""
    return ModelResponse(
        input_tokens=list(r.input_tokens),
        output_tokens=list(r.output_tokens),
        output_logprobs=list(r.output_logprobs),
        output_versions=list(r.output_versions),
        stop_reason=_STOP_REASONS.get(r.stop_reason, "stop"),
        latency=r.latency,
        ttft=r.ttft,
    )
