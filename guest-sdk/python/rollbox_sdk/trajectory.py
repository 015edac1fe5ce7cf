"""Trajectory helpers, the same as the Rust SDK's: `single_turn`, `TrajectoryBuilder`,
`merge`. They build AReaL's tensor layout: `input_ids`, `loss_mask`, `logprobs`, `versions`,
`attention_mask` (each `[1, L]`), `rewards` `[1]`, plus `is_truncated` `[1]` (and
`turn_ids` `[1, L]` for multi-turn builders)."""

from __future__ import annotations

import math

from .api import ModelResponse
from .tensor import Tensor, bool_, concat_padded_tensors, float32, int32


class TrajectoryBuilder:
    """Appends prompt segments (masked out, logprob 0, version -1) and model outputs
    (trained on, with their logprobs and versions) into one sequence."""

    def __init__(self, multi_turn: bool = False):
        self.input_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float] = []
        self.versions: list[int] = []
        self.turn_ids: list[int] = []
        self.with_turn_ids = multi_turn
        self.truncated = False
        self.turns = 0

    def prompt(self, ids) -> TrajectoryBuilder:
        n = len(ids)
        self.input_ids += list(ids)
        self.loss_mask += [0] * n
        self.logprobs += [0.0] * n
        self.versions += [-1] * n
        self.turn_ids += [-1] * n
        return self

    def output(self, resp: ModelResponse) -> TrajectoryBuilder:
        n = len(resp.output_tokens)
        self.input_ids += resp.output_tokens
        self.loss_mask += [1] * n
        self.logprobs += (list(resp.output_logprobs) + [0.0] * n)[:n]
        self.versions += (list(resp.output_versions) + [-1] * n)[:n]
        self.turn_ids += [self.turns] * n
        self.truncated = resp.stop_reason == "length"
        self.turns += 1
        return self

    def __len__(self):
        return len(self.input_ids)

    def tokens(self) -> list[int]:
        return list(self.input_ids)

    def finish(self, reward: float) -> dict:
        n = len(self.input_ids)
        row = (1, n)
        out = {
            "input_ids": Tensor(self.input_ids, row, int32),
            "loss_mask": Tensor(self.loss_mask, row, int32),
            "logprobs": Tensor(list(map(float, self.logprobs)), row, float32),
            "versions": Tensor(self.versions, row, int32),
            "attention_mask": Tensor([True] * n, row, bool_),
        }
        if self.with_turn_ids:
            out["turn_ids"] = Tensor(self.turn_ids, row, int32)
        out["rewards"] = Tensor([float(reward)], (1,), float32)
        out["is_truncated"] = Tensor([self.truncated], (1,), bool_)
        return out


def single_turn(resp: ModelResponse, reward: float) -> dict:
    """The tensors of one prompt + one output."""
    return TrajectoryBuilder().prompt(resp.input_tokens).output(resp).finish(reward)


def merge(outputs: list, reference: float) -> dict:
    """Several trajectories of one episode as one padded batch (`concat_padded_tensors`); when
    their rewards differ, `rollout_reward` carries `reference` for every row."""
    merged = concat_padded_tensors(outputs, 0.0)
    rewards = merged["rewards"].flat() if "rewards" in merged else []
    if any(a != b for a, b in zip(rewards, rewards[1:])):
        if not math.isfinite(reference):
            raise ValueError(f"rollout_reward must be finite, got {reference}")
        merged["rollout_reward"] = Tensor([float(reference)] * len(rewards), (len(rewards),), float32)
    return merged
