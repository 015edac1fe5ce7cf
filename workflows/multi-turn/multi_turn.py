"""AReaL 1.0.4's `MultiTurnWorkflow`, written with rollbox's Python SDK: retry with feedback
until the reward is positive or the turns run out; the final reward is discounted by
`turn_discount` per extra turn.

The structure, names and order follow `areal/workflow/multi_turn.py`. The feedback turn's text
is the config's `feedback` (the default is rollbox's own wording, the same as the Rust
`multi-turn` workflow's).

Config: `reward` (default `math`), `max_turns` (default 2), `turn_discount` (default 1.0),
`gconfig`, `enable_thinking`, `feedback`, and `prompt_key`, `prompt_suffix`, `system_prompt`,
`answer_key` as in `rlvr.py`.
"""

from typing import Any

import rollbox_sdk as rollbox
from rollbox_sdk import (
    AsyncRewardWrapper,
    GenerationHyperparameters,
    ModelRequest,
    RolloutWorkflow,
    apply_chat_template,
    stats_tracker,
    workflow_context,
)

logger = rollbox.getLogger("MultiTurnWorkflow")

FEEDBACK = (
    "That answer was judged incorrect or could not be read. Reread the question, check your "
    "previous steps, and give your final answer again."
)


class MultiTurnWorkflow(RolloutWorkflow):
    """Multi-attempt workflow that retries generation until the reward is positive."""

    def __init__(
        self,
        reward_fn,
        gconfig: GenerationHyperparameters,
        tokenizer,
        max_turns: int,
        turn_discount: float,
        enable_thinking: bool = False,
        feedback: str = FEEDBACK,
    ):
        if max_turns <= 0:
            raise ValueError("max_turns must be positive")
        if not (0.0 < turn_discount <= 1.0):
            raise ValueError("turn_discount must be in (0, 1].")

        self.reward_fn = reward_fn
        self.gconfig = gconfig.new_with_stop_and_pad_token_ids(tokenizer)
        self.tokenizer = tokenizer
        self.max_turns = max_turns
        self.turn_discount = turn_discount
        self.enable_thinking = enable_thinking
        self.async_reward_fn = AsyncRewardWrapper(reward_fn)

        # The tokens a feedback turn adds after an assistant turn: the chat with it minus the
        # chat without it.
        messages = [{"role": "assistant", "content": "placeholder answer."}]
        s1 = apply_chat_template(
            self.tokenizer, messages, tokenize=True, enable_thinking=enable_thinking
        )
        messages += [{"role": "user", "content": feedback}]
        s2 = apply_chat_template(
            self.tokenizer,
            messages,
            tokenize=True,
            add_generation_prompt=True,
            enable_thinking=enable_thinking,
        )
        self.multi_turn_prompt_ids = s2[len(s1) :]

    @classmethod
    def from_config(cls, config: dict):
        return cls(
            reward_fn=config.get("reward", "math"),
            gconfig=GenerationHyperparameters.from_config(config.get("gconfig")),
            tokenizer=rollbox.tokenizer,
            max_turns=int(config.get("max_turns", 2)),
            turn_discount=float(config.get("turn_discount", 1.0)),
            enable_thinking=bool(config.get("enable_thinking", False)),
            feedback=str(config.get("feedback", FEEDBACK)),
        )

    async def arun_episode(self, engine, data: dict[str, Any]):
        config = rollbox.episode.config
        seq, logprobs, loss_mask, versions = [], [], [], []
        messages = rollbox.prompt_messages(data, config)
        task_data = rollbox.reward_data(data, config)
        input_ids: list[int] = apply_chat_template(
            self.tokenizer,
            messages,
            tokenize=True,
            add_generation_prompt=True,
            enable_thinking=self.enable_thinking,
        )
        t = 0
        reward = 0.0
        discount = 1.0
        prompt_str = ""
        completions_str = ""
        while reward == 0.0 and t < self.max_turns:
            req = ModelRequest(
                input_ids=input_ids,
                gconfig=self.gconfig.new(n_samples=1),
                tokenizer=self.tokenizer,
            )
            resp = await engine.agenerate(req)
            prompt_str = self.tokenizer.decode(input_ids)
            completions_str = self.tokenizer.decode(resp.output_tokens)
            reward = await self.async_reward_fn(
                prompt_str,
                completions_str,
                resp.input_tokens,
                resp.output_tokens,
                **task_data,
            )
            input_len = len(resp.input_tokens) - len(seq)
            assert len(seq) == 0 or resp.input_tokens[:-input_len] == seq, (
                "the engine's input tokens do not extend the sequence so far"
            )
            seq += resp.input_tokens[-input_len:] + resp.output_tokens
            logprobs += [0.0] * input_len + resp.output_logprobs
            loss_mask += [0] * input_len + [1] * resp.output_len
            versions += [-1] * input_len + resp.output_versions
            t += 1
            if reward == 0.0 and t < self.max_turns:
                input_ids = input_ids + resp.output_tokens
                if resp.output_tokens and resp.output_tokens[-1] != self.tokenizer.eos_token_id:
                    input_ids += [self.tokenizer.eos_token_id]
                input_ids += self.multi_turn_prompt_ids
                discount *= self.turn_discount

        reward = float(reward * discount)

        stats_tracker.get(workflow_context.stat_scope()).scalar(reward=reward, num_turns=t)
        rollbox.episode.metadata.update(prompt=prompt_str, completion=completions_str, turns=t)

        res = dict(
            input_ids=rollbox.tensor(seq, dtype=rollbox.int32),
            logprobs=rollbox.tensor(logprobs, dtype=rollbox.float32),
            loss_mask=rollbox.tensor(loss_mask, dtype=rollbox.int32),
            versions=rollbox.tensor(versions, dtype=rollbox.int32),
            rewards=rollbox.tensor(reward, dtype=rollbox.float32),
            attention_mask=rollbox.ones(len(seq), dtype=rollbox.bool),
        )
        return {k: v.unsqueeze(0) for k, v in res.items()}


WitWorld = rollbox.export(MultiTurnWorkflow)
