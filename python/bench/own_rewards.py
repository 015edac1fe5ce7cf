"""Plain Python reward files as sandboxed components (issue 56) beside the same functions run
natively, in the same run, interleaved for `--rounds` rounds.

* first build of a file importing math-verify (TRL's `accuracy_reward`, unchanged, with
  math-verify, sympy, latex2sympy2, mpmath and ANTLR pinned), into an empty cache folder (pip's
  own download cache as it is), and a cached load of it (`Components(...)` again);
* per-call overhead: a verl-shaped function returning 1.0, one call in flight, p50/p99, beside
  the native call;
* calls/s: verl 0.9.1's `gsm8k.py` through `rollbox.verl.compute_score`, 64 in flight, against
  verl's own loop (`compute_score` per sample, as its naive reward manager calls it); TRL 1.16's
  `accuracy_reward` through `rollbox.trl.reward_func`, 64 completions a batch, against the
  function on the same batches in this process (TRL calls it once per batch);
* RSS per call in flight (the process's resident memory during a 64-call burst, less before).

Run in the trainers venv with componentize-py on PATH (the test venv's) and the release wheel:

    pip install --target /tmp/rbx dist/rollbox-*.whl
    PATH=$ROLLBOX_TEST_VENV/bin:$PATH PYTHONPATH=/tmp/rbx \\
        ~/.cache/rollbox/trainers-venv-*/bin/python python/bench/own_rewards.py
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.metadata
import json
import os
import resource
import shutil
import statistics
import tempfile
import threading
import time
from pathlib import Path

import trl.rewards.accuracy_rewards as trl_accuracy
import verl.utils.reward_score as verl_scores

import rollbox
import rollbox.trl
import rollbox.verl

ROOT = Path(__file__).resolve().parents[2]
CORPUS = ROOT / "tests/fixtures/rewards/math_corpus.jsonl"


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1048576


def pairs(n):
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines()]
    out = []
    for r in rows[:: max(1, len(rows) // n)][:n]:
        a = r["answer"]
        out.append((r["completion"], a.split("####")[-1].strip() if "####" in a else a))
    return out


def trl_file(folder: Path) -> tuple[str, str]:
    """TRL's accuracy_reward unchanged in a local `trl` package (see test_own_rewards.py)."""
    pkg = folder / "trl"
    (pkg / "rewards").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "rewards" / "__init__.py").write_text("")
    (pkg / "import_utils.py").write_text("def is_math_verify_available():\n    return True\n")
    shutil.copyfile(trl_accuracy.__file__, pkg / "rewards" / "accuracy_rewards.py")
    (folder / "my_rewards.py").write_text(
        "from trl.rewards.accuracy_rewards import accuracy_reward\n")
    pins = [f"{p}=={importlib.metadata.version(p)}"
            for p in ("math-verify", "latex2sympy2_extended", "sympy", "mpmath")]
    (folder / "requirements.txt").write_text("\n".join(pins + ["antlr4-python3-runtime==4.13.2"]))
    return f"{folder}/my_rewards.py:accuracy_reward", str(folder / "requirements.txt")


def build_figures(folder: Path) -> None:
    spec, req = trl_file(folder / "trl_reward")
    cache = folder / "cache"
    os.environ["ROLLBOX_CACHE_DIR"] = str(cache)
    opts = {"path": spec, "style": "trl", "requirements": req}
    t = time.perf_counter()
    rollbox.Components(rewards={"r": opts})
    first = time.perf_counter() - t
    loads = []
    for _ in range(5):
        t = time.perf_counter()
        rollbox.Components(rewards={"r": opts})
        loads.append(time.perf_counter() - t)
    wasm = max((cache / "python-builds").rglob("component.wasm"), key=lambda p: p.stat().st_size)
    direct = []
    for _ in range(5):
        t = time.perf_counter()
        rollbox.Components(rewards={"r": str(wasm)})
        direct.append(time.perf_counter() - t)
    print(f"first build (math-verify, 5 pinned wheels, empty cache): {first:.1f} s; "
          f"component {wasm.stat().st_size / 2**20:.0f} MiB; cached load of the .py p50 "
          f"{statistics.median(loads) * 1e3:.0f} ms (min {min(loads) * 1e3:.0f} ms); the same "
          f"component by its .wasm path p50 {statistics.median(direct) * 1e3:.0f} ms: the build "
          f"cache's share {(statistics.median(loads) - statistics.median(direct)) * 1e3:.0f} ms")
    # The first load after the build reads and hashes the file; the runtime then knows it by its
    # identity (device, inode, size, times) and later loads map the compiled entry alone.
    print("cached loads of the .py in turn (ms): " + ", ".join(f"{x * 1e3:.0f}" for x in loads)
          + "; by the .wasm path: " + ", ".join(f"{x * 1e3:.0f}" for x in direct))
    del os.environ["ROLLBOX_CACHE_DIR"]


def overhead(folder: Path, rounds: int, calls: int) -> None:
    path = folder / "one.py"
    path.write_text("def compute_score(data_source, solution_str, ground_truth):\n    return 1.0\n")
    c = rollbox.Components(rewards={"r": f"{path}:compute_score"})
    ns = {}
    exec(path.read_text(), ns)
    fn = ns["compute_score"]

    async def sequential(n):
        times, inside = [], []
        for _ in range(n):
            t = time.perf_counter()
            r = await c.score("r", "x", data={"ground_truth": "1"})
            times.append(time.perf_counter() - t)
            assert r["score"] == 1.0, r
            inside.append(r["wall_s"])
        return times, inside

    ours, inside, native = [], [], []
    for _ in range(rounds):
        t, w = asyncio.run(sequential(calls))
        ours += t
        inside += w
        for _ in range(calls):
            t = time.perf_counter()
            fn(data_source="d", solution_str="x", ground_truth="1")
            native.append(time.perf_counter() - t)
    print(f"per call, a function returning 1.0, 1 in flight: rollbox p50 {pct(ours, 50) * 1e3:.3f} ms "
          f"p99 {pct(ours, 99) * 1e3:.3f} ms from Python (the sandboxed call itself, host side: "
          f"p50 {pct(inside, 50) * 1e3:.3f} ms); native p50 {pct(native, 50) * 1e6:.2f} us; "
          f"overhead p50 {(pct(ours, 50) - pct(native, 50)) * 1e3:.3f} ms")


def throughput(folder: Path, rounds: int, n: int) -> None:
    data = pairs(n)
    gsm8k = folder / "gsm8k.py"
    shutil.copyfile(Path(verl_scores.__file__).parent / "gsm8k.py", gsm8k)
    ns = {}
    exec(gsm8k.read_text(), ns)
    native_gsm8k = ns["compute_score"]
    spec, req = trl_file(folder / "trl_tp")
    reward = rollbox.trl.reward_func(spec, style="trl", requirements=req, timeout="60s")
    batches = [data[i:i + 64] for i in range(0, len(data), 64)]
    peak = {"rss": 0.0}
    stop = threading.Event()

    def sample():
        while not stop.is_set():
            peak["rss"] = max(peak["rss"], rss_mib())
            time.sleep(0.002)

    async def ours_gsm8k():
        for b in batches:
            rs = await asyncio.gather(*[
                rollbox.verl.compute_score("openai/gsm8k", comp, truth,
                                           reward=f"{gsm8k}:compute_score", style="verl")
                for comp, truth in b])
            assert all(r["fault"] is None for r in rs)

    async def ours_trl():
        for b in batches:
            comps = [[{"role": "assistant", "content": c}] for c, _ in b]
            prompts = [[{"role": "user", "content": "q"}]] * len(b)
            await reward(prompts, comps, solution=[t for _, t in b])

    asyncio.run(ours_gsm8k())  # build and warm both before timing
    asyncio.run(ours_trl())
    figures = {k: [] for k in ("rollbox gsm8k", "verl gsm8k", "rollbox accuracy", "trl accuracy")}
    for _ in range(rounds):
        t = time.perf_counter()
        asyncio.run(ours_gsm8k())
        figures["rollbox gsm8k"].append(len(data) / (time.perf_counter() - t))
        t = time.perf_counter()
        for comp, truth in data:
            native_gsm8k(comp, truth)
        figures["verl gsm8k"].append(len(data) / (time.perf_counter() - t))
        before = rss_mib()
        peak["rss"] = before
        stop.clear()
        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        t = time.perf_counter()
        asyncio.run(ours_trl())
        figures["rollbox accuracy"].append(len(data) / (time.perf_counter() - t))
        stop.set()
        sampler.join()
        figures.setdefault("rss", []).append((peak["rss"] - before) / 64)
        t = time.perf_counter()
        for b in batches:
            trl_accuracy.accuracy_reward([[{"role": "assistant", "content": c}] for c, _ in b],
                                         [x for _, x in b])
        figures["trl accuracy"].append(len(data) / (time.perf_counter() - t))
    for k in ("rollbox gsm8k", "verl gsm8k", "rollbox accuracy", "trl accuracy"):
        print(f"{k:18s} calls/s median {statistics.median(figures[k]):8.0f}  (rounds: "
              + ", ".join(f"{x:.0f}" for x in figures[k]) + ")")
    print(f"gsm8k: rollbox/verl {statistics.median(figures['rollbox gsm8k']) / statistics.median(figures['verl gsm8k']):.2f}x; "
          f"accuracy_reward: rollbox/trl {statistics.median(figures['rollbox accuracy']) / statistics.median(figures['trl accuracy']):.2f}x; "
          f"RSS per accuracy call in flight {statistics.median(figures['rss']):.1f} MiB")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=300, help="per round, the 1.0 function")
    ap.add_argument("--pairs", type=int, default=640, help="per round, the throughput runs")
    a = ap.parse_args()
    print(f"rollbox {rollbox.build_info()['line']}; {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        build_figures(tmp)
        overhead(tmp, a.rounds, a.calls)
        throughput(tmp, a.rounds, a.pairs)


if __name__ == "__main__":
    main()
