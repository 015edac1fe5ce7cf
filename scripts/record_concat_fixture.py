"""Record the `concat_padded` parity fixture by running AReaL's own `concat_padded_tensors`
(areal/utils/data.py, loaded by scripts/areal_concat.py) on fixed input dicts.

Writes tests/fixtures/tensor/concat_padded_areal.safetensors:
    in/{case}/{dict_index}/{key}   the input tensors
    out/{case}/{key}               AReaL's output
    metadata (strings): cases = JSON [{"name", "dicts", "keys" (dict[0] order), "pad_value"}],
                        areal_version, torch_version, areal_source, generator

Inputs are deterministic (seeded numpy RNG), so re-running rewrites the same file.

    python3 -m venv ~/.cache/rollbox/areal-venv
    ~/.cache/rollbox/areal-venv/bin/pip install torch numpy safetensors einops colorlog numba requests
    ~/.cache/rollbox/areal-venv/bin/pip install --no-deps areal==1.0.4 torchdata
    ~/.cache/rollbox/areal-venv/bin/python scripts/record_concat_fixture.py
"""

import json
import os
import struct
import sys

import numpy as np
import torch
from safetensors.torch import load_file, save_file

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import areal_concat  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "tests", "fixtures", "tensor", "concat_padded_areal.safetensors")
VOCAB = 151_936


def t(array, dtype):
    return torch.from_numpy(np.ascontiguousarray(array)).to(dtype).clone()


def rlvr_dict(rng, length, prompt, version, reward, truncated):
    """One RLVRWorkflow-style trajectory: `prompt` prompt tokens then completion tokens."""
    completion = length - prompt
    return {
        "input_ids": t(rng.integers(0, VOCAB, (1, length)), torch.int32),
        "loss_mask": t([[0] * prompt + [1] * completion], torch.int32),
        "logprobs": t([[0.0] * prompt + list(-rng.exponential(1.0, completion))], torch.float32),
        "versions": t([[-1] * prompt + [version + (j * 2 >= completion) for j in range(completion)]], torch.int32),
        "attention_mask": torch.ones(1, length, dtype=torch.bool),
        "rewards": t([reward], torch.float32),
        "is_truncated": t([truncated], torch.bool),
    }


def rlvr_case(seed, shapes):
    """shapes: (length, prompt) per dict."""
    rng = np.random.default_rng(seed)
    return [
        rlvr_dict(rng, length, prompt, version=3 + i, reward=float(i % 2), truncated=i % 3 == 2)
        for i, (length, prompt) in enumerate(shapes)
    ]


def multi_row_case(seed):
    """Dicts with 1–3 rows, each row with its own length and trailing in-dict padding."""
    rng = np.random.default_rng(seed)
    dicts = []
    for batch, width in [(2, 12), (1, 7), (3, 20), (2, 3)]:
        rows = {k: [] for k in ["input_ids", "loss_mask", "logprobs", "versions", "turn_ids", "attention_mask"]}
        for _ in range(batch):
            n = int(rng.integers(1, width + 1))  # real tokens in this row
            prompt = int(rng.integers(0, n + 1))
            pad = width - n
            turns = np.concatenate([np.zeros(prompt), 1 + np.arange(n - prompt) // 3, np.zeros(pad)])
            rows["input_ids"].append(list(rng.integers(0, VOCAB, n)) + [0] * pad)
            rows["loss_mask"].append([0] * prompt + [1] * (n - prompt) + [0] * pad)
            rows["logprobs"].append([0.0] * prompt + list(-rng.exponential(1.0, n - prompt)) + [0.0] * pad)
            rows["versions"].append([-1] * prompt + [5] * (n - prompt) + [-1] * pad)
            rows["turn_ids"].append(turns)
            rows["attention_mask"].append([True] * n + [False] * pad)
        dicts.append(
            {
                "input_ids": t(rows["input_ids"], torch.int32),
                "loss_mask": t(rows["loss_mask"], torch.int32),
                "logprobs": t(rows["logprobs"], torch.float32),
                "versions": t(rows["versions"], torch.int32),
                "turn_ids": t(rows["turn_ids"], torch.int32),
                "attention_mask": t(rows["attention_mask"], torch.bool),
                "rewards": t(rng.normal(size=batch), torch.float32),
                "is_truncated": t(rng.integers(0, 2, batch), torch.bool),
            }
        )
    return dicts


def rank3_case(seed):
    """Rank-3 tensor with both trailing dims varying (max H and max W from different dicts)."""
    rng = np.random.default_rng(seed)
    dicts = []
    for (h, w), length in zip([(3, 5), (6, 2), (4, 4), (1, 1)], [7, 3, 11, 1]):
        dicts.append(
            {
                "pixel_values": t(rng.normal(size=(1, h, w)), torch.float32),
                "attention_mask": torch.ones(1, length, dtype=torch.bool),
                "ids64": t((1 << 40) + rng.integers(0, 1 << 20, (1, length)), torch.int64),  # beyond i32
                "bytes": t(rng.integers(1, 256, (1, length)), torch.uint8),
                "half": t(rng.normal(size=(1, length)), torch.bfloat16),
                "score": t(rng.normal(size=1), torch.float32),
            }
        )
    return dicts


def bf16_pad_case(seed, lengths):
    rng = np.random.default_rng(seed)
    return [
        {
            "attention_mask": torch.ones(1, n, dtype=torch.bool),
            "half": t(rng.normal(size=(1, n)), torch.bfloat16),
            "vals": t(rng.normal(size=(1, n)), torch.float32),
        }
        for n in lengths
    ]


def pad_cast_case(seed):
    """Non-integral negative pad value: ints truncate toward zero, a bool key other than
    attention_mask pads True, bf16/f32 round."""
    rng = np.random.default_rng(seed)
    return [
        {
            "ids": t(rng.integers(1, 1000, (1, n)), torch.int32),
            "ids64": t(rng.integers(1, 1000, (1, n)), torch.int64),
            "flag": torch.zeros(1, n, dtype=torch.bool),
            "half": t(rng.normal(size=(1, n)), torch.bfloat16),
            "vals": t(rng.normal(size=(1, n)), torch.float32),
        }
        for n in [4, 1, 6]
    ]


# name, pad_value, dicts. Cases f and g go beyond the basic layout: they pin down how the pad
# value is converted per dtype.
CASES = [
    ("rlvr", 0.0, rlvr_case(1, [(17, 6), (1, 0), (40, 12), (9, 3), (23, 8), (5, 5)])),
    ("multi_row", 0.0, multi_row_case(2)),
    ("pad_minus_one", -1.0, rlvr_case(3, [(8, 3), (30, 10), (1, 1), (14, 5), (6, 2)])),
    ("rank3_dtypes", 0.0, rank3_case(4)),
    ("bf16_pad", 0.1, bf16_pad_case(5, [3, 9, 1, 6])),
    ("pad_cast", -1.7, pad_cast_case(6)),
    # 1 + 2^-7 + 2^-8 - 2^-24: torch converts the double to f32 first (rounds to the bf16 tie
    # 1 + 2^-7 + 2^-8), then to bf16 (ties to even -> 1 + 2^-6 = 1.015625). A direct f64 -> bf16
    # conversion gives 1.0078125.
    ("bf16_double_round", 1 + 2**-7 + 2**-8 - 2**-24, bf16_pad_case(7, [2, 5, 3])),
]


def sort_metadata(path):
    """save_file writes the metadata in hash order; rewrite the header with it sorted so that
    re-running gives a byte-identical file (same header length, data untouched)."""
    with open(path, "r+b") as f:
        (size,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(size))
        header["__metadata__"] = dict(sorted(header["__metadata__"].items()))
        text = json.dumps(header, separators=(",", ":")).encode()
        assert len(text) <= size
        f.seek(8)
        f.write(text.ljust(size, b" "))


def main():
    concat_padded_tensors, info = areal_concat.load()
    tensors, meta_cases = {}, []
    for name, pad_value, dicts in CASES:
        assert len(dicts) >= 3
        keys = list(dicts[0])
        for i, d in enumerate(dicts):
            assert list(d) == keys
            for k, v in d.items():
                tensors[f"in/{name}/{i}/{k}"] = v
        out = concat_padded_tensors(dicts, pad_value=pad_value)
        assert list(out) == keys, (name, list(out))
        for k, v in out.items():
            tensors[f"out/{name}/{k}"] = v.contiguous()
        meta_cases.append({"name": name, "dicts": len(dicts), "keys": keys, "pad_value": pad_value})
        print(f"{name}: {len(dicts)} dicts, pad_value={pad_value!r}")
        for k in keys:
            shapes = " ".join("x".join(map(str, d[k].shape)) for d in dicts)
            print(f"  {k:15} {str(out[k].dtype):15} in [{shapes}] -> out {list(out[k].shape)}")

    metadata = {
        "cases": json.dumps(meta_cases),
        **info,
        "generator": "scripts/record_concat_fixture.py",
    }
    os.makedirs(os.path.dirname(OUT), exist_ok=True)
    save_file(tensors, OUT, metadata=metadata)
    sort_metadata(OUT)
    print(f"wrote {os.path.relpath(OUT, ROOT)}: {len(tensors)} tensors, {os.path.getsize(OUT)} bytes")
    print(f"areal {info['areal_version']}, torch {info['torch_version']}, {info['areal_source']}")

    # Sanity: the file read back matches a fresh AReaL call on the stored inputs.
    loaded = load_file(OUT)
    for case in meta_cases:
        name, keys = case["name"], case["keys"]
        dicts = [{k: loaded[f"in/{name}/{i}/{k}"] for k in keys} for i in range(case["dicts"])]
        fresh = concat_padded_tensors(dicts, pad_value=case["pad_value"])
        for k in keys:
            stored = loaded[f"out/{name}/{k}"]
            assert stored.dtype == fresh[k].dtype and torch.equal(stored, fresh[k]), (name, k)
    print(f"check: all {sum(len(c['keys']) for c in meta_cases)} out/ tensors equal a fresh AReaL call")


if __name__ == "__main__":
    main()
