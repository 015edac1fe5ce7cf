"""Code-execution rewards: `rollbox.verl.compute_score` (the `code` reward, each test case in a
fresh python-exec instance) against verl 0.9.1's own `default_compute_score` (`prime_code`:
the cases in forked processes, `signal.alarm` timeouts), on the same completions, in the same
run, A/B interleaved for `--rounds` rounds.

Inputs, each a 2-case stdin problem: a program that passes, one that fails (a wrong answer),
and `while True: pass` (once per side: verl's default timeouts, 10 s per case here).
With `--real`, real programs instead (`tests/fixtures/rewards/code_real_corpus.jsonl`: HumanEval,
MBPP and APPS problems with their own and mutated solutions, `real()` below): each pair scored
by both sides one after the other, the side that goes first alternating, and per pair the
ratio of verl's time to rollbox's (p10/p50/p90), with where a case's time goes in rollbox.

Prints per call (2 cases) p50/p99 at 1 in flight, cases/s with 1 and 64 calls in flight
(rollbox: 64 awaited at once; verl: a 64-thread pool, as verl's `naive` manager runs a sync
scorer), the looping program's wall time, the process's peak RSS growth, rollbox's host RSS
per case in flight, and where a case's
time goes in rollbox (one python-exec call, with and without the APPS imports; the reward).

    PYTHONPATH=python ~/.cache/rollbox/trainers-venv-*/bin/python python/bench/code_rewards.py \\
        --python-exec target/wasm-guests/python/python_exec_tool.wasm
"""

from __future__ import annotations

import argparse
import asyncio
import json
import resource
import statistics
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = json.dumps({"inputs": ["1 2\n", "10 20\n"], "outputs": ["3\n", "30\n"]})
PROGRAMS = {
    "pass": "a, b = map(int, input().split())\nprint(a + b)",
    "fail": "a, b = map(int, input().split())\nprint(a - b)",
}
LOOP = "while True:\n    pass"
CASES_PER_CALL = 2


def fenced(code: str) -> str:
    return f"My solution:\n```python\n{code}\n```\n"


def rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def current_rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * resource.getpagesize() / 1048576


class Rollbox:
    name = "rollbox"

    def __init__(self, python_exec: str):
        from rollbox.verl import compute_score

        self.compute_score = compute_score
        self.python_exec = python_exec
        self.loop = asyncio.new_event_loop()
        self.rss_growth: list[float] = []

    async def _one(self, completion: str) -> float:
        r = await self.compute_score(
            "codecontests", completion, TESTS, python_exec=self.python_exec
        )
        assert r["fault"] is None, r
        return r["score"]

    def one(self, completion: str) -> float:
        # One event loop for the whole run, as a trainer's: a loop per call would time
        # asyncio's start-up, not the reward.
        return self.loop.run_until_complete(self._one(completion))

    def many(self, completions: list[str], in_flight: int) -> list[float]:
        async def run():
            gate = asyncio.Semaphore(in_flight)

            async def bounded(c):
                async with gate:
                    return await self._one(c)

            return await asyncio.gather(*(bounded(c) for c in completions))

        if in_flight < 64:
            return self.loop.run_until_complete(run())
        # Host RSS while the calls are in flight: sampled every 2 ms, less what it was before.
        before = current_rss_mib()
        peak = [before]
        done = threading.Event()

        def sample():
            while not done.wait(0.002):
                peak[0] = max(peak[0], current_rss_mib())

        sampler = threading.Thread(target=sample)
        sampler.start()
        try:
            return self.loop.run_until_complete(run())
        finally:
            done.set()
            sampler.join()
            self.rss_growth.append(peak[0] - before)


class Verl:
    name = "verl prime_code"

    def __init__(self):
        from verl.utils.reward_score import default_compute_score

        self.score = default_compute_score

    def one(self, completion: str) -> float:
        return float(self.score("codecontests", completion, TESTS))

    def many(self, completions: list[str], in_flight: int) -> list[float]:
        with ThreadPoolExecutor(in_flight) as pool:
            return list(pool.map(self.one, completions))


class VerlProcess:
    """verl's scorer in a process of its own, timed there. In one process with rollbox,
    `prime_code`'s fork per case leaves the shared process's pages copy-on-write, and the
    next rollbox pair pays the faults (p50 7.6 ms against 4.7 ms alone), while verl's forks
    copy rollbox's page tables; a trainer runs one or the other."""

    def __init__(self):
        import multiprocessing

        ctx = multiprocessing.get_context("spawn")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_verl_worker, args=(child,))
        self.proc.start()
        child.close()

    def score(self, data_source: str, completion: str, ground_truth: str) -> tuple[float, float]:
        """verl's score and the seconds `default_compute_score` took in the worker."""
        self.conn.send((data_source, completion, ground_truth))
        return self.conn.recv()

    def close(self) -> None:
        self.conn.send(None)
        self.proc.join()


def _verl_worker(conn) -> None:
    import multiprocessing

    # A spawned process inherits its parent's start method; verl's scorer forks, as in a trainer.
    multiprocessing.set_start_method("fork", force=True)
    from verl.utils.reward_score import default_compute_score

    while (job := conn.recv()) is not None:
        t = time.perf_counter()
        score = float(default_compute_score(*job))
        conn.send((score, time.perf_counter() - t))


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python-exec", default=str(ROOT / "target/wasm-guests/python/python_exec_tool.wasm"),
                    help="a python-exec .wasm; \"\" for the built-in one")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--calls", type=int, default=20, help="sequential calls per program per round")
    ap.add_argument("--burst", type=int, default=128, help="calls in the 64-in-flight burst")
    ap.add_argument("--no-loop", action="store_true", help="skip the looping program")
    ap.add_argument("--breakdown-only", action="store_true", help="only where rollbox's time goes")
    ap.add_argument("--real", action="store_true", help="real programs from the real-data corpus")
    ap.add_argument("--pairs", type=int, default=200, help="--real: pairs scored (evenly spread)")
    a = ap.parse_args()
    if a.breakdown_only:
        breakdown(a.python_exec)
        return
    if a.real:
        real(a.python_exec, a.pairs)
        return

    base = rss_mib()
    sides = [Rollbox(a.python_exec), Verl()]
    for s in sides:  # warm: imports, the component cache, verl's first fork
        s.one(fenced(PROGRAMS["pass"]))
    lat = {(s.name, p): [] for s in sides for p in PROGRAMS}
    rate = {(s.name, n): [] for s in sides for n in (1, 64)}
    scores = {}
    for _ in range(a.rounds):
        for s in sides:
            for p, code in PROGRAMS.items():
                for _ in range(a.calls):
                    t = time.perf_counter()
                    scores[(s.name, p)] = s.one(fenced(code))
                    lat[(s.name, p)].append(time.perf_counter() - t)
            t = time.perf_counter()
            s.many([fenced(PROGRAMS["pass"])] * a.calls, 1)
            rate[(s.name, 1)].append(a.calls * CASES_PER_CALL / (time.perf_counter() - t))
            t = time.perf_counter()
            got = s.many([fenced(PROGRAMS["pass"])] * a.burst, 64)
            rate[(s.name, 64)].append(a.burst * CASES_PER_CALL / (time.perf_counter() - t))
            assert all(g == 1.0 for g in got), (s.name, set(got))
    print(f"code rewards, a 2-case stdin problem; {a.rounds} rounds, A/B interleaved")
    print(f"{'side':<16} {'program':<6} {'score':>5} {'p50 ms':>8} {'p99 ms':>8}")
    for (side, p), xs in lat.items():
        print(f"{side:<16} {p:<6} {scores[(side, p)]:>5.2f} {statistics.median(xs) * 1e3:>8.1f} {pct(xs, 0.99) * 1e3:>8.1f}")
    print(f"{'side':<16} {'in flight':>9} {'cases/s (median of rounds)':>28}")
    for (side, n), xs in rate.items():
        print(f"{side:<16} {n:>9} {statistics.median(xs):>28.1f}")
    r50 = statistics.median(lat[("rollbox", "pass")])
    v50 = statistics.median(lat[("verl prime_code", "pass")])
    print(f"passing call p50: rollbox {r50 * 1e3:.1f} ms ({r50 / CASES_PER_CALL * 1e3:.1f} ms per case), verl {v50 * 1e3:.1f} ms: {v50 / r50:.0f}x")
    if not a.no_loop:
        for s in sides:
            t = time.perf_counter()
            got = s.one(fenced(LOOP))
            print(f"{s.name}: `while True: pass` scored {got} in {time.perf_counter() - t:.1f} s")
    print(f"peak RSS growth of this process (both sides): {rss_mib() - base:.0f} MiB")
    # The first burst's: later ones reuse the pool slots it left resident.
    grow = max(sides[0].rss_growth)
    print(
        f"rollbox host RSS growth with 64 calls ({64 * CASES_PER_CALL} cases) in flight, first burst: "
        f"{grow:.0f} MiB, {grow / 64:.2f} MiB per call in flight (a call runs at most 4 cases at once)"
    )
    breakdown(a.python_exec)


def real(python_exec: str, n: int) -> None:
    """Real programs: per pair, rollbox's `compute_score` and verl's `default_compute_score`
    (`prime_code`) in turn, alternating which goes first; the ratio of their times per pair."""
    corpus = ROOT / "tests/fixtures/rewards/code_real_corpus.jsonl"
    entries = [json.loads(line) for line in corpus.read_text().splitlines() if line.strip()]
    step = max(1, len(entries) // n)
    picked = entries[::step][:n]
    ours, theirs = Rollbox(python_exec), VerlProcess()
    ours.one(fenced(PROGRAMS["pass"]))  # warm: the component cache, verl's first fork
    theirs.score("codecontests", fenced(PROGRAMS["pass"]), TESTS)

    def rollbox_side(e):
        async def go():
            r = await ours.compute_score(
                "codecontests", e["completion"], e["ground_truth"], python_exec=python_exec
            )
            return r["score"]

        return ours.loop.run_until_complete(go())

    def rollbox_timed(e):
        t = time.perf_counter()
        score = rollbox_side(e)
        return score, time.perf_counter() - t

    def verl_timed(e):
        return theirs.score("codecontests", e["completion"], e["ground_truth"])

    times = {"rollbox": [], "verl": []}
    ratios, agree = [], 0
    by_kind: dict[str, list[float]] = {}
    for i, e in enumerate(picked):
        order = [("rollbox", rollbox_timed), ("verl", verl_timed)]
        if i % 2:
            order.reverse()
        got = {}
        for name, side in order:
            got[name], took = side(e)
            times[name].append(took)
        agree += abs(got["rollbox"] - got["verl"]) < 1e-9
        ratio = times["verl"][-1] / times["rollbox"][-1]
        ratios.append(ratio)
        by_kind.setdefault(e["kind"], []).append(ratio)
    print(f"code rewards on real programs: {len(picked)} pairs of {len(entries)} ({corpus.name}), "
          "each scored by both sides in turn, the first alternating; verl in its own process")
    print(f"{'side':<16} {'p10 ms':>8} {'p50 ms':>8} {'p90 ms':>8} {'total s':>8}")
    for name, xs in times.items():
        print(f"{name:<16} {pct(xs, 0.1) * 1e3:>8.1f} {statistics.median(xs) * 1e3:>8.1f} "
              f"{pct(xs, 0.9) * 1e3:>8.1f} {sum(xs):>8.1f}")
    print(f"verl / rollbox per pair: p10 {pct(ratios, 0.1):.0f}x, p50 {statistics.median(ratios):.0f}x, "
          f"p90 {pct(ratios, 0.9):.0f}x; in total {sum(times['verl']) / sum(times['rollbox']):.0f}x")
    for kind, xs in sorted(by_kind.items()):
        print(f"  {kind:<6} {len(xs):>4} pairs: p50 {statistics.median(xs):.0f}x")
    print(f"scores equal on {agree}/{len(picked)} pairs (prime_code)")
    theirs.close()
    real_breakdown(python_exec, picked)


def real_breakdown(python_exec: str, picked: list[dict], n: int = 40) -> None:
    """Where a real case's time goes inside python-exec (p50 of `wall_s` over the first case of
    `n` pairs): the instance and harness (an empty program), the program's own imports, the
    whole program on the case."""
    import ast as pyast

    import rollbox

    c = rollbox.Components(
        tools={"python": {"path": python_exec or "python-exec", "timeout": "10s", "max_boundary_bytes": "16MiB"}}
    )

    def imports_of(code: str) -> str:
        try:
            tree = pyast.parse(code)
        except SyntaxError:
            return ""
        return "\n".join(pyast.unparse(s) for s in tree.body if isinstance(s, (pyast.Import, pyast.ImportFrom)))

    async def run():
        rows = {"instance + harness": [], "+ the program's imports": [], "the whole program": []}
        for e in picked[::max(1, len(picked) // n)][:n]:
            gt = json.loads(e["ground_truth"])
            program = e["completion"].split("```python")[-1].split("```")[0]
            if "fn_name" in gt:
                base = {"stdin": "", "harness": "prime_code",
                        "call": {"fn_name": gt["fn_name"], "inputs": gt["inputs"][0]}}
            else:
                base = {"stdin": gt["inputs"][0], "harness": "prime_code"}
            for label, code in [("instance + harness", ""),
                                ("+ the program's imports", imports_of(program)),
                                ("the whole program", program)]:
                args = dict(base, code=code)
                if "call" in args and code != program:
                    args = {"code": code, "stdin": "", "harness": "prime_code"}
                r = await c.call_tool("python", args)
                rows[label].append(r["wall_s"])
        print(f"{'one case inside python-exec, p50 of ' + str(len(rows['the whole program'])):<40} {'ms':>6}")
        for label, xs in rows.items():
            print(f"{label:<40} {statistics.median(xs) * 1e3:>6.2f}")

    asyncio.run(run())


def breakdown(python_exec: str, n: int = 50) -> None:
    """Where a case's time goes: one python-exec call (p50 from Python and inside the tool),
    without and with the APPS imports, and the 2-case reward (from Python and inside it)."""
    import rollbox

    c = rollbox.Components(
        tools={"python": {"path": python_exec or "python-exec", "timeout": "10s", "max_boundary_bytes": "16MiB"}},
        rewards={"code": {"path": "code", "timeout": "60s", "max_boundary_bytes": "64MiB"}},
    )
    program = PROGRAMS["pass"]
    row = {"reward_model": {"ground_truth": TESTS}}

    async def timed(call):
        outside, inside = [], []
        for _ in range(n):
            t = time.perf_counter()
            r = await call()
            outside.append(time.perf_counter() - t)
            assert r["fault"] is None, r
            inside.append(r["wall_s"])
        return statistics.median(outside) * 1e3, statistics.median(inside) * 1e3

    async def run():
        print(f"{'one call, p50 of ' + str(n):<40} {'from Python ms':>14} {'inside ms':>10}")
        for label, args in [
            ("python-exec program", {"code": program, "stdin": "1 2\n"}),
            ("python-exec program + APPS imports", {"code": program, "stdin": "1 2\n", "prelude": True}),
        ]:
            out, inside = await timed(lambda args=args: c.call_tool("python", args))
            print(f"{label:<40} {out:>14.2f} {inside:>10.2f}")
        out, inside = await timed(lambda: c.score("code", fenced(program), data=row))
        print(f"{'code reward, 2 cases':<40} {out:>14.2f} {inside:>10.2f}")

    asyncio.run(run())


if __name__ == "__main__":
    main()
