"""AReaL's own WorkflowExecutor at 64 in flight: AReaL's RLVRWorkflow with
AsyncRewardWrapper(gsm8k_reward_fn) against rollbox's WasmWorkflow(rlvr.wasm) with the Rust math
reward, on the same GSM8K-like rows and the same instant stub engine (64 output tokens). Prints
episodes/s, CPU per episode (this process and its reward workers) and peak RSS, interleaving
the two (A B A B) in one run. Build the package in release first:

    (cd python && maturin develop --release)
    PYTHONPATH=python ~/.cache/rollbox/areal-venv/bin/python python/bench/areal_executor.py [ROWS]
"""

import asyncio
import os
import resource
import sys
import time
from pathlib import Path

import transformers.modeling_gguf_pytorch_utils as gguf_utils
from transformers import AutoTokenizer

from areal.api.cli_args import GenerationHyperparameters, InferenceEngineConfig
from areal.api.io_struct import ModelResponse
from areal.infra.workflow_executor import WorkflowExecutor
from areal.reward.gsm8k import gsm8k_reward_fn
from areal.workflow.rlvr import RLVRWorkflow

from rollbox.areal import WasmWorkflow

gguf_utils.is_torch_available = lambda: True
ROOT = Path(__file__).resolve().parents[2]
GUESTS = ROOT / "target/wasm-guests/wasm32-wasip2/guest"
MODELS = Path(os.environ.get("ROLLBOX_MODEL_DIR", Path.home() / ".cache/rollbox/models"))
GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"


class InstantEngine:
    """AReaL's engine contract with no inference: the same 64-token answer at once."""

    def __init__(self, output):
        self.output = output

    def get_version(self):
        return 0

    async def agenerate(self, req):
        await asyncio.sleep(0)
        n = len(self.output)
        return ModelResponse(input_tokens=list(req.input_ids), output_tokens=list(self.output),
                             output_logprobs=[-0.1] * n, output_versions=[0] * n, stop_reason="stop")


def cpu_seconds():
    s, c = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return s.ru_utime + s.ru_stime + c.ru_utime + c.ru_stime


def run(name, workflow, rows, engine):
    # No staleness limit: the warm-up batch must not use up the capacity of version 0.
    ex = WorkflowExecutor(InferenceEngineConfig(consumer_batch_size=len(rows), max_concurrent_rollouts=64,
                                                max_head_offpolicyness=10**6),
                          inference_engine=engine)
    ex.initialize(train_data_parallel_size=1)
    try:
        ex.rollout_batch(rows[:64], workflow)  # warm-up: worker pools, compiled components
        c0, t0 = cpu_seconds(), time.perf_counter()
        out = ex.rollout_batch(rows, workflow)
        wall, cpu = time.perf_counter() - t0, cpu_seconds() - c0
    finally:
        ex.destroy()
    assert len(out) == len(rows)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rewards = sum(float(t["rewards"].sum()) for t in out) / len(out)
    print(f"{name:<44} {len(rows) / wall:8.0f} episodes/s  CPU {cpu / len(rows) * 1e3:6.2f} ms/episode  "
          f"peak RSS {rss:5.0f} MiB (this process)  mean reward {rewards:.2f}", flush=True)
    return len(rows) / wall


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 1024
    tok = AutoTokenizer.from_pretrained(MODELS, gguf_file=GGUF)
    text = "Natalia sold 48 clips in April and half as many in May, 24, so 48 + 24 = 72. " * 3
    output = tok.encode(text, add_special_tokens=False)[:60] + tok.encode("\\boxed{72}<|im_end|>", add_special_tokens=False)
    output = output[-64:]
    rows = [{"messages": [{"role": "user", "content": f"Question {i}: Natalia sold 48 clips in April and half as many in May. How many in total?"}],
             "answer": "Natalia sold 48+24 = 72 clips.\n#### 72"} for i in range(n)]
    areal_wf = RLVRWorkflow(reward_fn=gsm8k_reward_fn, gconfig=GenerationHyperparameters(max_new_tokens=64),
                            tokenizer=tok, enable_thinking=False)
    wasm_wf = WasmWorkflow(str(GUESTS / "rollbox_workflow_rlvr.wasm"),
                           rewards={"math": str(GUESTS / "rollbox_reward_math.wasm")},
                           tokenizer=str(MODELS / GGUF),
                           config={"reward": "math", "gconfig": {"max_new_tokens": 64}})
    engine = InstantEngine(output)
    print(f"AReaL 1.0.4 WorkflowExecutor.rollout_batch, {n} rows, 64 in flight, instant engine (64 tokens)")
    a, w = [], []
    for _ in range(2):
        a.append(run("AReaL RLVRWorkflow + AsyncRewardWrapper(gsm8k)", areal_wf, rows, engine))
        w.append(run("rollbox WasmWorkflow(rlvr.wasm) + Rust math", wasm_wf, rows, engine))
    print(f"ratio (best of each): {max(w) / max(a):.2f}x")


if __name__ == "__main__":
    main()
