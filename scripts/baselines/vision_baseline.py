"""Baseline for `rollbox-bench vision`: transformers' Qwen2-VL processors on the PNG files given,
in AReaL 1.0.4's venv. Each image is decoded from its bytes (PIL) and processed alone, as a
rollout worker does per row. Prints one JSON object: per processor, each call's seconds.
Usage: python scripts/baselines/vision_baseline.py THREADS FILE.png...
"""

import io
import json
import sys
import time

import torch
from PIL import Image
from transformers.models.qwen2_vl.image_processing_qwen2_vl import Qwen2VLImageProcessor
from transformers.models.qwen2_vl.image_processing_qwen2_vl_fast import Qwen2VLImageProcessorFast


def main(threads, paths):
    torch.set_num_threads(threads)
    data = [open(p, "rb").read() for p in paths]
    out = {}
    for name, proc in (("fast", Qwen2VLImageProcessorFast()), ("slow", Qwen2VLImageProcessor())):
        # One warm-up call (lazy imports, torch kernels).
        proc(images=[Image.open(io.BytesIO(data[0]))], return_tensors="pt")
        times = []
        for b in data:
            t = time.perf_counter()
            img = Image.open(io.BytesIO(b))
            proc(images=[img], return_tensors="pt")
            times.append(time.perf_counter() - t)
        out[name] = times
    print(json.dumps(out))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
