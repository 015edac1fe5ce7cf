"""rollbox.verl.compute_score on code sources against verl 0.9.1's own `default_compute_score`
(its `prime_code` path, run here in the same process): the same completions and test cases get
the same scores, through the `code` reward running each case in a fresh python-exec instance;
and where verl's harness is not an honest grader (a program reading `sys.stdin.buffer`), the
difference is the one `workflows/rewards/code/README.md` documents.

Run in the trainers venv (scripts/install/trainers-venv.sh) by scripts/test.sh."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from verl.utils.reward_score import default_compute_score

from rollbox.verl import compute_score

ROOT = Path(__file__).resolve().parents[3]
PYTHON_EXEC = ROOT / "target/wasm-guests/python/python_exec_tool.wasm"

STDIO = json.dumps({"inputs": ["1 2\n", "10 20\n", "-5 5\n"], "outputs": ["3\n", "30\n", "0\n"]})
CALL = json.dumps(
    {"fn_name": "pair", "inputs": ["1\n2", "3\n4"], "outputs": ["[1, 2]", "[3, 4]"]}
)


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\n"


CASES = [
    # (completion, ground truth)
    (fenced("a, b = map(int, input().split())\nprint(a + b)"), STDIO),
    (fenced("a, b = map(int, input().split())\nprint(a * b)"), STDIO),
    (fenced("a, b = map(int, input().split())\nprint(a + b if a > 0 else 1)"), STDIO),
    (fenced("a, b = map(int, input().split())\nprint(a + b, '')"), STDIO),
    (fenced("a, b = map(int, input().split())\nprint(float(a + b))"), STDIO),
    (fenced("print(int(sqrt(16)) - 4 + sum(map(int, input().split())))"), STDIO),
    (fenced("def f(:\n    pass"), STDIO),
    (fenced("raise ValueError('no')"), STDIO),
    ("a, b = map(int, input().split())\nprint(a + b)", STDIO),
    (fenced("class Solution:\n    def pair(self, a, b):\n        return (a, b)"), CALL),
    (fenced("def pair(a, b):\n    return [a, b]"), CALL),
    (fenced("def pair(a, b):\n    return [b, a]"), CALL),
    (fenced("def other(a, b):\n    return [a, b]"), CALL),
    # verl's harness conditions, which prime_code reproduces.
    (fenced("a, b = map(int, input().split())\nprint(a + b)\nexit()"), STDIO),
    (fenced("t = 0\ndef add(x):\n    global t\n    t += x\nfor v in map(int, input().split()):\n    add(v)\nprint(t)"), STDIO),
    (fenced("import os\nprint(sum(map(int, os.read(0, 1 << 16).split())))"), STDIO),
    (fenced("print(sum(map(int, open(0).read().split())))"), STDIO),
    (fenced("def pair(a, b):\n    return [a, b] if a == 1 else [0, 0]"), CALL),
    (fenced("def pair(a, b):\n    return [(a, b)]"), CALL),
]


def ours(completion: str, ground_truth: str, **kwargs) -> dict:
    return asyncio.run(
        compute_score(
            "codecontests", completion, ground_truth, python_exec=str(PYTHON_EXEC), **kwargs
        )
    )


@pytest.fixture(scope="module", autouse=True)
def built():
    assert PYTHON_EXEC.exists(), f"{PYTHON_EXEC} is built by `cargo test --workspace`"


@pytest.mark.parametrize(("completion", "ground_truth"), CASES)
def test_code_scores_agree_with_verls_prime_code(completion, ground_truth):
    want = float(default_compute_score("codecontests", completion, ground_truth))
    got = ours(completion, ground_truth)
    assert got["fault"] is None, got
    assert got["score"] == pytest.approx(want), (got, want)


def test_stdin_buffer_scores_as_verl_under_prime_code_and_is_read_by_judge():
    """verl's harness gives the program a stdin without `buffer` (a runtime error): that is
    `prime_code`'s score too; `judge` feeds it, as an online judge does."""
    completion = fenced("import sys\nprint(sum(map(int, sys.stdin.buffer.read().split())))")
    assert float(default_compute_score("codecontests", completion, STDIO)) == 0.0
    assert ours(completion, STDIO)["score"] == 0.0
    assert ours(completion, STDIO, code_reward={"semantics": "judge"})["score"] == 1.0


def test_a_looping_program_runs_to_its_case_timeout_and_scores_zero():
    import time

    one = json.dumps({"inputs": ["1 2\n"], "outputs": ["3\n"]})
    start = time.monotonic()
    got = ours(fenced("while True:\n    pass"), one)
    took = time.monotonic() - start
    # The case's timeout stops the program, not the reward's (60 s): a score, not a fault.
    assert got["score"] == 0.0 and got["fault"] is None, got
    # It ran for its whole 10 s case timeout (a lower bound: load only lengthens it; verl's
    # prime_code spends 5 s in its first pass, then 10 s). The upper bound only guards a hang.
    assert 9 < took < 120, took


def test_sandbox_fusion_semantics_by_option():
    completion = fenced("a, b = map(int, input().split())\nprint(a + b, '')")
    assert ours(completion, STDIO)["score"] == 1.0
    got = ours(completion, STDIO, code_reward={"semantics": "sandbox_fusion"})
    assert got["score"] == 0.0


def test_without_a_path_the_built_in_python_exec_runs_the_cases(monkeypatch):
    """No `python_exec` and no ROLLBOX_PYTHON_EXEC: the python-exec built into rollbox runs the
    cases (issue 55); a rollbox built without it names the install command."""
    import rollbox

    monkeypatch.delenv("ROLLBOX_PYTHON_EXEC", raising=False)
    completion = fenced("a, b = map(int, input().split())\nprint(a + b)")
    if "python-exec" in rollbox.build_info()["builtins"]:
        got = asyncio.run(compute_score("codecontests", completion, STDIO))
        assert got["fault"] is None and got["score"] == 1.0, got
    else:
        with pytest.raises(Exception, match="pip install componentize-py"):
            asyncio.run(compute_score("codecontests", completion, STDIO))
