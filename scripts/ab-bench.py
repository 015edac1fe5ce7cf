#!/usr/bin/env python3
"""Run two builds of a benchmark program in turn (A B A B ...) and print each figure's median
per side and the ratio B/A, so that a comparison holds on a noisy machine.

    scripts/ab-bench.py --rounds 3 --a /tmp/old/rollbox-bench --b target/release/rollbox-bench \\
        -- sandbox --trivial target/wasm-guests/python/trivial_py.wasm --iterations 2000

Every line a run prints with a `:` is a figure line: the text before the first `:` names it and
the numbers after it are its figures, compared position by position across rounds. Lines that
differ in their numbers only are the same figure.
"""

import argparse
import re
import statistics
import subprocess
import sys

NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d+)?")


def figures(output: str) -> dict[str, list[float]]:
    out = {}
    for line in output.splitlines():
        if ":" not in line:
            continue
        name, rest = line.split(":", 1)
        nums = [float(n) for n in NUMBER.findall(rest)]
        if nums:
            out[NUMBER.sub("#", name.strip())] = nums
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", required=True, help="the baseline program")
    ap.add_argument("--b", required=True, help="the program measured against it")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--quiet", action="store_true", help="print only the summary")
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- and the arguments both get")
    a = ap.parse_args()
    args = a.args[1:] if a.args[:1] == ["--"] else a.args
    runs = {"A": [], "B": []}
    for r in range(a.rounds):
        for side, prog in (("A", a.a), ("B", a.b)):
            p = subprocess.run([prog, *args], capture_output=True, text=True)
            if p.returncode != 0:
                sys.stderr.write(p.stdout + p.stderr)
                print(f"round {r + 1} {side}: {prog} exited {p.returncode}", file=sys.stderr)
                return 1
            if not a.quiet:
                for line in p.stdout.splitlines():
                    print(f"[{side}{r + 1}] {line}")
            runs[side].append(figures(p.stdout))
    print(f"\nmedians over {a.rounds} interleaved rounds: A = {a.a}, B = {a.b}")
    for name in runs["A"][0]:
        cols = []
        for i in range(len(runs["A"][0][name])):
            try:
                va = statistics.median(f[name][i] for f in runs["A"])
                vb = statistics.median(f[name][i] for f in runs["B"])
            except (KeyError, IndexError):
                continue
            ratio = f" (B/A {vb / va:.2f})" if va else ""
            cols.append(f"{va:g} -> {vb:g}{ratio}")
        print(f"{name}: " + "; ".join(cols))
    return 0


if __name__ == "__main__":
    sys.exit(main())
