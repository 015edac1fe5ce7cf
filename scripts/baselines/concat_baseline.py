"""Baseline for the concat_padded benchmark: AReaL's own `concat_padded_tensors`
(areal/utils/data.py, loaded by scripts/baselines/areal_concat.py) on 512 RLVR-style dicts.

Dict i has length L_i = 100 + (i * 7919) % 1901 (100..2000; the Rust benchmark uses the same
formula) and 7 per-token keys [1, L_i] (input_ids i32, attention_mask bool, loss_mask i32,
logprobs f32, versions i32, turn_ids i32, prox_logprobs f32) plus rewards f32 [1] and
is_truncated bool [1]. 3 warmup + 20 timed calls; prints median/p90 and a JSON line last.
Also times a plain-torch equivalent (F.pad each to the max, then torch.cat) for comparison.

    OMP_NUM_THREADS=2 ~/.cache/rollbox/areal-venv/bin/python scripts/baselines/concat_baseline.py

ROLLBOX_TORCH_DEVICE=cuda puts the dicts on the GPU first and times with a synchronize after
each call (scripts/ci/gpu-check.sh).
(venv setup: see scripts/fixtures/record_concat_fixture.py)
"""

import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import areal_concat  # noqa: E402

DICTS, WARMUP, RUNS = 512, 3, 20


def length(i):
    return 100 + (i * 7919) % 1901


def make_dicts():
    rng = np.random.default_rng(0)
    dicts = []
    for i in range(DICTS):
        n = length(i)
        prompt = n // 4

        def i32(a):
            return torch.from_numpy(np.asarray(a, dtype=np.int32).reshape(1, n))

        def f32(a):
            return torch.from_numpy(np.asarray(a, dtype=np.float32).reshape(1, n))

        dicts.append(
            {
                "input_ids": i32(rng.integers(0, 151_936, n)),
                "attention_mask": torch.ones(1, n, dtype=torch.bool),
                "loss_mask": i32([0] * prompt + [1] * (n - prompt)),
                "logprobs": f32(-rng.exponential(1.0, n)),
                "versions": i32([-1] * prompt + [7] * (n - prompt)),
                "turn_ids": i32(np.arange(n) // 64),
                "prox_logprobs": f32(-rng.exponential(1.0, n)),
                "rewards": torch.tensor([float(i % 2)], dtype=torch.float32),
                "is_truncated": torch.tensor([i % 5 == 0]),
            }
        )
    return dicts


def plain_torch(dicts, pad_value=0.0):
    """Same result with plain torch: right-pad every [1, L] to the max L, then cat."""
    out = {}
    for key in dicts[0]:
        values = [d[key] for d in dicts]
        if values[0].ndim == 1:
            out[key] = torch.cat(values)
            continue
        width = max(v.shape[1] for v in values)
        pv = 0.0 if key == "attention_mask" else pad_value
        out[key] = torch.cat([F.pad(v, (0, width - v.shape[1]), value=pv) for v in values])
    return out


DEVICE = os.environ.get("ROLLBOX_TORCH_DEVICE", "cpu")


def sync():
    if DEVICE.startswith("cuda"):
        torch.cuda.synchronize()


def bench(fn, dicts):
    for _ in range(WARMUP):
        fn(dicts)
    sync()
    times = []
    for _ in range(RUNS):
        t = time.perf_counter()
        fn(dicts)
        sync()
        times.append((time.perf_counter() - t) * 1e3)
    times.sort()
    return float(np.median(times)), float(np.percentile(times, 90))


def main():
    concat_padded_tensors, info = areal_concat.load()
    dicts = [{k: v.to(DEVICE) for k, v in d.items()} for d in make_dicts()]
    lengths = [length(i) for i in range(DICTS)]
    ref, alt = concat_padded_tensors(dicts), plain_torch(dicts)
    assert list(ref) == list(alt) and all(torch.equal(ref[k], alt[k]) for k in ref)

    median, p90 = bench(concat_padded_tensors, dicts)
    t_median, t_p90 = bench(plain_torch, dicts)
    out_bytes = sum(v.numel() * v.element_size() for v in ref.values())
    print(f"areal {info['areal_version']}, torch {info['torch_version']}, threads {torch.get_num_threads()}, device {DEVICE}")
    print(f"{DICTS} dicts, L {min(lengths)}..{max(lengths)} (sum {sum(lengths)}), output {out_bytes / 2**20:.1f} MiB")
    print(f"AReaL concat_padded_tensors: median {median:.2f} ms, p90 {p90:.2f} ms ({RUNS} runs)")
    print(f"plain torch F.pad + cat:     median {t_median:.2f} ms, p90 {t_p90:.2f} ms")
    print(
        json.dumps(
            {
                "median_ms": round(median, 3),
                "p90_ms": round(p90, 3),
                "plain_torch_median_ms": round(t_median, 3),
                "plain_torch_p90_ms": round(t_p90, 3),
                "dicts": DICTS,
                "runs": RUNS,
                "warmup": WARMUP,
                "threads": torch.get_num_threads(),
                "areal_version": info["areal_version"],
                "torch_version": info["torch_version"],
            }
        )
    )


if __name__ == "__main__":
    main()
