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
