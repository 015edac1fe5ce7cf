"""rollbox.verl.WasmAgentLoop against verl 0.9.1's own SingleTurnAgentLoop: on the same rows and
the same server answers (a fake server manager, as verl's own CPU tests drive agent loops), the
rlvr workflow gives verl's prompt ids, response ids, response mask and logprobs, plus the
sandboxed reward and the weight versions; a truncated answer is inferred as `length`; verl's
sampling parameters reach the server; a workflow that fails gives an empty response that trains
nothing, with its fault, instead of failing the step.

Run in the trainers venv (scripts/install/trainers-venv.sh) by scripts/test.sh."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from verl.experimental.agent_loop.agent_loop import DictConfigWrap
from verl.experimental.agent_loop.single_turn_agent_loop import SingleTurnAgentLoop
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from rollbox.verl import WasmAgentLoop

ROOT = Path(__file__).resolve().parents[3]
MODEL = Path(os.environ.get("ROLLBOX_MODEL_DIR", Path.home() / ".cache/rollbox/models"))
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
PANIC = ROOT / "target/wasm-guests/wasm32-wasip2/guest/adv_panic.wasm"
RESPONSE_LENGTH = 24


class RecordedServer:
    """verl's server manager with fixed answers: `answer` tokenized, then eos unless it is cut
    at `max_tokens`; logprobs -0.01 * position; weights at version 5."""

    def __init__(self, tokenizer, answer: str):
        self.answer = tokenizer.encode(answer) + [tokenizer.eos_token_id]
        self.params: list[dict[str, Any]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        self.params.append(dict(sampling_params))
        n = min(len(self.answer), int(sampling_params.get("max_tokens", len(self.answer))))
        return TokenOutput(
            token_ids=self.answer[:n],
            log_probs=[-0.01 * i for i in range(n)],
            stop_reason="completed",
            extra_fields={"global_steps": 5},
        )


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(MODEL, gguf_file=GGUF)
    tok.eos_token = tok.pad_token = "<|im_end|>"  # transformers reads the GGUF's eos wrong
    return tok


def loop(cls, tokenizer, server, **kwargs):
    config = OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": 256,
                    "response_length": RESPONSE_LENGTH,
                    "multi_turn": {"tool_config_path": None},
                },
                "model": {"path": str(MODEL), "tokenizer_path": str(MODEL)},
            },
            "data": {"tool_config_path": None, "apply_chat_template_kwargs": {}},
        }
    )
    return cls(
        trainer_config=DictConfigWrap(config),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(config.data),
        **kwargs,
    )


def row(question: str) -> dict[str, Any]:
    """One row of verl's GSM8K parquet, as the agent loop worker passes it."""
    return {
        "raw_prompt": [{"role": "user", "content": question}],
        "data_source": "openai/gsm8k",
        "reward_model": {"ground_truth": "72", "style": "rule"},
        "extra_info": {"index": 0, "split": "train"},
        "index": 0,
    }


def run(agent, sampling, data):
    """On the agent loop's own event loop, as verl's worker runs it."""
    return agent.loop.run_until_complete(agent.run(sampling, **data))


SAMPLING = {"temperature": 0.7, "top_p": 0.9, "top_k": -1, "repetition_penalty": 1.0, "logprobs": True}


def wasm(tokenizer, server, **kwargs):
    return loop(
        WasmAgentLoop,
        tokenizer,
        server,
        workflow="rlvr",
        rewards={"math": "math"},
        tokenizer_path=str(MODEL / GGUF),
        config={"reward": "math"},
        **kwargs,
    )


@pytest.mark.parametrize(
    ("answer", "reward", "cut"),
    [
        ("48 + 24 = 72, so \\boxed{72}.", 1.0, False),
        # longer than the response budget: cut before its answer, no eos (`length`)
        (
            "She sold 48 clips in April and half as many in May: 48 / 2 = 24 more, and "
            "adding them up gives 48 + 24 = 72 clips altogether, so the answer is 72.",
            0.0,
            True,
        ),
    ],
)
def test_rlvr_gives_verls_single_turn_tokens(tokenizer, answer, reward, cut):
    question = "Natalia sold clips to 48 of her friends in April, and then half as many in May. How many in all?"
    ours, theirs = RecordedServer(tokenizer, answer), RecordedServer(tokenizer, answer)
    got = run(wasm(tokenizer, ours), SAMPLING, row(question))
    verls = loop(SingleTurnAgentLoop, tokenizer, theirs)
    want = run(verls, dict(SAMPLING, max_tokens=RESPONSE_LENGTH), row(question))
    assert got.prompt_ids == want.prompt_ids
    assert got.response_ids == want.response_ids
    assert got.response_mask == want.response_mask
    assert got.response_logprobs == pytest.approx(want.response_logprobs, abs=1e-6)
    assert got.extra_fields["min_global_steps"] == got.extra_fields["max_global_steps"] == 5
    assert got.extra_fields["turn_scores"] == [] and got.extra_fields["rollbox_fault"] is None
    assert got.num_turns == want.num_turns == 2
    assert (len(got.response_ids) == RESPONSE_LENGTH) == cut
    assert (got.response_ids[-1] == tokenizer.eos_token_id) != cut
    assert got.reward_score == reward
    # verl's sampling parameters reached the server, with the budget as max_tokens.
    sent = ours.params[0]
    assert {k: sent[k] for k in SAMPLING} == SAMPLING
    assert sent["max_tokens"] == RESPONSE_LENGTH


def test_a_failing_workflow_gives_an_empty_response_with_its_fault(tokenizer):
    assert PANIC.exists(), f"{PANIC} is built by `cargo test --workspace`"
    server = RecordedServer(tokenizer, "72")
    agent = loop(
        WasmAgentLoop, tokenizer, server, workflow=str(PANIC), tokenizer_path=str(MODEL / GGUF)
    )
    out = run(agent, SAMPLING, row("What is 70 + 2?"))
    assert out.response_ids == [] and out.response_mask == []
    assert out.reward_score == 0.0
    assert out.extra_fields["rollbox_fault"], out.extra_fields
    # The prompt as verl tokenizes it (the workflow never returned one).
    prompt = tokenizer.apply_chat_template(
        row("What is 70 + 2?")["raw_prompt"], add_generation_prompt=True, tokenize=True
    )
    assert out.prompt_ids == list(prompt["input_ids"])
