"""`rollbox serve`'s OpenRLHF reward endpoint under load: `--clients` concurrent OpenRLHF
clients (its own `SingleTurnAgentExecutor._fetch_rewards_via_http`, one sample per request as
OpenRLHF sends them) against one `rollbox serve --reward math=math`, for `--seconds`; prints
requests/s and p50/p99 latency.

    PYTHONPATH=python ~/.cache/rollbox/trainers-venv-*/bin/python python/bench/openrlhf_reward.py \\
        --rollbox target/release/rollbox
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import time
from pathlib import Path

from openrlhf.utils.agent import SingleTurnAgentExecutor

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests/fixtures/rewards/math_corpus.jsonl"
PROMPT = "<|im_start|>user\nSolve the problem.<|im_end|>\n<|im_start|>assistant\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rollbox", default=str(ROOT / "target/release/rollbox"))
    ap.add_argument("--clients", type=int, default=64)
    ap.add_argument("--seconds", type=float, default=10.0)
    a = ap.parse_args()
    rows = [json.loads(l) for l in open(CORPUS)]
    rows = [r for r in rows if r["part"] == "gsm8k"][:512]
    proc = subprocess.Popen(
        [a.rollbox, "serve", "--listen", "127.0.0.1:0", "--reward", "math=math"],
        stdout=subprocess.PIPE, text=True,
    )
    try:
        url = proc.stdout.readline().strip().removeprefix("listening on ") + "/get_reward"
        executor = SingleTurnAgentExecutor(remote_rm_url=url)
        latencies: list[float] = []

        async def client(k: int, deadline: float):
            i = k
            while time.perf_counter() < deadline:
                r = rows[i % len(rows)]
                t = time.perf_counter()
                out = await executor._fetch_rewards_via_http(
                    [PROMPT + r["completion"]], [PROMPT], [r["answer"]]
                )
                latencies.append(time.perf_counter() - t)
                assert len(out[0]["rewards"]) == 1
                i += a.clients

        async def run():
            await executor._fetch_rewards_via_http([PROMPT + "1"], [PROMPT], ["1"])  # warm
            start = time.perf_counter()
            await asyncio.gather(*(client(k, start + a.seconds) for k in range(a.clients)))
            return time.perf_counter() - start

        wall = asyncio.run(run())
        lat = sorted(latencies)
        print(
            f"{len(lat)} requests from {a.clients} clients in {wall:.1f} s: {len(lat) / wall:.0f} requests/s, "
            f"p50 {lat[len(lat) // 2] * 1e3:.1f} ms, p99 {lat[int(len(lat) * 0.99) - 1] * 1e3:.1f} ms"
        )
    finally:
        proc.kill()
        proc.wait()


if __name__ == "__main__":
    main()
