"""rollbox.trl against TRL 1.16 itself: `GRPOTrainer` trains SmolLM2-135M-Instruct (the project's
GGUF, dequantised by transformers) for 2 steps on the CPU with `rollbox.trl.reward_func("math")`
as its reward: the loss is finite, the parameters change, and the reward saw the dataset's
`answer` column; a reward component that never returns gives None (TRL's NaN) and a fault count,
never a hang.

Run in the trainers venv (scripts/install/trainers-venv.sh) by scripts/test.sh."""

from __future__ import annotations

import asyncio
import math
import os
import time
from pathlib import Path

import pytest
import torch

from rollbox.trl import RewardFunc, reward_func

ROOT = Path(__file__).resolve().parents[3]
MODEL = Path(os.environ.get("ROLLBOX_MODEL_DIR", Path.home() / ".cache/rollbox/models"))
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
SPIN = ROOT / "target/wasm-guests/wasm32-wasip2/guest/reward_spin.wasm"


class Seen(RewardFunc):
    """`reward_func("math")` that also keeps what TRL passed it and what it returned."""

    def __init__(self):
        super().__init__("math")
        self.calls = []

    async def __call__(self, prompts, completions, completion_ids=None, **kwargs):
        out = await super().__call__(prompts, completions, completion_ids, **kwargs)
        self.calls.append((list(completions), kwargs.get("answer"), out))
        return out


def model_and_tokenizer():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(MODEL, gguf_file=GGUF)
    model = AutoModelForCausalLM.from_pretrained(MODEL, gguf_file=GGUF, dtype=torch.float32)
    # transformers reads the GGUF's eos as <|im_start|> and no pad: generations would never stop.
    tok.eos_token = tok.pad_token = "<|im_end|>"
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    return model, tok


def grpo_config(tmp_path, **overrides):
    """GRPO on the CPU in fp32 (TRL defaults to bf16 and gradient checkpointing), one prompt's
    2 generations of at most 8 tokens per step."""
    from trl import GRPOConfig

    return GRPOConfig(
        output_dir=str(tmp_path),
        use_cpu=True,
        bf16=False,
        fp16=False,
        per_device_train_batch_size=2,
        num_generations=2,
        max_completion_length=8,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        gradient_checkpointing=False,
        learning_rate=1e-4,
        seed=0,
        **overrides,
    )


def test_grpo_trains_two_steps_on_the_cpu_with_a_sandboxed_reward(tmp_path):
    from datasets import Dataset
    from trl import GRPOTrainer

    model, tok = model_and_tokenizer()
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    rows = [
        {"prompt": [{"role": "user", "content": "What is 2+3? Reply with the number."}], "answer": "5"},
        {"prompt": [{"role": "user", "content": "What is 4+4? Reply with the number."}], "answer": "8"},
    ]
    seen = Seen()
    args = grpo_config(tmp_path, max_steps=2, temperature=1.0)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[seen],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
    )
    trainer.train()

    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 2, trainer.state.log_history
    assert all(math.isfinite(h["loss"]) for h in logs), logs
    assert all("rewards/rollbox_math/mean" in h for h in logs), logs
    # Each step scored one prompt's 2 generations; TRL passed the dataset's `answer` column,
    # repeated per generation, to the reward.
    assert len(seen.calls) == 2
    for completions, answers, scores in seen.calls:
        assert len(completions) == len(answers) == len(scores) == 2
        assert len(set(answers)) == 1 and answers[0] in ("5", "8"), answers
        assert all(s in (0.0, 1.0) for s in scores), scores
    changed = sum(
        not torch.equal(before[n], p.detach()) for n, p in trainer.model.named_parameters()
    )
    assert changed > 0, "no parameter changed in 2 GRPO steps"


def test_a_reward_that_never_returns_gives_none_and_a_fault_count():
    assert SPIN.exists(), f"{SPIN} is built by `cargo test --workspace`"
    f = reward_func(str(SPIN), timeout="300ms", retries=0, name="spin")
    metrics = {}
    start = time.monotonic()
    out = asyncio.run(
        f(
            prompts=["p"] * 3,
            completions=["c"] * 3,
            completion_ids=[[1], [2], [3]],
            answer=["1", "2", "3"],
            log_metric=lambda name, value: metrics.__setitem__(name, value),
        )
    )
    assert out == [None, None, None]
    assert metrics == {"rollbox/spin/faults": 3.0}
    assert time.monotonic() - start < 10


def test_conversational_completions_and_unknown_options():
    f = reward_func("math")
    out = asyncio.run(
        f(
            prompts=[[{"role": "user", "content": "2+3?"}]] * 2,
            completions=[
                [{"role": "assistant", "content": "It is 5."}],
                [{"role": "assistant", "content": "It is 6."}],
            ],
            solution=["5", "5"],
        )
    )
    assert out == [1.0, 0.0]
    with pytest.raises(ValueError, match="timeout, retries"):
        reward_func("math", timeuot="1s")


def test_grpo_step_with_a_workflow_as_rollout_func(tmp_path):
    """A GRPO step whose completions come from the rlvr workflow on rollbox's embedded engine
    (TRL's `rollout_func`), scored by the workflow's own sandboxed reward."""
    from datasets import Dataset
    from trl import GRPOTrainer

    from rollbox.trl import rollout_func, workflow_reward

    model, tok = model_and_tokenizer()
    rows = [
        {"prompt": [{"role": "user", "content": "What is 2+3? Reply with the number."}], "answer": "5"},
        {"prompt": [{"role": "user", "content": "What is 4+4? Reply with the number."}], "answer": "8"},
    ]
    seen = []

    def reward(completions, rollbox_reward=None, **kwargs):
        out = workflow_reward(completions, rollbox_reward, **kwargs)
        seen.append((list(completions), out))
        return out

    rollout = rollout_func(
        "rlvr",
        engine="embedded",
        rewards={"math": "math"},
        config={"reward": "math", "gconfig": {"max_new_tokens": 8, "temperature": 1.0}},
    )
    args = grpo_config(tmp_path, max_steps=1)
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=[reward],
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tok,
        rollout_func=rollout,
    )
    trainer.train()
    logs = [h for h in trainer.state.log_history if "loss" in h]
    assert len(logs) == 1 and math.isfinite(logs[0]["loss"]), trainer.state.log_history
    # The workflow found each prompt's row (its reward read `answer`) and scored every episode.
    assert len(seen) == 1
    completions, rewards = seen[0]
    assert len(rewards) == 2 and all(r in (0.0, 1.0) for r in rewards), seen
    # Its completions are what rlvr generated: at most 8 tokens each.
    out = rollout([rows[0]["prompt"]] * 2, trainer)
    assert all(0 < len(c) <= 8 for c in out["completion_ids"]), out
    assert all(m == [1] * len(c) for m, c in zip(out["env_mask"], out["completion_ids"]))
    assert all(len(lp) == len(c) for lp, c in zip(out["logprobs"], out["completion_ids"]))
    assert all(r in (0.0, 1.0) for r in out["rollbox_reward"]), out
