"""Record the RLVR parity fixture: for a few rows and recorded engine responses, the tensors
AReaL's RLVRWorkflow builds (areal/workflow/rlvr.py, arun_episode), computed here with the
reference tokenizer (transformers, SmolLM2 GGUF) and AReaL's layout rules, independently of
rollbox:

    input_ids      = resp.input_tokens + resp.output_tokens          (prompt = chat template,
                                                                       add_generation_prompt)
    loss_mask      = [0] * input_len + [1] * output_len
    logprobs       = [0.0] * input_len + resp.output_logprobs
    versions       = [-1] * input_len + resp.output_versions
    attention_mask = [True] * len(input_ids)
    rewards        = [float(reward)]                                  (shape [1])
    each per-token tensor unsqueezed to [1, L]

rollbox additionally returns `is_truncated` ([stop_reason == "length"]) and, as the issue
specifies, stores the integer keys as int32 (torch.tensor of Python ints would be int64).

    python3 scripts/record_rlvr_fixture.py > tests/fixtures/rlvr/areal_layout.json
"""

import json
import os
import sys

import transformers.modeling_gguf_pytorch_utils as gguf_utils
from transformers import AutoTokenizer
from transformers.utils import logging

gguf_utils.is_torch_available = lambda: True  # tokenizer conversion does not use torch
logging.set_verbosity_error()

MODEL_DIR = os.environ.get("ROLLBOX_MODEL_DIR", os.path.expanduser("~/.cache/rollbox/models"))
VERSION = 3

CASES = [
    {
        "row": {"messages": [{"role": "user", "content": "Tom has 3 bags with 4 apples each. How many apples?"}], "answer": "#### 12"},
        "completion": "3 * 4 = 12. \\boxed{12}<|im_end|>",
        "reward": 1.0,
        "stop_reason": "stop",
    },
    {
        "row": {"messages": [{"role": "system", "content": "Answer in \\boxed{}."}, {"role": "user", "content": "What is 15% of 80?"}], "answer": "12"},
        "completion": "15% of 80 is \\boxed{10}<|im_end|>",
        "reward": 0.0,
        "stop_reason": "stop",
    },
    {
        "row": {"messages": [{"role": "user", "content": "Write 1 to 5."}], "answer": "5"},
        "completion": "1, 2, 3",
        "reward": 0.0,
        "stop_reason": "length",
    },
]


def main() -> None:
    tok = AutoTokenizer.from_pretrained(MODEL_DIR, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    out = []
    for case in CASES:
        prompt = tok.apply_chat_template(case["row"]["messages"], tokenize=True, add_generation_prompt=True, enable_thinking=False)
        output = tok(case["completion"], add_special_tokens=False)["input_ids"]
        logprobs = [round(-0.05 * (i + 1), 4) for i in range(len(output))]
        versions = [VERSION] * len(output)
        p, o = len(prompt), len(output)
        out.append(
            {
                "row": case["row"],
                "record": {"input_ids": prompt, "output_tokens": output, "output_logprobs": logprobs, "stop_reason": case["stop_reason"]},
                "version": VERSION,
                "expected": {
                    "input_ids": {"shape": [1, p + o], "data": prompt + output},
                    "loss_mask": {"shape": [1, p + o], "data": [0] * p + [1] * o},
                    "logprobs": {"shape": [1, p + o], "data": [0.0] * p + logprobs},
                    "versions": {"shape": [1, p + o], "data": [-1] * p + versions},
                    "attention_mask": {"shape": [1, p + o], "data": [True] * (p + o)},
                    "rewards": {"shape": [1], "data": [float(case["reward"])]},
                    "is_truncated": {"shape": [1], "data": [case["stop_reason"] == "length"]},
                },
            }
        )
    json.dump({"source": f"AReaL RLVRWorkflow layout rules; prompts from transformers {__import__('transformers').__version__}", "cases": out}, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
