"""verl's `naive` reward manager over 512 GSM8K completions: `pkg://rollbox.verl` (the built-in
`math` reward in a sandbox per call) against verl's own `math_verify.compute_score` (math-verify
in verl's 4-process spawn pool) behind the same manager. Each side runs in a fresh process
(so the first call pays what a new reward worker pays), A/B interleaved for `--rounds` rounds;
prints the first call's latency, completions/s over all 512 at once on verl's event loop, p50
and p99 per call, and how often the two scores agree.

    PYTHONPATH=python ~/.cache/rollbox/trainers-venv-*/bin/python python/bench/verl_rewards.py
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests/fixtures/rewards/math_corpus.jsonl"
MODEL = Path(os.environ.get("ROLLBOX_MODEL_DIR", Path.home() / ".cache/rollbox/models"))

# verl's own math-verify scorer behind verl's custom-reward keyword interface, as a verl user
# writes it (verl's math_verify.compute_score takes (model_output, ground_truth)).
VERL_WRAPPER = '''
from verl.utils.reward_score import math_verify

def compute_score(data_source, solution_str, ground_truth, extra_info=None, **kwargs):
    return math_verify.compute_score(solution_str, ground_truth)
'''


def rows(n: int) -> list[dict]:
    out = []
    with open(CORPUS) as f:
        for line in f:
            r = json.loads(line)
            if r["part"] == "gsm8k":
                out.append({"completion": r["completion"], "ground_truth": r["answer"].split("####")[-1].strip()})
            if len(out) == n:
                break
    return out


def child(side: str, n: int, out: str) -> None:
    """One side in this process: load the manager, time the first call, then all n at once;
    the figures go to the file `out`."""
    import asyncio

    import torch
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer

    import verl
    from verl import DataProto
    from verl.trainer.ppo.reward import load_reward_manager

    tok = AutoTokenizer.from_pretrained(MODEL, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")
    cfg = OmegaConf.load(Path(verl.__file__).parent / "trainer/config/_generated_ppo_trainer.yaml")
    if side == "rollbox":
        fn = {"path": "pkg://rollbox.verl", "name": "compute_score", "reward_kwargs": {"reward": "math"}}
    else:
        path = Path(os.environ["VERL_WRAPPER"])
        fn = {"path": str(path), "name": "compute_score", "reward_kwargs": {}}
    cfg.reward.custom_reward_function = OmegaConf.create(fn)
    samples = []
    for r in rows(n):
        ids = tok.encode(r["completion"])
        samples.append(
            DataProto.from_dict(
                tensors={
                    "prompts": torch.tensor([[1]]),
                    "responses": torch.tensor([ids]),
                    "attention_mask": torch.tensor([[1] * (1 + len(ids))]),
                },
                non_tensors={
                    "data_source": ["openai/gsm8k"],
                    "reward_model": [{"ground_truth": r["ground_truth"]}],
                    "extra_info": [{}],
                },
            )
        )
    start = time.perf_counter()
    rm = load_reward_manager(cfg, tok)
    first = rm.loop.run_until_complete(rm.run_single(samples[0]))
    first_s = time.perf_counter() - start

    async def timed(s):
        t = time.perf_counter()
        out = await rm.run_single(s)
        return time.perf_counter() - t, out["reward_score"]

    async def all_of_them():
        return await asyncio.gather(*(timed(s) for s in samples))

    start = time.perf_counter()
    results = rm.loop.run_until_complete(all_of_them())
    wall = time.perf_counter() - start
    lat = sorted(r[0] for r in results)
    Path(out).write_text(
        json.dumps(
            {
                "side": side,
                "first_call_s": first_s,
                "first_score": first["reward_score"],
                "per_s": len(samples) / wall,
                "p50_ms": lat[len(lat) // 2] * 1e3,
                "p99_ms": lat[int(len(lat) * 0.99) - 1] * 1e3,
                "scores": [float(r[1]) for r in results],
            }
        )
    )
    os._exit(0)  # verl's spawn pool is killed with this process group by the parent


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--n", type=int, default=512)
    ap.add_argument("--child", choices=["rollbox", "verl"])
    ap.add_argument("--out")
    a = ap.parse_args()
    if a.child:
        child(a.child, a.n, a.out)
        return
    # The wrapper and each child's figures live in a private folder (mkdtemp, mode 0700): a
    # name another user pre-placed in /tmp cannot stand in for them.
    private = tempfile.TemporaryDirectory(prefix="verl-rewards-")
    wrapper = Path(private.name) / "verl_math_verify.py"
    wrapper.write_text(VERL_WRAPPER)
    env = {**os.environ, "VERL_WRAPPER": str(wrapper)}
    results = {"rollbox": [], "verl": []}
    try:
        for rnd in range(a.rounds):
            for side in ("rollbox", "verl") if rnd % 2 == 0 else ("verl", "rollbox"):
                out = wrapper.with_suffix(f".{side}.json")
                # Its own process group: verl's math-verify pool (spawned workers) dies with it.
                p = subprocess.Popen(
                    [sys.executable, __file__, "--child", side, "--n", str(a.n), "--out", str(out)],
                    env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    start_new_session=True,
                )
                code = p.wait()
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                if code != 0:
                    raise SystemExit(f"the {side} run failed ({code}); rerun it with --child {side}")
                r = json.loads(out.read_text())
                out.unlink()
                results[side].append(r)
                print(
                    f"round {rnd} {side:8s} first call {r['first_call_s']:.2f} s, "
                    f"{r['per_s']:.0f} completions/s, p50 {r['p50_ms']:.1f} ms, p99 {r['p99_ms']:.1f} ms",
                    flush=True,
                )
    finally:
        private.cleanup()
    a_scores, b_scores = results["rollbox"][0]["scores"], results["verl"][0]["scores"]
    agree = sum(x == y for x, y in zip(a_scores, b_scores))
    print(f"scores agree on {agree} of {len(a_scores)} completions "
          f"(rollbox mean {sum(a_scores) / len(a_scores):.3f}, verl math_verify mean {sum(b_scores) / len(b_scores):.3f})")
    for side, rs in results.items():
        best = max(rs, key=lambda r: r["per_s"])
        print(f"{side:8s} best of {len(rs)}: {best['per_s']:.0f} completions/s, p99 {best['p99_ms']:.1f} ms; "
              f"first call {min(r['first_call_s'] for r in rs):.2f}-{max(r['first_call_s'] for r in rs):.2f} s")


if __name__ == "__main__":
    main()
