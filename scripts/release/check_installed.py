"""What a user who ran `pip install rollbox-*.whl` does first, run by scripts/release/check.sh
in a fresh venv holding only the wheel and numpy, with no Rust toolchain and no
componentize-py on PATH: every check goes through the installed package and its `rollbox`
command, never the checkout.

    python check_installed.py
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
import sys
import sysconfig
import time
import urllib.request
from pathlib import Path

import rollbox
from rollbox.trl import reward_func
from rollbox.verl import compute_score

SITE = Path(sysconfig.get_paths()["purelib"]).resolve()
CODE_TESTS = json.dumps({"inputs": ["1 2\n", "10 20\n"], "outputs": ["3\n", "30\n"]})


def fenced(code: str) -> str:
    return f"My solution:\n```python\n{code}\n```\n"


def check(what: str, got, want) -> None:
    if got != want:
        sys.exit(f"FAIL {what}: got {got!r}, want {want!r}")
    print(f"ok   {what}: {got!r}")


def installed() -> None:
    where = Path(rollbox.__file__).resolve()
    check("rollbox is imported from the venv's site-packages", where.parent.parent, SITE)
    info = rollbox.build_info()
    check("the version", info["version"], rollbox.__version__)
    check("python-exec is built in", "python-exec" in info["builtins"], True)
    command = shutil.which("rollbox")
    check("`rollbox` is the venv's script", Path(command).parent, Path(sys.executable).parent)
    line = subprocess.run([command, "--version"], capture_output=True, text=True, check=True)
    check("`rollbox --version` names the same build", line.stdout.strip(), f"rollbox {info['line']}")
    for tool in ("cargo", "rustc", "componentize-py"):
        check(f"no {tool} on PATH", shutil.which(tool), None)


async def verl() -> None:
    math = await compute_score("openai/gsm8k", "6 * 12 = 72\n#### 72", "72")
    check("rollbox.verl.compute_score, a right math answer", (math["score"], math["fault"]), (1.0, None))
    wrong = await compute_score("openai/gsm8k", "#### 71", "72")
    check("rollbox.verl.compute_score, a wrong math answer", wrong["score"], 0.0)
    t0 = time.perf_counter()
    right = await compute_score(
        "codecontests", fenced("a, b = map(int, input().split())\nprint(a + b)"), CODE_TESTS
    )
    print(f"time to the first code score (python-exec compiled or read from the cache): "
          f"{time.perf_counter() - t0:.2f} s")
    check("rollbox.verl.compute_score, a right program (built-in python-exec)",
          (right["score"], right["fault"]), (1.0, None))
    bad = await compute_score(
        "codecontests", fenced("a, b = map(int, input().split())\nprint(a - b)"), CODE_TESTS
    )
    check("rollbox.verl.compute_score, a wrong program", bad["score"], 0.0)


async def trl() -> None:
    f = reward_func("math")
    scores = await f(["q1", "q2"], ["the answer is \\boxed{4}", "\\boxed{5}"], answer=["4", "4"])
    check("rollbox.trl.reward_func('math')", scores, [1.0, 0.0])


def post(url: str, body: dict) -> dict:
    req = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(req, timeout=120) as r:
        return json.load(r)


def serve(tmp: Path) -> None:
    proc = subprocess.Popen(
        ["rollbox", "serve", "--listen", "127.0.0.1:0", "--reward", "math=math",
         "--tool", "python=python-exec,timeout=10s,memory=1GiB"],
        stdout=subprocess.PIPE, text=True, cwd=tmp,
    )
    try:
        line = proc.stdout.readline().strip()
        check("`rollbox serve` starts", line.startswith("listening on http://"), True)
        base = line.removeprefix("listening on ")
        run = post(base + "/run_code", {"code": "print(sum(range(10)))", "language": "python"})
        check("POST /run_code", (run["status"], run["run_result"]["stdout"]), ("Success", "45\n"))
        rewards = post(base + "/v1/rewards", {
            "reward": "math",
            "items": [{"completion": "\\boxed{4}", "answer": "4"},
                      {"completion": "\\boxed{5}", "answer": "4"}],
        })
        check("POST /v1/rewards", rewards["scores"], [1.0, 0.0])
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def main() -> None:
    tmp = Path(sys.argv[1]) if len(sys.argv) > 1 else Path.cwd()
    installed()
    asyncio.run(verl())
    asyncio.run(trl())
    serve(tmp)
    print("all checks passed")


if __name__ == "__main__":
    main()
