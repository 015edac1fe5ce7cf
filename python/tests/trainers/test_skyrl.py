"""rollbox.skyrl against skyrl-gym 0.4.0 itself: `skyrl_gym.make("rollbox", ...)` builds the
environment through skyrl-gym's registry, `step` scores in the sandbox like skyrl-gym's own
`gsm8k` environment on answers both formats agree on, a reward that never returns scores 0.0
with its fault within its limit, and steps from SkyRL-style worker threads run at once.

Run in the trainers venv (scripts/install/trainers-venv.sh) by scripts/test.sh."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import skyrl_gym

import rollbox.skyrl  # noqa: F401 - registers "rollbox"

ROOT = Path(__file__).resolve().parents[3]
SPIN = ROOT / "target/wasm-guests/wasm32-wasip2/guest/reward_spin.wasm"


def test_make_and_step_through_skyrl_gyms_registry():
    extras = {"reward_spec": {"method": "rule", "ground_truth": "72"}}
    ours = skyrl_gym.make("rollbox", env_config={"reward": "math"}, extras=extras)
    theirs = skyrl_gym.make("gsm8k", extras=extras)
    assert isinstance(ours, skyrl_gym.Env)
    for action, want in [("48 + 24 = 72\n#### 72", 1.0), ("48 + 48 = 96\n#### 96", 0.0)]:
        got = ours.step(action)
        assert got["reward"] == want and got["done"] and got["metadata"]["fault"] is None, got
        assert theirs.step(action)["reward"] == want


def test_a_hung_reward_scores_zero_with_its_fault():
    assert SPIN.exists(), f"{SPIN} is built by `cargo test --workspace`"
    env = skyrl_gym.make(
        "rollbox",
        env_config={"reward": str(SPIN), "timeout": "300ms", "retries": 0},
        extras={"reward_spec": {"ground_truth": "1"}},
    )
    start = time.monotonic()
    out = env.step("x")
    assert out["reward"] == 0.0 and out["metadata"]["fault"] == "timeout", out
    assert time.monotonic() - start < 10


def test_steps_from_worker_threads():
    envs = [
        skyrl_gym.make("rollbox", extras={"reward_spec": {"ground_truth": str(i)}}) for i in range(32)
    ]
    with ThreadPoolExecutor(8) as pool:
        outs = list(pool.map(lambda p: p[1].step(f"#### {p[0] if p[0] % 2 else -1}"), enumerate(envs)))
    assert [o["reward"] for o in outs] == [float(i % 2) for i in range(32)]


PYTHON_EXEC = ROOT / "target/wasm-guests/python/python_exec_tool.wasm"


def test_the_python_tool_group_answers_as_skyrl_gyms_and_keeps_state():
    """rollbox's PythonToolGroup beside skyrl-gym's own PythonCodeExecutorToolGroup (`python -c`
    in a subprocess): the same text for a snippet that prints and for a timeout; an error in
    the same form (rollbox gives the exception's line, skyrl-gym the whole traceback); and
    state kept across calls, where skyrl-gym's subprocess forgets it."""
    from skyrl_gym.tools import PythonCodeExecutorToolGroup

    assert PYTHON_EXEC.exists(), f"{PYTHON_EXEC} is built by `cargo test --workspace`"
    ours = rollbox.skyrl.PythonToolGroup(timeout=2.0, component=str(PYTHON_EXEC))
    theirs = PythonCodeExecutorToolGroup(timeout=2.0)
    assert ours.get_name() == theirs.get_name() and ours.get_tool_names() == ["python"]
    for code in ["print(6 * 7)", "x = 5\nprint(x ** 2)\n", "import math\nprint(math.factorial(10))"]:
        assert ours.execute_tool("python", code) == theirs.execute_tool("python", code), code
    err_ours = ours.execute_tool("python", "1 / 0")
    err_theirs = theirs.execute_tool("python", "1 / 0")
    assert err_ours == "Error executing Python code: ZeroDivisionError: division by zero"
    assert err_theirs.startswith("Error executing Python code: Traceback")
    assert err_theirs.endswith("ZeroDivisionError: division by zero")
    loop = "while True: pass"
    assert ours.execute_tool("python", loop) == theirs.execute_tool("python", loop)
    # State: what one call defines is there in the next (after the timeout, a new session).
    assert ours.execute_tool("python", "y = 41") == ""
    assert ours.execute_tool("python", "y += 1\nprint(y)") == "42"
    assert theirs.execute_tool("python", "print(y)").endswith("NameError: name 'y' is not defined")
    # No files, network or processes.
    text = ours.execute_tool("python", "import subprocess\nsubprocess.run(['ls'])")
    assert text.startswith("Error executing Python code: "), text
    ours.close()


def test_a_code_interpreter_episode_through_skyrl_gyms_registry():
    env = skyrl_gym.make(
        "rollbox-code",
        env_config={"reward": "math", "python_exec": str(PYTHON_EXEC), "timeout": 2},
        extras={"reward_spec": {"ground_truth": "43"}, "max_turns": 5},
    )
    env.init([{"role": "user", "content": "What is 6 * 7 + 1?"}])
    out = env.step("<tool><python>x = 6 * 7\nprint(x)</python></tool>")
    assert out["observations"] == [{"role": "user", "content": "42"}] and not out["done"], out
    out = env.step("<tool><python>print(x + 1)</python></tool>")
    assert out["observations"][0]["content"] == "43", out
    out = env.step("No tool here.")
    assert "No <tool><python>" in out["observations"][0]["content"], out
    out = env.step("<solution>The answer is \\boxed{43}.</solution>")
    assert out["done"] and out["reward"] == 1.0 and out["metadata"]["fault"] is None, out
    # The next episode's interpreter starts empty, and a wrong answer scores 0.
    env = skyrl_gym.make(
        "rollbox-code",
        env_config={"python_exec": str(PYTHON_EXEC)},
        extras={"reward_spec": {"ground_truth": "43"}, "max_turns": 2},
    )
    out = env.step("<tool><python>print(x)</python></tool>")
    assert "NameError" in out["observations"][0]["content"], out
    out = env.step("I give up: \\boxed{7}")
    assert out["done"] and out["reward"] == 0.0, out
    env.close()
