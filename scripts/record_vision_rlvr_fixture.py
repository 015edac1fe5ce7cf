"""Record what AReaL 1.0.4's own `VisionRLVRWorkflow` does with image rows, for
`tests/tests/vision_rlvr.rs`.

Run in AReaL's venv (it has transformers 5.3, torch, torchvision and Pillow):

    $(scripts/areal-venv.sh) scripts/record_vision_rlvr_fixture.py

No vision-language weights can be fetched here, so the model side is a stub engine (AReaL's
`agenerate` contract) and the tokenizer is the embedded model's (SmolLM2, read from its GGUF
file) with Qwen2-VL's three vision tokens added as special tokens (after the five infill tokens
transformers' GGUF loader adds; the fixture lists every added token in id order, so rollbox's
tokenizer gets the same ids). The processor is
transformers' own `Qwen2VLProcessor` on that tokenizer, with `Qwen2VLImageProcessorFast`
(AReaL's `use_fast=True`) or `Qwen2VLImageProcessor` (PIL), so the prompt expansion,
`mm_token_type_ids`, `pixel_values` and `image_grid_thw` are transformers' and the trajectory
is AReaL's workflow's.

For each case the fixture holds the row as rollbox reads it (images base64, the prompt as
AReaL's loaders render it or as chat messages), the request AReaL sent to the engine (ids and
`image_data`), the stub's answer, and AReaL's returned tensors (`pixel_values` as shape and
sha256 of its little-endian f32 bytes).
"""

import asyncio
import base64
import hashlib
import io
import json
import os
from pathlib import Path

import numpy as np
import transformers.modeling_gguf_pytorch_utils as gguf_utils
from PIL import Image
from transformers import AutoTokenizer
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
from transformers.models.qwen2_vl.image_processing_qwen2_vl_fast import Qwen2VLImageProcessorFast
from transformers.models.qwen2_vl.processing_qwen2_vl import Qwen2VLProcessor
from transformers.models.qwen2_vl.video_processing_qwen2_vl import Qwen2VLVideoProcessor

from areal.api.cli_args import GenerationHyperparameters
from areal.api.io_struct import ModelResponse
from areal.reward.gsm8k import gsm8k_reward_fn
from areal.workflow.vision_rlvr import VisionRLVRWorkflow

gguf_utils.is_torch_available = lambda: True
ROOT = Path(__file__).resolve().parents[1]
MODELS = Path(os.environ.get("ROLLBOX_MODEL_DIR", Path.home() / ".cache/rollbox/models"))
OUT = ROOT / "tests/fixtures/vision/rlvr.json"
VISION_TOKENS = ["<|vision_start|>", "<|image_pad|>", "<|vision_end|>"]
VISION = "<|vision_start|><|image_pad|><|vision_end|>"
MAX_NEW = 24


def noise(w, h, seed):
    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8))


def gradient(w, h):
    x = np.arange(w)[None, :].repeat(h, 0)
    y = np.arange(h)[:, None].repeat(w, 1)
    rgb = np.stack([x * 255 // max(w - 1, 1), y * 255 // max(h - 1, 1), (x + y) % 256], -1)
    return Image.fromarray(rgb.astype(np.uint8))


def png64(img):
    buf = io.BytesIO()
    img.save(buf, format="PNG")
    return base64.b64encode(buf.getvalue()).decode()


class StubEngine:
    """Answers each request with the scripted output; records what it was sent."""

    def __init__(self, output_tokens, stop_reason):
        self.output_tokens = output_tokens
        self.stop_reason = stop_reason
        self.requests = []

    def get_version(self):
        return 0

    async def agenerate(self, req):
        self.requests.append({"input_ids": list(req.input_ids), "image_data": list(req.image_data or [])})
        n = len(self.output_tokens)
        return ModelResponse(
            input_tokens=list(req.input_ids),
            output_tokens=list(self.output_tokens),
            output_logprobs=[-0.125 * (i + 1) for i in range(n)],
            output_versions=[7] * n,
            stop_reason=self.stop_reason,
        )


def tensor_json(t):
    a = t.detach().cpu().numpy()
    if a.dtype == np.float32 and a.ndim == 2 and a.shape[1] > 64:
        return {"dtype": str(a.dtype), "shape": list(a.shape),
                "sha256": hashlib.sha256(np.ascontiguousarray(a).astype("<f4").tobytes()).hexdigest(),
                "head": [float(x) for x in a.reshape(-1)[:8]]}
    return {"dtype": str(a.dtype), "shape": list(a.shape), "values": a.reshape(-1).tolist()}


async def main():
    tok = AutoTokenizer.from_pretrained(MODELS, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    # transformers reads this GGUF as a CodeLlama tokenizer that prepends `<|im_start|>` when the
    # processor tokenises with special tokens; SmolLM2's own tokenizer (and Qwen2-VL's) adds
    # nothing, and neither does rollbox's GGUF tokenizer.
    tok.add_bos_token = False
    tok.add_special_tokens({"additional_special_tokens": VISION_TOKENS})
    processors = {
        "torchvision": Qwen2VLProcessor(image_processor=Qwen2VLImageProcessorFast(), tokenizer=tok,
                                        video_processor=Qwen2VLVideoProcessor(), chat_template=tok.chat_template),
        "pil": Qwen2VLProcessor(image_processor=Qwen2VLImageProcessor(), tokenizer=tok,
                                video_processor=Qwen2VLVideoProcessor(), chat_template=tok.chat_template),
    }
    eos = tok.eos_token_id
    cat = noise(64, 48, 1)
    wide = gradient(120, 40)
    tall = noise(30, 90, 2)
    rgba = Image.fromarray(np.dstack([np.asarray(noise(56, 56, 3)), np.full((56, 56), 200, np.uint8)]), "RGBA")

    def rendered(text):
        return tok.apply_chat_template([{"role": "user", "content": text}], add_generation_prompt=True,
                                       tokenize=False)

    # (name, backend, images, rollbox row fields, AReaL's rendered prompt, completion, stop, answer, config)
    cases = [
        ("one_image_rendered_prompt", "torchvision", [cat],
         {"messages": rendered(f"{VISION}How many cats are there? Put the answer in \\boxed{{}}.")},
         rendered(f"{VISION}How many cats are there? Put the answer in \\boxed{{}}."),
         "There are \\boxed{3} cats.", "stop", "3", {}),
        ("two_images_truncated", "torchvision", [wide, tall],
         {"messages": rendered(f"Left: {VISION} Right: {VISION} Which is taller?")},
         rendered(f"Left: {VISION} Right: {VISION} Which is taller?"),
         "The right one is taller because its height is", "length", "right", {}),
        ("chat_messages_through_the_template", "torchvision", [rgba],
         {"messages": [{"role": "user", "content": f"{VISION}What is the area? Answer in \\boxed{{}}."}]},
         rendered(f"{VISION}What is the area? Answer in \\boxed{{}}."),
         "The area is \\boxed{12}.", "stop", "13", {}),
        ("geometry3k_placeholder", "torchvision", [cat],
         {"problem": "<image>Find x. Answer in \\boxed{}."},
         rendered(f"{VISION}Find x. Answer in \\boxed{{}}."),
         "x = \\boxed{5}", "stop", "5", {"image_placeholder": "<image>"}),
        ("pil_backend", "pil", [cat, wide],
         {"messages": rendered(f"{VISION}{VISION}Same picture? \\boxed{{yes}} or \\boxed{{no}}.")},
         rendered(f"{VISION}{VISION}Same picture? \\boxed{{yes}} or \\boxed{{no}}."),
         "\\boxed{no}", "stop", "no", {"processor": {"backend": "pil"}}),
    ]
    out = []
    for name, backend, images, fields, areal_prompt, completion, stop, answer, config in cases:
        wf = VisionRLVRWorkflow(reward_fn=gsm8k_reward_fn,
                                gconfig=GenerationHyperparameters(max_new_tokens=MAX_NEW),
                                tokenizer=tok, processor=processors[backend], enable_thinking=False)
        ids = tok.encode(completion, add_special_tokens=False)
        if stop == "stop":
            ids = ids + [eos]
        engine = StubEngine(ids, stop)
        b64 = [png64(im) for im in images]
        # AReaL's row: PIL images (decoded from the same PNG bytes) and the rendered prompt.
        areal_images = [Image.open(io.BytesIO(base64.b64decode(b))) for b in b64]
        areal_row = {"images": areal_images, "messages": areal_prompt, "answer": answer}
        result = await wf.arun_episode(engine, areal_row)
        mm = result["multi_modal_input"][0]
        expected = {k: tensor_json(v) for k, v in result.items() if k != "multi_modal_input"}
        expected["multi_modal_input.pixel_values"] = tensor_json(mm["pixel_values"])
        expected["multi_modal_input.image_grid_thw"] = tensor_json(mm["image_grid_thw"])
        row = {"images": b64, "answer": answer, **fields}
        out.append({"name": name, "config": config, "row": row, "request": engine.requests[0],
                    "response": {"output_tokens": ids, "stop_reason": stop,
                                 "output_logprobs": [-0.125 * (i + 1) for i in range(len(ids))],
                                 "output_versions": [7] * len(ids)},
                    "expected": expected})
        print(name, {k: v["shape"] for k, v in expected.items()})
    fixture = {
        "source": "scripts/record_vision_rlvr_fixture.py: AReaL 1.0.4 VisionRLVRWorkflow with transformers "
                  f"{__import__('transformers').__version__} Qwen2VLProcessor on the SmolLM2 GGUF tokenizer "
                  "plus the added special tokens below; stub engine",
        # Every token past the GGUF vocabulary, in id order: transformers' GGUF loader makes a
        # CodeLlama tokenizer with five infill tokens of its own, then the vision tokens.
        "added_special_tokens": [str(tok.added_tokens_decoder[i]) for i in range(tok.vocab_size, len(tok))],
        "max_new_tokens": MAX_NEW,
        "cases": out,
    }
    OUT.write_text(json.dumps(fixture, indent=1) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


asyncio.run(main())
