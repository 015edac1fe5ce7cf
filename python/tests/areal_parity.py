"""AReaL's own RLVRWorkflow and rollbox's WasmWorkflow(rlvr.wasm) on the same rows and the
same stub engine (AReaL's `agenerate` contract, answers recorded in the conformance suite):
the torch tensors must be identical on every key. Needs the AReaL 1.0.4 venv and the built
package on the path:

    PYTHONPATH=python ~/.cache/rollbox/areal-venv/bin/python python/tests/areal_parity.py
"""

import asyncio
import json
import os
import sys
from pathlib import Path

import torch
import transformers.modeling_gguf_pytorch_utils as gguf_utils
from transformers import AutoTokenizer

from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelResponse
from areal.reward.gsm8k import gsm8k_reward_fn
from areal.workflow.rlvr import RLVRWorkflow

from rollbox.areal import WasmWorkflow

gguf_utils.is_torch_available = lambda: True
ROOT = Path(__file__).resolve().parents[2]
GUESTS = ROOT / "target/wasm-guests/wasm32-wasip2/guest"
MODELS = Path(os.environ.get("ROLLBOX_MODEL_DIR", Path.home() / ".cache/rollbox/models"))
FIXTURE = json.loads((ROOT / "tests/conformance/rlvr.json").read_text())


class StubEngine:
    def __init__(self, records):
        self.records = list(records)

    async def agenerate(self, req):
        r = self.records.pop(0)
        assert list(req.input_ids) == r["input_ids"]
        return ModelResponse(input_tokens=list(req.input_ids), output_tokens=r["output_tokens"],
                             output_logprobs=r["output_logprobs"], output_versions=r["output_versions"],
                             stop_reason=r["stop_reason"])


async def main():
    tok = AutoTokenizer.from_pretrained(MODELS, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    max_new = FIXTURE["config"]["gconfig"]["max_new_tokens"]
    areal_wf = RLVRWorkflow(reward_fn=gsm8k_reward_fn, gconfig=GenerationHyperparameters(max_new_tokens=max_new),
                            tokenizer=tok, enable_thinking=False)
    wasm_wf = WasmWorkflow(str(GUESTS / "rollbox_workflow_rlvr.wasm"),
                           rewards={"math": str(GUESTS / "rollbox_reward_math.wasm")},
                           tokenizer=str(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"),
                           config=FIXTURE["config"])
    n = 0
    for case in FIXTURE["cases"]:
        records = [s["record"] for s in case["samples"]]
        a_engine, w_engine = StubEngine(records), StubEngine(records)
        for _ in records:
            a = await areal_wf.arun_episode(a_engine, case["row"])
            w = await wasm_wf.arun_episode(w_engine, case["row"])
            extra = set(w) - set(a)
            assert extra <= {"is_truncated"}, extra
            for key, t in a.items():
                assert w[key].dtype == t.dtype and w[key].shape == t.shape, (key, w[key].dtype, t.dtype)
                assert torch.equal(w[key], t), (case["name"], key)
            n += 1
    print(f"{n} episodes: WasmWorkflow(rlvr.wasm) == AReaL RLVRWorkflow on every AReaL key")


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
