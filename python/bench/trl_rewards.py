"""TRL reward-function time per GRPO step: `rollbox.trl.reward_func("math")` (the built-in
`math` reward, one sandbox per completion, all at once) against TRL's own
`trl.rewards.accuracy_reward` (math-verify in the training process) on the same batches of
GSM8K completions, interleaved A/B for `--rounds` rounds. TRL awaits an async reward on its
event-loop thread and calls a sync one inline, so each side is called as TRL calls it.

    PYTHONPATH=python ~/.cache/rollbox/trainers-venv-*/bin/python python/bench/trl_rewards.py
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests/fixtures/rewards/math_corpus.jsonl"


def batch(n: int, offset: int) -> tuple[list, list[str]]:
    rows = [json.loads(l) for l in open(CORPUS)]
    rows = [r for r in rows if r["part"] == "gsm8k"][offset : offset + n]
    completions = [[{"role": "assistant", "content": r["completion"]}] for r in rows]
    solutions = [r["answer"].split("####")[-1].strip() for r in rows]
    return completions, solutions


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--batch", type=int, default=64, help="completions per step")
    a = ap.parse_args()

    from trl.rewards import accuracy_reward

    from rollbox.trl import reward_func

    ours = reward_func("math")
    loop = asyncio.new_event_loop()  # TRL runs async rewards on a daemon thread's loop
    threading.Thread(target=loop.run_forever, daemon=True).start()

    def rollbox_step(c, s):
        prompts = [""] * len(c)
        return asyncio.run_coroutine_threadsafe(ours(prompts, c, None, solution=s), loop).result()

    def trl_step(c, s):
        return accuracy_reward(c, s)

    times = {"rollbox": [], "trl": []}
    agree = []
    first = {}
    for rnd in range(a.rounds):
        c, s = batch(a.batch, rnd * a.batch)
        order = [("rollbox", rollbox_step), ("trl", trl_step)]
        if rnd % 2:
            order.reverse()
        got = {}
        for name, fn in order:
            t = time.perf_counter()
            got[name] = fn(c, s)
            dt = time.perf_counter() - t
            if rnd == 0:
                first[name] = dt
            else:
                times[name].append(dt)
        agree.append(sum(x == y for x, y in zip(got["rollbox"], got["trl"])))
        print(f"round {rnd}: " + ", ".join(f"{k} {v[-1] * 1e3:.1f} ms" if v else f"{k} {first[k] * 1e3:.1f} ms (first)" for k, v in times.items()), flush=True)
    for name, ts in times.items():
        print(f"{name:8s} {a.batch} completions per step: median {statistics.median(ts) * 1e3:.1f} ms "
              f"(min {min(ts) * 1e3:.1f}, max {max(ts) * 1e3:.1f}) over {len(ts)} steps; first step {first[name] * 1e3:.1f} ms")
    print(f"scores agree on {sum(agree)} of {a.batch * a.rounds}")


if __name__ == "__main__":
    main()
