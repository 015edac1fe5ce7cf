"""Tool sessions (issue 57): a stateful Python interpreter per trajectory, beside the ways agentic
RL runs model code today, in the same run, each measurement interleaved over `--rounds` rounds.

* session open p50/p99 (python-exec: one instance from its snapshot), and a fresh call;
* a call on a live session (`x += 1; x`), p50/p99, as Python sees it and inside the host;
* RSS per idle live session: the process's resident memory with `--sessions` sessions open
  (each ran one call), less before, over their number;
* calls/s with every open session calling at once (small snippets), and p50/p99 latency;
* the baselines, on the same snippet: `subprocess.run([python, "-c", code])` per call (what
  skyrl-gym's `PythonCodeExecutorToolGroup` does) from a thread pool, and a code-judge-style
  runner (a FastAPI app under uvicorn, a process per call, as rStar2-Agent's code-judge) called
  over HTTP by `--concurrency` clients at once. Neither keeps state between calls.

With `--repo` (the repo environment's `.wasm`): an episode's setup (`reset` with a 5-test
project) and one `run_tests` step, beside the same tests run by `python -m unittest` in a fresh
process over the same files written to a temporary folder.

A runtime holds at most a sixteenth of its instance slots in sessions (62 by default), so
`--sessions` is at most that here.

    PYTHONPATH=<release wheel> ~/.cache/rollbox/trainers-venv-*/bin/python \\
        python/bench/sessions.py --python-exec target/wasm-guests/python/python_exec_tool.wasm
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import rollbox

SNIPPET = "x += 1\nx"
BASELINE_SNIPPET = "x = 41\nx += 1\nprint(x)"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1048576


def ms(xs):
    return f"p50 {pct(xs, 50) * 1e3:.3f} ms, p99 {pct(xs, 99) * 1e3:.3f} ms"


class Rollbox:
    def __init__(self, python_exec: str, timeout: str):
        spec = {"path": python_exec, "timeout": timeout, "retries": 0, "memory": "256MiB"}
        self.c = rollbox.Components(tools={"python": spec})
        self.open_s: list[float] = []
        self.fresh_s: list[float] = []
        self.call_s: list[float] = []
        self.call_inside_s: list[float] = []
        self.burst_s: list[float] = []
        self.burst_rate: list[float] = []
        self.rss: list[float] = []

    async def opens(self, n):
        for _ in range(n):
            t = time.perf_counter()
            s = await self.c.open_session("python")
            self.open_s.append(time.perf_counter() - t)
            await s.close()
        for _ in range(n):
            t = time.perf_counter()
            r = await self.c.call_tool("python", {"code": "x = 1\nx"})
            self.fresh_s.append(time.perf_counter() - t)
            assert r["fault"] is None, r

    async def calls(self, n):
        s = await self.c.open_session("python")
        await s.call({"code": "x = 0"})
        for i in range(n):
            t = time.perf_counter()
            r = await s.call({"code": SNIPPET})
            self.call_s.append(time.perf_counter() - t)
            self.call_inside_s.append(r["wall_s"])
            assert json.loads(r["output"])["value"] == str(i + 1), r
        await s.close()

    async def burst(self, sessions, calls_each):
        before = rss_mib()
        open_ = [await self.c.open_session("python") for _ in range(sessions)]
        for s in open_:
            await s.call({"code": "x = 0"})
        self.rss.append((rss_mib() - before) / sessions)
        lat: list[float] = []

        async def one(s):
            for _ in range(calls_each):
                t = time.perf_counter()
                r = await s.call({"code": SNIPPET})
                lat.append(time.perf_counter() - t)
                assert r["fault"] is None, r

        t = time.perf_counter()
        await asyncio.gather(*(one(s) for s in open_))
        self.burst_rate.append(sessions * calls_each / (time.perf_counter() - t))
        self.burst_s.extend(lat)
        for s in open_:
            await s.close()


PROJECT = {
    "shapes.py": (
        "import math\n\n\ndef area(r):\n    return math.pi * r * r\n\n\n"
        "def perimeter(r):\n    return 2 * math.pi * r\n\n\ndef square(a):\n    return a * a\n"
    ),
    "test_shapes.py": (
        "import math\nimport unittest\n\nfrom shapes import area, perimeter, square\n\n\n"
        "class T(unittest.TestCase):\n"
        "    def test_area(self):\n        self.assertAlmostEqual(area(1), math.pi)\n\n"
        "    def test_zero(self):\n        self.assertEqual(area(0), 0)\n\n"
        "    def test_perimeter(self):\n        self.assertAlmostEqual(perimeter(1), 2 * math.pi)\n\n"
        "    def test_square(self):\n        self.assertEqual(square(3), 9)\n\n"
        "    def test_negative(self):\n        self.assertEqual(square(-2), 4)\n"
    ),
}


async def repo_episode(c, setups, runs):
    row = {"files": PROJECT, "tests": ["test_shapes"], "hidden_files": {},
           "hidden_tests": ["test_shapes"]}
    t = time.perf_counter()
    env = await c.open_environment("repo")
    r = await env.reset(row)
    setups.append(time.perf_counter() - t)
    assert r["fault"] is None, r
    t = time.perf_counter()
    r = await env.step('<tool_call>{"name": "run_tests", "arguments": {}}</tool_call>')
    runs.append(time.perf_counter() - t)
    assert r["observation"].startswith("5 tests, 0 failures, 0 errors"), r
    await env.close()


def unittest_process(lat):
    with tempfile.TemporaryDirectory() as d:
        for name, text in PROJECT.items():
            Path(d, name).write_text(text)
        t = time.perf_counter()
        r = subprocess.run([sys.executable, "-m", "unittest", "-q", "test_shapes"], cwd=d,
                           capture_output=True, text=True, timeout=60)
        lat.append(time.perf_counter() - t)
        assert r.returncode == 0 and "Ran 5 tests" in r.stderr, r.stderr


def subprocess_run(code: str) -> str:
    r = subprocess.run(
        [sys.executable, "-I", "-c", code], capture_output=True, text=True, timeout=10
    )
    return r.stdout


JUDGE_APP = '''
import subprocess, sys
from fastapi import FastAPI
from pydantic import BaseModel

app = FastAPI()

class Run(BaseModel):
    code: str

@app.post("/run")
def run(req: Run):
    r = subprocess.run([sys.executable, "-I", "-c", req.code], capture_output=True, text=True,
                       timeout=10)
    return {"stdout": r.stdout, "stderr": r.stderr, "exit_code": r.returncode}
'''


class Judge:
    """A code-judge-style runner: FastAPI under uvicorn, one process per call."""

    def __init__(self, workers: int):
        self.dir = tempfile.mkdtemp()
        Path(self.dir, "judge_app.py").write_text(JUDGE_APP)
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "judge_app:app", "--port", str(self.port),
             "--workers", str(workers), "--log-level", "warning"],
            cwd=self.dir,
        )
        import httpx

        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                httpx.post(f"http://127.0.0.1:{self.port}/run", json={"code": "pass"}, timeout=5)
                break
            except httpx.HTTPError:
                time.sleep(0.2)

    async def burst(self, n, concurrency, lat):
        import httpx

        sem = asyncio.Semaphore(concurrency)
        async with httpx.AsyncClient(timeout=60, limits=httpx.Limits(max_connections=concurrency)) as client:

            async def one():
                async with sem:
                    t = time.perf_counter()
                    r = await client.post(
                        f"http://127.0.0.1:{self.port}/run", json={"code": BASELINE_SNIPPET}
                    )
                    lat.append(time.perf_counter() - t)
                    assert r.json()["stdout"] == "42\n", r.text

            t = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(n)))
            return n / (time.perf_counter() - t)

    def close(self):
        self.proc.terminate()
        self.proc.wait(10)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--python-exec", default=os.environ.get("ROLLBOX_PYTHON_EXEC", "python-exec"))
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sessions", type=int, default=62)
    ap.add_argument("--calls-each", type=int, default=20)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--repo", help="the repo environment's .wasm")
    args = ap.parse_args()
    rb = Rollbox(args.python_exec, "10s")
    if args.repo:
        spec = {"path": args.python_exec, "timeout": "10s", "retries": 0, "memory": "256MiB"}
        c = rollbox.Components(tools={"python": spec}, environments={"repo": args.repo})
        setups: list[float] = []
        runs: list[float] = []
        procs: list[float] = []
        loop = asyncio.new_event_loop()
        for _ in range(args.rounds * 10):
            loop.run_until_complete(repo_episode(c, setups, runs))
            unittest_process(procs)
        print(f"repo environment, 5-test project, {args.rounds * 10} episodes: setup (open and "
              f"reset) {ms(setups)}; run_tests {ms(runs)} (the first run of an episode opens "
              f"its python-exec session)")
        print(f"python -m unittest in a fresh process, same files: {ms(procs)}")
        return
    judge = Judge(workers=os.cpu_count() or 2)
    sub_lat: list[float] = []
    sub_rate: list[float] = []
    judge_lat: list[float] = []
    judge_rate: list[float] = []
    loop = asyncio.new_event_loop()
    try:
        for _ in range(args.rounds):
            loop.run_until_complete(rb.opens(50))
            loop.run_until_complete(rb.calls(300))
            loop.run_until_complete(rb.burst(args.sessions, args.calls_each))
            n = args.concurrency * 4
            t = time.perf_counter()
            with ThreadPoolExecutor(args.concurrency) as pool:

                def timed(_):
                    s = time.perf_counter()
                    assert subprocess_run(BASELINE_SNIPPET) == "42\n"
                    sub_lat.append(time.perf_counter() - s)

                list(pool.map(timed, range(n)))
            sub_rate.append(n / (time.perf_counter() - t))
            judge_rate.append(loop.run_until_complete(judge.burst(n, args.concurrency, judge_lat)))
    finally:
        judge.close()
    print(f"rounds {args.rounds}, {os.cpu_count()} cores, python-exec {args.python_exec}")
    print(f"rollbox session open: {ms(rb.open_s)}; a fresh call (no session): {ms(rb.fresh_s)}")
    print(f"rollbox call on a live session ({SNIPPET!r}): {ms(rb.call_s)} from Python; "
          f"{ms(rb.call_inside_s)} inside the host")
    # The first round's: later rounds reuse pages the earlier ones' sessions freed.
    print(f"rollbox RSS per idle live session ({args.sessions} open): {rb.rss[0]:.1f} MiB "
          f"(the first round; later rounds, on pages freed before: "
          f"{', '.join(f'{x:.1f}' for x in rb.rss[1:])})")
    print(f"rollbox {args.sessions} sessions calling at once: "
          f"{pct(rb.burst_rate, 50):,.0f} calls/s; {ms(rb.burst_s)}")
    print(f"subprocess.run per call, {args.concurrency} threads: "
          f"{pct(sub_rate, 50):,.0f} calls/s; {ms(sub_lat)}")
    print(f"code-judge-style FastAPI/uvicorn runner, {args.concurrency} clients: "
          f"{pct(judge_rate, 50):,.0f} calls/s; {ms(judge_lat)}")


if __name__ == "__main__":
    main()
