"""AReaL-style reward call baseline: the same GSM8K scoring as the Python reward component,
called through a ProcessPoolExecutor with asyncio.wait_for, as AReaL's AsyncRewardWrapper does.
Prints p50/p99 per call. Usage: python3 scripts/baselines/reward_baseline.py [ITERATIONS]"""

import asyncio
import os
import statistics
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from functools import partial

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "..", "workflows", "rewards", "gsm8k"))
import gsm8k  # noqa: E402

CASES = [
    ("Natalia sold 48/2 = 24 clips in May, 48 + 24 = 72 in total. \\boxed{72}", "Natalia sold 48+24 = 72 clips.\n#### 72"),
    ("Weng earns 12/60 = $0.2 per minute, so 0.2 * 50 = 10. The answer is 10.", "#### 10"),
    ("She needs 100 - 50 - 30 = 20 more. #### 5", "#### 5"),
    ("\\boxed{\\frac{3}{4}}", "0.75"),
]


def reward_fn(prompt, completions, prompt_ids, completion_ids, answer, **kwargs):
    return gsm8k.score(completions, answer)


async def main(n: int) -> None:
    loop = asyncio.get_running_loop()
    with ProcessPoolExecutor(max_workers=1) as pool:
        times = []
        for i in range(n + 20):
            c, a = CASES[i % len(CASES)]
            t = time.perf_counter()
            fut = loop.run_in_executor(pool, partial(reward_fn, "prompt", c, list(range(43)), list(range(64)), answer=a))
            await asyncio.wait_for(fut, 15)
            if i >= 20:
                times.append(time.perf_counter() - t)
    times.sort()
    p50 = statistics.median(times)
    p99 = times[int(0.99 * (len(times) - 1))]
    print(f"AReaL-style process-pool call (same scoring, CPython): n={n} p50={p50 * 1e6:.1f} µs p99={p99 * 1e6:.1f} µs")


if __name__ == "__main__":
    asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 2000))
