"""AReaL 1.0.4's `RLVRWorkflow`, written with rollbox's Python SDK.

The structure, names and order follow `areal/workflow/rlvr.py`; what differs is what the
sandbox provides: the tokenizer and chat template run on the host (`rollbox.tokenizer`), the
reward is a registered reward component (`--reward math=...`) called through
`AsyncRewardWrapper`, and tensors are `rollbox.tensor`s with torch's dtypes.

Config (`--config '{...}'`): `reward` (default `math`), `gconfig` (AReaL's
`GenerationHyperparameters` fields), `enable_thinking`, and for rows as datasets ship them
`prompt_key`, `prompt_suffix`, `system_prompt`, `answer_key` (see `rollbox.prompt_messages`).

Build: `scripts/guests/build-python-workflow.sh workflows/rlvr/rlvr.py rlvr_py.wasm`.
"""

from typing import Any

import rollbox_sdk as rollbox
from rollbox_sdk import (
    AsyncRewardWrapper,
    GenerationHyperparameters,
    ModelRequest,
    ModelResponse,
    RolloutWorkflow,
    stats_tracker,
    workflow_context,
)
from rollbox_sdk import apply_chat_template

logger = rollbox.getLogger("RLVRWorkflow")


def default_get_input_ids_fn(data, tokenizer, enable_thinking: bool) -> list[int]:
    return apply_chat_template(
        tokenizer,
        data,
        tokenize=True,
        add_generation_prompt=True,
        enable_thinking=enable_thinking,
    )


def default_data_extract_prompt_fn(data: dict[str, Any]):
    # AReaL reads data["messages"]; rows as datasets ship them (question, prompt, ...) too.
    return rollbox.prompt_messages(data, rollbox.episode.config)


class RLVRWorkflow(RolloutWorkflow):
    """Single-turn reward learning: generate once, score, return AReaL's tensors."""

    def __init__(
        self,
        reward_fn,
        gconfig: GenerationHyperparameters,
        tokenizer,
        enable_thinking: bool = False,
        get_input_ids_fn=default_get_input_ids_fn,
        data_extract_prompt_fn=default_data_extract_prompt_fn,
    ):
        self.reward_fn = reward_fn
        self.tokenizer = tokenizer
        self.gconfig = gconfig.new_with_stop_and_pad_token_ids(self.tokenizer)
        self.enable_thinking = enable_thinking
        self.async_reward_fn = AsyncRewardWrapper(reward_fn)
        self.get_input_ids_fn = get_input_ids_fn
        self.data_extract_prompt_fn = data_extract_prompt_fn

    @classmethod
    def from_config(cls, config: dict):
        return cls(
            reward_fn=config.get("reward", "math"),
            gconfig=GenerationHyperparameters.from_config(config.get("gconfig")),
            tokenizer=rollbox.tokenizer,
            enable_thinking=bool(config.get("enable_thinking", False)),
        )

    async def _compute_rewards(self, resp: ModelResponse, prompt_str: str, task_data) -> float:
        completions_str = self.tokenizer.decode(resp.output_tokens)
        reward = await self.async_reward_fn(
            prompt_str,
            completions_str,
            resp.input_tokens,
            resp.output_tokens,
            **task_data,
        )
        return reward

    async def _collect_samples(self, engine, req: ModelRequest, prompt_str: str, task_data):
        resp = await engine.agenerate(req)
        reward = await self._compute_rewards(resp, prompt_str, task_data)
        stats_tracker.get(workflow_context.stat_scope()).scalar(reward=reward)
        return resp, reward

    async def arun_episode(self, engine, data: dict[str, Any]):
        input_ids = self.get_input_ids_fn(
            self.data_extract_prompt_fn(data),
            self.tokenizer,
            self.enable_thinking,
        )
        req = ModelRequest(
            rid="",  # the host assigns <episode-id>-<n>
            input_ids=input_ids,
            gconfig=self.gconfig.new(n_samples=1),
            tokenizer=self.tokenizer,
        )

        prompt_str = self.tokenizer.decode(input_ids)

        # Generate single response and compute reward
        task_data = rollbox.reward_data(data, rollbox.episode.config)
        resp, reward = await self._collect_samples(engine, req, prompt_str, task_data)

        # Build result tensor dict with batch dim 1
        seq = resp.input_tokens + resp.output_tokens
        logprobs = [0.0] * resp.input_len + resp.output_logprobs
        loss_mask = [0] * resp.input_len + [1] * resp.output_len
        versions = [-1] * resp.input_len + resp.output_versions

        res = {
            "input_ids": rollbox.tensor(seq, dtype=rollbox.int32),
            "loss_mask": rollbox.tensor(loss_mask, dtype=rollbox.int32),
            "logprobs": rollbox.tensor(logprobs, dtype=rollbox.float32),
            "versions": rollbox.tensor(versions, dtype=rollbox.int32),
            "attention_mask": rollbox.ones(len(seq), dtype=rollbox.bool),
            "rewards": rollbox.tensor(reward, dtype=rollbox.float32),
        }
        rollbox.episode.metadata.update(
            prompt=prompt_str,
            completion=self.tokenizer.decode(resp.output_tokens),
            stop_reason=resp.stop_reason,
        )
        return {k: v.unsqueeze(0) for k, v in res.items()}


WitWorld = rollbox.export(RLVRWorkflow)
