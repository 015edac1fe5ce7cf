"""AReaL's own RLVRWorkflow and rollbox's WasmWorkflow(rlvr.wasm) on the same rows and the
same stub engine (AReaL's `agenerate` contract, answers recorded in the conformance suite):
the torch tensors must be identical on every key, episode by episode, and again through
AReaL's own `WorkflowExecutor.rollout_batch` (its async runner thread and event loop, its
staleness manager) with the engine's policy version changed between batches. Needs the AReaL
1.0.4 venv and the built package on the path:

    PYTHONPATH=python ~/.cache/rollbox/areal-venv/bin/python python/tests/areal_parity.py
"""

import asyncio
import json
import os
import sys
import time
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
    """AReaL's engine contract: `agenerate` answers each prompt with its recorded responses in
    turn; `get_version` for the staleness manager; `version` (when set) restamps the tokens."""

    def __init__(self, records, version=None, cycle=False):
        self.answers = {}
        for r in records:
            self.answers.setdefault(tuple(r["input_ids"]), []).append(r)
        self.version = version
        self.cycle = cycle
        self.paused = False
        self.calls = 0

    def get_version(self):
        return self.version or 0

    async def agenerate(self, req):
        # A paused engine holds requests until it resumes, as AReaL's does during a weight
        # update; tokens carry the version current when they are produced.
        while self.paused:
            await asyncio.sleep(0.001)
        if self.cycle:
            await asyncio.sleep(0.002)
        self.calls += 1
        queue = self.answers[tuple(req.input_ids)]
        r = queue.pop(0)
        if self.cycle:
            queue.append(r)
        versions = r["output_versions"] if self.version is None else [self.version] * len(r["output_tokens"])
        return ModelResponse(input_tokens=list(req.input_ids), output_tokens=r["output_tokens"],
                             output_logprobs=r["output_logprobs"], output_versions=versions,
                             stop_reason=r["stop_reason"])


def executor_batches(areal_wf, wasm_wf):
    """Both workflows through AReaL's WorkflowExecutor.rollout_batch, versions 3 then 5."""
    from areal.api.cli_args import InferenceEngineConfig
    from areal.infra.workflow_executor import WorkflowExecutor

    rows = [case["row"] for case in FIXTURE["cases"] for _ in case["samples"]]
    records = [s["record"] for case in FIXTURE["cases"] for s in case["samples"]]

    def canon(trajs):
        # The executor returns results in completion order, shuffled: compare as multisets.
        out = []
        for t in trajs:
            key = tuple(t["input_ids"].flatten().tolist()) + tuple(t["versions"].flatten().tolist())
            out.append((key, {k: v for k, v in t.items() if k != "is_truncated"}))
        return sorted(out, key=lambda kv: kv[0])

    n = 0
    for version in (3, 5):
        got = {}
        for name, wf in (("areal", areal_wf), ("wasm", wasm_wf)):
            engine = StubEngine(records, version=version)
            ex = WorkflowExecutor(InferenceEngineConfig(consumer_batch_size=len(rows), max_concurrent_rollouts=8),
                                  inference_engine=engine)
            ex.initialize(train_data_parallel_size=1)
            try:
                got[name] = canon(ex.rollout_batch(rows, wf))
            finally:
                ex.destroy()
        assert len(got["areal"]) == len(got["wasm"]) == len(rows)
        for (ka, ta), (kw, tw) in zip(got["areal"], got["wasm"]):
            assert ka == kw
            assert ta.keys() == tw.keys(), (ta.keys(), tw.keys())
            for key in ta:
                assert ta[key].dtype == tw[key].dtype and torch.equal(ta[key], tw[key]), key
            out = tw["versions"][tw["loss_mask"] == 1]
            assert bool((out == version).all()), "the engine's version stamps every output token"
            n += 1
    return n


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
    return areal_wf, wasm_wf


def single_controller_kwargs():
    """As AReaL's single-controller mode builds it on a worker: the import string plus
    serialisable kwargs, with the gconfig of AReaL's own GenerationHyperparameters."""
    import dataclasses

    from areal.utils.dynamic_import import import_from_string

    gconfig = dataclasses.asdict(GenerationHyperparameters(max_new_tokens=24, temperature=0.7))
    kwargs = {
        "workflow": str(GUESTS / "rollbox_workflow_rlvr.wasm"),
        "rewards": {"math": str(GUESTS / "rollbox_reward_math.wasm")},
        "tokenizer": str(MODELS / "SmolLM2-135M-Instruct.Q4_1.gguf"),
        "config": {"reward": "math", "gconfig": gconfig, "enable_thinking": False},
    }
    json.dumps(kwargs)  # what the controller sends over RPC
    wf = import_from_string("rollbox.areal.WasmWorkflow")(**kwargs)
    case = FIXTURE["cases"][0]
    out = asyncio.run(wf.arun_episode(StubEngine([case["samples"][0]["record"]]), case["row"]))
    assert float(out["rewards"][0]) == case["samples"][0]["reward"]
    print("rollbox.areal.WasmWorkflow built from an import string and JSON kwargs: ran")


def pause_and_resume(areal_wf, wasm_wf):
    """The engine pauses in the middle of a batch, its version moves 3 -> 9, it resumes: every
    trajectory carries one version on all its output tokens, both versions occur, for both
    workflows, through AReaL's WorkflowExecutor."""
    import threading

    from areal.api.cli_args import InferenceEngineConfig
    from areal.infra.workflow_executor import WorkflowExecutor

    rows = [case["row"] for case in FIXTURE["cases"] for _ in case["samples"]] * 8
    records = [s["record"] for case in FIXTURE["cases"] for s in case["samples"]]
    for name, wf in (("areal", areal_wf), ("wasm", wasm_wf)):
        engine = StubEngine(records, version=3, cycle=True)
        ex = WorkflowExecutor(InferenceEngineConfig(consumer_batch_size=len(rows), max_concurrent_rollouts=4,
                                                    max_head_offpolicyness=10**6),
                              inference_engine=engine)
        ex.initialize(train_data_parallel_size=1)
        out = []
        try:
            t = threading.Thread(target=lambda: out.extend(ex.rollout_batch(rows, wf)))
            t.start()
            while engine.calls < len(rows) // 4:
                time.sleep(0.001)
            engine.paused = True
            time.sleep(0.2)  # requests arriving now wait
            engine.version = 9
            engine.paused = False
            t.join(120)
        finally:
            ex.destroy()
        assert len(out) == len(rows), (name, len(out))
        seen = set()
        for traj in out:
            v = set(traj["versions"][traj["loss_mask"] == 1].tolist())
            assert len(v) == 1, (name, v)
            seen |= v
        assert seen == {3, 9}, (name, seen)
    return len(rows)


async def vision():
    """AReaL's VisionRLVRWorkflow and WasmWorkflow(vision-rlvr.wasm) on the image rows of
    `tests/fixtures/vision/rlvr.json` whose prompt is rendered text (AReaL's layout), with
    transformers' Qwen2VLProcessor on the embedded model's tokenizer plus the vision tokens
    (saved as tokenizer.json for rollbox): identical tensors, `multi_modal_input` included."""
    import base64
    import io
    import tempfile

    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
    from transformers.models.qwen2_vl.image_processing_qwen2_vl_fast import Qwen2VLImageProcessorFast
    from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor
    from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

    from areal.workflow.vision_rlvr import VisionRLVRWorkflow

    fx = json.loads((ROOT / "tests/fixtures/vision/rlvr.json").read_text())
    tok = AutoTokenizer.from_pretrained(MODELS, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    tok.add_bos_token = False  # as the fixture's recording: SmolLM2's tokenizer adds no bos
    tok.add_special_tokens({"additional_special_tokens": fx["added_special_tokens"]})
    tok_dir = tempfile.mkdtemp()
    tok.save_pretrained(tok_dir)
    images = {"torchvision": Qwen2VLImageProcessorFast, "pil": Qwen2VLImageProcessor}
    n = 0
    for case in fx["cases"]:
        if not isinstance(case["row"].get("messages"), str):
            continue
        backend = case["config"].get("processor", {}).get("backend", "torchvision")
        processor = Qwen2VLProcessor(image_processor=images[backend](), tokenizer=tok,
                                     video_processor=Qwen2VLVideoProcessor(), chat_template=tok.chat_template)
        gconfig = GenerationHyperparameters(max_new_tokens=fx["max_new_tokens"])
        areal_wf = VisionRLVRWorkflow(reward_fn=gsm8k_reward_fn, gconfig=gconfig, tokenizer=tok,
                                      processor=processor, enable_thinking=False)
        config = {"reward": "math", "gconfig": {"max_new_tokens": fx["max_new_tokens"]}, **case["config"]}
        wasm_wf = WasmWorkflow(str(GUESTS / "rollbox_workflow_vision_rlvr.wasm"),
                               rewards={"math": str(GUESTS / "rollbox_reward_math.wasm")},
                               tokenizer=tok_dir, config=config)
        record = {**case["response"], "input_ids": case["request"]["input_ids"]}
        row = case["row"]
        pil = [Image.open(io.BytesIO(base64.b64decode(b))) for b in row["images"]]
        a = await areal_wf.arun_episode(StubEngine([record]), {**row, "images": pil})
        w = await wasm_wf.arun_episode(StubEngine([record]), row)
        assert set(w) - set(a) <= {"is_truncated"}, set(w) ^ set(a)
        for key, t in a.items():
            if key == "multi_modal_input":
                assert len(w[key]) == len(t) == 1 and w[key][0].keys() == t[0].keys(), key
                for k, v in t[0].items():
                    assert w[key][0][k].dtype == v.dtype and torch.equal(w[key][0][k], v), (case["name"], k)
                continue
            assert w[key].dtype == t.dtype and w[key].shape == t.shape, (key, w[key].dtype, t.dtype)
            assert torch.equal(w[key], t), (case["name"], key)
        n += 1
    assert n >= 3, n
    print(f"{n} image rows: WasmWorkflow(vision-rlvr.wasm) == AReaL VisionRLVRWorkflow on every key")


if __name__ == "__main__":
    single_controller_kwargs()
    areal_wf, wasm_wf = asyncio.run(main())
    n = executor_batches(areal_wf, wasm_wf)
    print(f"{n} episodes through AReaL's WorkflowExecutor.rollout_batch (versions 3, 5): equal")
    n = pause_and_resume(areal_wf, wasm_wf)
    print(f"{n} episodes per workflow with the engine paused mid-batch and moved 3 -> 9: "
          "one version per trajectory, both versions seen")
    asyncio.run(vision())
    sys.exit(0)
