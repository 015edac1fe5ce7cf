"""rollbox's tool-agent workflow (through rollbox.verl.WasmAgentLoop) against verl 0.9.1's own
ToolAgentLoop, on a recorded Hermes conversation: the four engine answers the tool-agent tests
replay (`tests/fixtures/tool-agent/hermes-qwen25-style.jsonl`: a python-exec call, a calculator
call, a call with invalid JSON, the answer), the same tools (rollbox components, offered to
verl through `rollbox.verl.function_tools` with the schemas the components describe) and the
same Hermes-layout template.

What agrees: the prompt verl builds with the tools' schemas, every turn's context as the server
sees it, the response ids, mask and logprobs, turn by turn. What differs, by design, each
asserted below:

* a model type verl does not know as ChatML (SmolLM2 is `llama`) gets verl's default token
  builder, which appends the tool turn right after `<|im_end|>` without the template's `\n`:
  the trajectory is then not the conversation through the template; rollbox's is (verl's Qwen
  builder inserts the `\n`, and then the two agree token for token);
* a turn whose only call is invalid JSON ends verl's episode (its Hermes parser drops the call
  and finds none); rollbox answers it with an `error: invalid_json` observation and the model
  goes on, so rollbox's trajectory continues where verl's stops;
* verl leaves the reward to its reward manager; rollbox's sets `reward_score` from the
  sandboxed reward.

Run in the trainers venv (scripts/install/trainers-venv.sh) by scripts/test.sh."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest
from omegaconf import OmegaConf

from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
from verl.experimental.agent_loop.tool_agent_loop import ToolAgentLoop
from verl.utils.dataset.rl_dataset import RLHFDataset
from verl.workers.rollout.replica import TokenOutput

from rollbox.verl import WasmAgentLoop, function_tools

ROOT = Path(__file__).resolve().parents[3]
MODEL = Path(os.environ.get("ROLLBOX_MODEL_DIR", Path.home() / ".cache/rollbox/models"))
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
FIXTURES = ROOT / "tests/fixtures/tool-agent"
PYTHON_EXEC = ROOT / "target/wasm-guests/python/python_exec_tool.wasm"
RESPONSE_LENGTH = 1024


def recording() -> list[dict[str, Any]]:
    with open(FIXTURES / "hermes-qwen25-style.jsonl") as f:
        return [json.loads(line) for line in f]


class RecordedServer:
    """verl's server manager answering each generate with the next recorded engine answer;
    keeps the prompts it was sent."""

    def __init__(self):
        self.turns = recording()
        self.prompts: list[list[int]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        turn = self.turns[len(self.prompts)]
        self.prompts.append(list(prompt_ids))
        return TokenOutput(
            token_ids=turn["output_tokens"],
            log_probs=turn["output_logprobs"],
            stop_reason="completed",
            extra_fields={"global_steps": turn["output_versions"][0]},
        )


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory):
    """SmolLM2's tokenizer with the tests' Hermes-layout tool template, saved as a Hugging Face
    tokenizer folder: what verl's tokenizer and rollbox's host both load."""
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(MODEL, gguf_file=GGUF)
    tok.eos_token = tok.pad_token = "<|im_end|>"  # transformers reads the GGUF's eos wrong
    tok.chat_template = (FIXTURES / "hermes-template.jinja").read_text()
    out = tmp_path_factory.mktemp("hermes-tokenizer")
    tok.save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def tokenizer(tokenizer_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(tokenizer_dir)


TOOLS = {"python": str(PYTHON_EXEC), "calculator": "calculator"}


def config():
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "prompt_length": 1024,
                    "response_length": RESPONSE_LENGTH,
                    "full_determinism": False,
                    "multi_turn": {
                        "tool_config_path": None,
                        "function_tool_path": None,
                        "max_user_turns": 5,
                        "max_assistant_turns": 5,
                        "max_parallel_calls": 1,
                        "max_tool_response_length": 1024,
                        "tool_response_truncate_side": "middle",
                        "format": "hermes",
                    },
                },
                "model": {"path": str(MODEL)},
            },
            "data": {
                "tool_config_path": None,
                "apply_chat_template_kwargs": {"enable_thinking": False},
            },
        }
    )


def build(cls, tokenizer, server, **kwargs):
    c = config()
    return cls(
        trainer_config=DictConfigWrap(c),
        server_manager=server,
        tokenizer=tokenizer,
        processor=None,
        dataset_cls=RLHFDataset,
        data_config=DictConfigWrap(c.data),
        **kwargs,
    )


def verls(tokenizer, hf_model_type):
    server = RecordedServer()
    agent = build(
        ToolAgentLoop,
        tokenizer,
        server,
        tools=ToolListWrap(function_tools(TOOLS)),
        hf_model_type=hf_model_type,
    )
    return agent, server


def ours(tokenizer, tokenizer_dir):
    server = RecordedServer()
    agent = build(
        WasmAgentLoop,
        tokenizer,
        server,
        workflow="tool-agent",
        rewards={"math": "math"},
        tool_components=TOOLS,
        tokenizer_path=str(tokenizer_dir),
        config={"reward": "math", "max_turns": 5, "enable_thinking": False},
    )
    return agent, server


ROW = {
    "raw_prompt": [{"role": "user", "content": "What is 6 times 7?"}],
    "data_source": "openai/gsm8k",
    "reward_model": {"ground_truth": "42", "style": "rule"},
    "extra_info": {"index": 0, "split": "train"},
    "index": 0,
}
SAMPLING = {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "logprobs": True}


def run(agent):
    return agent.loop.run_until_complete(agent.run(dict(SAMPLING), **json.loads(json.dumps(ROW))))


@pytest.fixture(scope="module")
def rollbox_run(tokenizer, tokenizer_dir):
    assert PYTHON_EXEC.exists(), f"{PYTHON_EXEC} is built by `cargo test --workspace`"
    agent, server = ours(tokenizer, tokenizer_dir)
    return run(agent), server


def test_the_tools_are_offered_with_their_components_schemas(tokenizer):
    tools = function_tools(TOOLS)
    assert [t.name for t in tools] == ["calculator", "python"]
    schema = tools[0].tool_schema.model_dump(exclude_unset=True, exclude_none=True)
    assert schema["type"] == "function"
    assert "expression" in schema["function"]["parameters"]["properties"]
    assert tools[0].is_async
    assert json.loads(asyncio.run(tools[0].fn(expression="6 * 7"))) == {"result": 42.0}
    # A fault is text the model sees; the rollout goes on.
    assert asyncio.run(tools[0].fn(expression="6 *")).startswith("error: ")


def test_rollbox_replays_the_recorded_conversation(rollbox_run):
    out, server = rollbox_run
    rec = recording()
    # Every turn's context is the recorded one (the recording is rollbox's own tool-agent run).
    assert server.prompts == [turn["input_ids"] for turn in rec]
    assert out.extra_fields["rollbox_fault"] is None
    assert out.reward_score == 1.0
    # The prompt, 4 generations and 3 tool turns, as verl counts them.
    assert out.num_turns == 8
    assert out.prompt_ids + out.response_ids == rec[-1]["input_ids"] + rec[-1]["output_tokens"]


def test_verls_tool_agent_loop_builds_the_same_tokens(tokenizer, rollbox_run):
    """With verl's Qwen (ChatML) token builder."""
    ours_out, ours_server = rollbox_run
    agent, server = verls(tokenizer, "qwen2")
    got = run(agent)
    # verl's Hermes parser drops the invalid third call and ends the episode there: its three
    # turns are rollbox's first three, token for token.
    assert len(server.prompts) == 3
    assert server.prompts == ours_server.prompts[:3]
    assert got.prompt_ids == ours_out.prompt_ids
    n = len(got.response_ids)
    assert got.response_ids == ours_out.response_ids[:n]
    assert got.response_mask == ours_out.response_mask[:n]
    assert got.response_logprobs == pytest.approx(ours_out.response_logprobs[:n], abs=1e-6)
    # ...where rollbox observed `error: invalid_json` and the model went on to answer.
    assert n < len(ours_out.response_ids)
    rest = tokenizer.decode(ours_out.response_ids[n:])
    assert "error: invalid_json" in rest and "\\boxed{42}" in rest, rest
    assert got.num_turns == 1 + 3 + 2
    assert got.reward_score is None and ours_out.reward_score == 1.0


def test_verls_default_builder_drops_the_templates_newline(tokenizer, rollbox_run):
    """SmolLM2's model type (`llama`) gets verl's default builder: the tool turn follows
    `<|im_end|>` directly, where the template (and rollbox) put `\\n`."""
    ours_out, _ = rollbox_run
    agent, server = verls(tokenizer, "llama")
    got = run(agent)
    newline = tokenizer.encode("\n", add_special_tokens=False)
    im_end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    assert len(newline) == 1
    ours_ids = ours_out.prompt_ids + ours_out.response_ids
    verl_ids = got.prompt_ids + got.response_ids
    # Each of verl's two tool turns is one token short: the `\n` after `<|im_end|>`.
    p = len(ours_out.prompt_ids)
    ends = [  # the model's own end-of-turn tokens
        p + i
        for i, (t, m) in enumerate(zip(ours_out.response_ids, ours_out.response_mask))
        if t == im_end and m
    ]
    assert all(ours_ids[i + 1] == newline[0] for i in ends[:-1])  # the last ends the episode
    without = [t for i, t in enumerate(ours_ids) if i - 1 not in ends[:2]]
    assert verl_ids == without[: len(verl_ids)]
    assert len(server.prompts) == 3
