"""Record the workflow conformance suite from AReaL 1.0.4's own code.

For fixed rows and fixed engine answers (some cut at `max_new_tokens`, produced under several
policy versions), run AReaL's `areal.workflow.rlvr.RLVRWorkflow.arun_episode` with AReaL's
`areal.reward.gsm8k.gsm8k_reward_fn`, on the reference tokenizer (transformers, the SmolLM2 GGUF
rollbox's tests use), and join each group's samples with AReaL's
`areal.utils.data.concat_padded_tensors`. The engine is a stand-in with AReaL's `agenerate`
signature that answers each request with the recorded tokens (the prompt it receives is
checked against the case's own, so a change in AReaL's prompt building shows up here).

Every language's rlvr component must reproduce `expected` bit for bit on every key, and every
language's math reward the recorded rewards (`tests/tests/conformance.rs`).

    ~/.cache/rollbox/areal-venv/bin/python tests/conformance/record.py > tests/conformance/rlvr.json

Output: {"generator", "versions", "config", "cases": [{"name", "row", "samples":
[{"record": <replay line>, "reward"}], "expected": {key: {"dtype", "shape", "data"}}}]}.
`record` is the replay engine's format (`--engine replay:FILE`); `expected` is the group's
`concat_padded_tensors` result.
"""

import asyncio
import importlib.metadata
import json
import os
import sys

import torch
import transformers.modeling_gguf_pytorch_utils as gguf_utils
from transformers import AutoTokenizer
from transformers.utils import logging as hf_logging

from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelResponse
from areal.reward.gsm8k import gsm8k_reward_fn
from areal.utils.data import concat_padded_tensors
from areal.workflow.rlvr import RLVRWorkflow

gguf_utils.is_torch_available = lambda: True
hf_logging.set_verbosity_error()

MODEL_DIR = os.environ.get("ROLLBOX_MODEL_DIR", os.path.expanduser("~/.cache/rollbox/models"))
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
MAX_NEW_TOKENS = 24

GSM8K = {"question": "Tom has 3 bags with 4 apples each. How many apples does he have?",
         "answer": "Tom has 3 * 4 = <<3*4=12>>12 apples.\n#### 12"}

# (name, row, [(completion text, stop_reason, version)...]); a row's samples form one group.
CASES = [
    ("boxed_right_and_wrong",
     {"messages": [{"role": "user", "content": GSM8K["question"]}], "answer": GSM8K["answer"]},
     [("3 * 4 = 12, so \\boxed{12}<|im_end|>", "stop", 3),
      ("He has \\boxed{7} apples.<|im_end|>", "stop", 3),
      ("Each bag has 4 apples and there are 3 bags so the total is", "length", 4)]),
    ("system_prompt_and_percent",
     {"messages": [{"role": "system", "content": "Answer in \\boxed{}."},
                   {"role": "user", "content": "What is 15% of 80?"}], "answer": "12"},
     [("15% of 80 is \\boxed{12}<|im_end|>", "stop", 0),
      ("15% of 80 is 12%.<|im_end|>", "stop", 1)]),
    ("versions_change_mid_group",
     {"messages": [{"role": "user", "content": "Write the numbers 1 to 5."}], "answer": "5"},
     [("1, 2, 3, 4, 5<|im_end|>", "stop", 7),
      ("1, 2, 3", "length", 8),
      ("One two three four five.<|im_end|>", "stop", 9),
      ("5<|im_end|>", "stop", 9)]),
    ("single_sample_truncated",
     {"messages": [{"role": "user", "content": "Explain why the sky is blue in one long sentence."}],
      "answer": "#### 0"},
     [("The sky looks blue because air molecules scatter the short blue wavelengths of "
       "sunlight much more strongly than the longer red ones, so", "length", 2)]),
]


class ReplayEngine:
    """AReaL's `agenerate` contract, answering from the case's recorded samples in order."""

    def __init__(self, prompt, samples, tok):
        self.prompt = prompt
        self.samples = list(samples)
        self.tok = tok
        self.records = []

    async def agenerate(self, req):
        assert req.input_ids == self.prompt, "AReaL built a different prompt than recorded"
        text, stop, version = self.samples.pop(0)
        out = self.tok.encode(text, add_special_tokens=False)[:MAX_NEW_TOKENS]
        if stop == "length":
            assert len(out) <= MAX_NEW_TOKENS
        logprobs = [round(-0.05 * (i + 1) - 0.001 * (len(self.records) + 1), 6) for i in range(len(out))]
        self.records.append({"input_ids": list(req.input_ids), "output_tokens": out,
                             "output_logprobs": logprobs, "output_versions": [version] * len(out),
                             "stop_reason": stop})
        return ModelResponse(input_tokens=list(req.input_ids), output_tokens=out,
                             output_logprobs=logprobs, output_versions=[version] * len(out),
                             stop_reason=stop, tokenizer=self.tok)


def tensor_json(t: torch.Tensor):
    dtype = {torch.int32: "i32", torch.int64: "i64", torch.float32: "f32", torch.bool: "bool"}[t.dtype]
    return {"dtype": dtype, "shape": list(t.shape), "data": t.flatten().tolist()}


async def record_case(name, row, samples, tok):
    gconfig = GenerationHyperparameters(max_new_tokens=MAX_NEW_TOKENS)
    workflow = RLVRWorkflow(reward_fn=gsm8k_reward_fn, gconfig=gconfig, tokenizer=tok,
                            enable_thinking=False)
    prompt = tok.apply_chat_template(row["messages"], tokenize=True, add_generation_prompt=True,
                                     enable_thinking=False)
    if not isinstance(prompt, list):
        prompt = prompt["input_ids"]
    engine = ReplayEngine(prompt, samples, tok)
    results = []
    for _ in samples:
        results.append(await workflow.arun_episode(engine, row))
    joined = concat_padded_tensors(results)
    return {
        "name": name,
        "row": row,
        "samples": [{"record": rec, "reward": float(r["rewards"].flatten()[0])}
                    for rec, r in zip(engine.records, results)],
        "expected": {k: tensor_json(v) for k, v in joined.items()},
    }


async def main():
    tok = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file=GGUF)
    cases = [await record_case(*c, tok) for c in CASES]
    versions = {p: importlib.metadata.version(p)
                for p in ("areal", "torch", "transformers", "math-verify")}
    json.dump({"generator": "tests/conformance/record.py", "versions": versions,
               "config": {"reward": "math", "gconfig": {"max_new_tokens": MAX_NEW_TOKENS}},
               "cases": cases}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    asyncio.run(main())
