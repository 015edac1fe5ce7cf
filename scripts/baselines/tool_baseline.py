"""Process-per-call baseline for `rollbox-bench tools`: runs CODE N times through
subprocess.run([sys.executable, "-c", CODE]) (what a sandbox that starts a process per call
costs at least, before any container or seccomp setup) and prints each call's seconds, one per
line. Usage: python3 scripts/baselines/tool_baseline.py N CODE"""

import subprocess
import sys
import time


def main(n: int, code: str) -> None:
    for _ in range(n):
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True)
        dt = time.perf_counter() - t
        assert out.stdout, "the snippet printed nothing"
        print(f"{dt:.9f}")


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
