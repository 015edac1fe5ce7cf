"""rollbox.verl against verl 0.9.1 itself: verl's own `load_reward_manager` (the `naive`, `dapo`
and `rate_limited` managers) loads `pkg://rollbox.verl` and scores GSM8K responses with the
sandboxed `math` reward; a reward that never returns is stopped at its limit and scores 0.0
with its fault; verl's own function-tool loader registers `rollbox.verl_tools`.

Run in the trainers venv (scripts/install/trainers-venv.sh) by scripts/test.sh."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

import rollbox.verl
import verl
from verl import DataProto
from verl.trainer.ppo.reward import load_reward_manager

ROOT = Path(__file__).resolve().parents[3]
MODEL = Path(os.environ.get("ROLLBOX_MODEL_DIR", Path.home() / ".cache/rollbox/models"))
SPIN = ROOT / "target/wasm-guests/wasm32-wasip2/guest/reward_spin.wasm"

GROUND_TRUTH = "72"
RESPONSES = {
    "Natalia sold 48 / 2 = 24 clips in May, so 48 + 24 = 72 clips in all.\n#### 72": 1.0,
    "She sold 48 + 24 = 72 clips. The answer is \\boxed{72}.": 1.0,
    "She sold 48 + 48 = 96 clips.\n#### 96": 0.0,
}


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(MODEL, gguf_file="SmolLM2-135M-Instruct.Q4_1.gguf")


def config(manager: str, reward_kwargs: dict):
    base = Path(verl.__file__).parent / "trainer/config/_generated_ppo_trainer.yaml"
    cfg = OmegaConf.load(base)
    cfg.reward.reward_manager.name = manager
    cfg.reward.custom_reward_function = OmegaConf.create(
        {"path": "pkg://rollbox.verl", "name": "compute_score", "reward_kwargs": reward_kwargs}
    )
    cfg.reward.timeout = 60.0
    return cfg


def sample(tokenizer, response: str, data_source: str = "openai/gsm8k") -> DataProto:
    """One sample as verl's reward loop receives it: prompt and response ids, the attention
    mask over both, the row's data_source, reward_model and extra_info."""
    prompt = tokenizer.encode("How many clips did Natalia sell?")
    resp = tokenizer.encode(response)
    pad = 8  # right padding of the response, as verl's batches have
    ids = torch.tensor([prompt + resp + [0] * pad])
    mask = torch.tensor([[1] * (len(prompt) + len(resp)) + [0] * pad])
    return DataProto.from_dict(
        tensors={
            "prompts": torch.tensor([prompt]),
            "responses": torch.tensor([resp + [0] * pad]),
            "input_ids": ids,
            "attention_mask": mask,
        },
        non_tensors={
            "data_source": [data_source],
            "reward_model": [{"ground_truth": GROUND_TRUTH, "style": "rule"}],
            "extra_info": [{"index": 0, "split": "train"}],
        },
    )


@pytest.mark.parametrize("manager", ["naive", "dapo", "rate_limited"])
def test_verls_reward_managers_score_through_the_sandbox(tokenizer, manager):
    rm = load_reward_manager(config(manager, {}), tokenizer)
    keys = None
    for response, want in RESPONSES.items():
        out = rm.loop.run_until_complete(rm.run_single(sample(tokenizer, response)))
        assert out["reward_score"] == want, (manager, response, out)
        info = out["reward_extra_info"]
        assert info["fault"] is None and info["acc"] == want and info["attempts"] == 1, info
        # verl builds its extra-info columns from the first sample's keys: all must agree.
        assert keys is None or set(info) == keys
        keys = set(info)
    assert keys == set(rollbox.verl.RESULT_KEYS)


def test_a_reward_that_never_returns_scores_zero_with_its_fault(tokenizer):
    assert SPIN.exists(), f"{SPIN} is built by `cargo test --workspace`"
    rm = load_reward_manager(
        config("naive", {"reward": str(SPIN), "timeout": "300ms", "retries": 1}), tokenizer
    )
    start = time.monotonic()
    out = rm.loop.run_until_complete(rm.run_single(sample(tokenizer, "#### 72")))
    took = time.monotonic() - start
    info = out["reward_extra_info"]
    assert out["reward_score"] == 0.0 and info["acc"] is None, out
    assert info["fault"] == "timeout" and info["attempts"] == 2, info
    assert '"timeout": ...' in info["error"], info["error"]
    # Two attempts stopped at their 300 ms limit (fault and attempts above say so); the time is
    # printed, not bounded.
    print(f"took {took:.1f} s for 2 attempts of 300 ms")


def test_many_samples_score_concurrently_on_verls_loop(tokenizer):
    rm = load_reward_manager(config("naive", {}), tokenizer)
    samples = [sample(tokenizer, r) for r in RESPONSES for _ in range(32)]

    async def all_of_them():
        return await asyncio.gather(*(rm.run_single(s) for s in samples))

    outs = rm.loop.run_until_complete(all_of_them())
    got = [o["reward_score"] for o in outs]
    assert got == [w for w in RESPONSES.values() for _ in range(32)]


def test_an_unknown_data_source_names_the_fix(tokenizer):
    rm = load_reward_manager(config("naive", {}), tokenizer)
    with pytest.raises(ValueError, match="reward_kwargs.reward="):
        rm.loop.run_until_complete(rm.run_single(sample(tokenizer, "x", data_source="livecodebench")))


def test_verls_function_tool_loader_registers_the_calculator():
    import importlib.util

    from verl.tools.function_tool import load_function_tools_from_path

    # The path, as the docs have users find it (importing the module would register it twice).
    path = importlib.util.find_spec("rollbox.verl_tools").origin
    tools = {t.name: t for t in load_function_tools_from_path(path)}
    calc = tools["calculator"]
    assert calc.tool_schema.function.parameters.required == ["expression"]
    assert asyncio.run(calc.call({"expression": "(3 + 4) * 2 ^ 3"})) == "56.0"
    assert asyncio.run(calc.call({"expression": "1 / 0"})).startswith("error: tool `calculator`")
    # python_exec too where rollbox has it built in, or with ROLLBOX_PYTHON_EXEC.
    import rollbox

    assert ("python_exec" in tools) == ("python-exec" in rollbox.build_info()["builtins"])


def test_register_function_tools_offers_any_component_with_its_own_schema(tmp_path):
    """A user's `function_tool_path` file naming rollbox components: verl's loader finds each
    under the name given, with the schema the component describes."""
    from verl.tools.function_tool import FUNCTION_TOOL_REGISTRY, load_function_tools_from_path

    path = tmp_path / "my_tools.py"
    path.write_text(
        "from rollbox.verl import register_function_tools\n"
        "register_function_tools({'arith': 'calculator'})\n"
    )
    tools = {t.name: t for t in load_function_tools_from_path(str(path))}
    assert list(tools) == ["arith"] and FUNCTION_TOOL_REGISTRY["arith"] is tools["arith"]
    schema = tools["arith"].tool_schema
    assert schema.function.name == "arith"
    assert "expression" in schema.function.parameters.properties
    # The component's own output, unchanged.
    assert asyncio.run(tools["arith"].call({"expression": "6 * 7"})) == '{"result":42.0}'


def test_python_exec_runs_model_code_in_the_sandbox(tmp_path):
    """With ROLLBOX_PYTHON_EXEC, the file also registers `python_exec` (loaded in a fresh
    process: verl keeps a file's tools once loaded): output and last value come back, files
    are not there, an exception is text for the model, and a loop is stopped at the 5 s
    limit."""
    import subprocess
    import sys

    wasm = ROOT / "target/wasm-guests/python/python_exec_tool.wasm"
    assert wasm.exists(), f"{wasm} is built by `cargo test --workspace`"
    script = """
import asyncio, importlib.util
from verl.tools.function_tool import load_function_tools_from_path
path = importlib.util.find_spec("rollbox.verl_tools").origin
tools = {t.name: t for t in load_function_tools_from_path(path)}
run = lambda code: asyncio.run(tools["python_exec"].call({"code": code}))
print(repr(run("print(6 * 7)")))
print(repr(run("sum(range(10))")))
print(repr(run("open('/etc/passwd').read()")))
print(repr(run("1 / 0")))
print(repr(run("while True: pass")))
"""
    out = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, "ROLLBOX_PYTHON_EXEC": str(wasm)},
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[0] == repr("42\n"), lines
    assert lines[1] == repr("45"), lines
    assert "Error" in lines[2] and "root:" not in lines[2], lines
    assert "ZeroDivisionError" in lines[3], lines
    assert lines[4].startswith("'error: tool `python-exec` failed") and "timed out" in lines[4], lines


def test_the_extras_pin_the_versions_tested_here():
    """`pip install "./python[verl]"` / `[trl]` / `[skyrl]` pin what this venv holds."""
    import tomllib
    from importlib.metadata import version

    pyproject = tomllib.loads((ROOT / "python/pyproject.toml").read_text())
    extras = pyproject["project"]["optional-dependencies"]
    pins = [p for name in ("verl", "trl", "skyrl") for p in extras[name] if "==" in p]
    assert pins, extras
    for pin in pins:
        name, want = pin.split("==")
        assert version(name) == want, f"{pin} in pyproject.toml, {version(name)} installed"
