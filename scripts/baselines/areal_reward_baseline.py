"""AReaL's own reward path as the baseline of `rollbox-bench rewards`: AReaL 1.0.4's
`gsm8k_reward_fn` (math-verify) called through AReaL's `AsyncRewardWrapper` (its shared
ProcessPoolExecutor, default worker count, 15 s timeout), on the same four cases as
`scripts/baselines/reward_baseline.py`. Prints p50/p99 per call.

Needs the AReaL venv of `scripts/fixtures/record_concat_fixture.py` plus math-verify:
    ~/.cache/rollbox/areal-venv/bin/pip install 'math-verify[antlr4_13_2]==0.9.0'
Usage: python scripts/baselines/areal_reward_baseline.py [ITERATIONS]"""

import asyncio
import importlib.util
import os
import statistics
import sys
import time
import types

# AReaL's package `__init__`s import its whole training stack (ray, transformers, ...); the two
# modules used here need only math-verify and colorlog, so load them without those `__init__`s.
_root = os.path.dirname(importlib.util.find_spec("areal").origin)
for _name, _dir in [("areal", _root), ("areal.utils", os.path.join(_root, "utils")), ("areal.api", os.path.join(_root, "api"))]:
    _pkg = types.ModuleType(_name)
    _pkg.__path__ = [_dir]
    sys.modules[_name] = _pkg

from areal.api.reward_api import AsyncRewardWrapper  # noqa: E402
from areal.reward.gsm8k import gsm8k_reward_fn  # noqa: E402

CASES = [
    ("Natalia sold 48/2 = 24 clips in May, 48 + 24 = 72 in total. \\boxed{72}", "Natalia sold 48+24 = 72 clips.\n#### 72"),
    ("Weng earns 12/60 = $0.2 per minute, so 0.2 * 50 = 10. The answer is 10.", "#### 10"),
    ("She needs 100 - 50 - 30 = 20 more. #### 5", "#### 5"),
    ("\\boxed{\\frac{3}{4}}", "0.75"),
]


async def main(n: int) -> None:
    wrapper = AsyncRewardWrapper(gsm8k_reward_fn)
    times = []
    for i in range(n + 20):
        c, a = CASES[i % len(CASES)]
        t = time.perf_counter()
        await wrapper("prompt", c, list(range(43)), list(range(64)), answer=a)
        if i >= 20:
            times.append(time.perf_counter() - t)
    times.sort()
    p50 = statistics.median(times)
    p99 = times[int(0.99 * (len(times) - 1))]
    print(
        f"AReaL 1.0.4 AsyncRewardWrapper(gsm8k_reward_fn), math-verify, {wrapper.max_workers} worker(s): "
        f"n={n} p50={p50 * 1e3:.2f} ms p99={p99 * 1e3:.2f} ms"
    )


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
