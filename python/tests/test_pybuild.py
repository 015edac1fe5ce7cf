"""Plain Python reward and tool functions as components (issue 56): a `.py` path where a reward
or tool is registered is built on first use (`rollbox build`'s wrapper, componentize-py) and
called through the real boundary (`Components.score` / `call_tool`). Each trainer style gives
what the same function gives called natively as its trainer calls it; hostile functions end in
a typed fault or an error naming what happened; a native dependency is refused at build; a
changed local import is rebuilt; concurrent first uses build once.

The files are written by the tests into a temporary folder. Builds are cached in the user's
cache folder (`~/.cache/rollbox/python-builds`), so a warm run builds nothing.
"""

import asyncio
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rollbox

# The test command installs componentize-py (ROLLBOX_REQUIRE_GUESTS=1): never skipped there.
pytestmark = pytest.mark.skipif(
    not (os.environ.get("COMPONENTIZE_PY") or shutil.which("componentize-py"))
    and os.environ.get("ROLLBOX_REQUIRE_GUESTS") != "1",
    reason="componentize-py is not installed (scripts/install/test-env.sh installs it)",
)

VERL = '''
import re

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    """verl's custom_reward_function shape: a dict with `score` and extras."""
    numbers = re.findall(r"-?\\d+(?:\\.\\d+)?", solution_str.replace(",", ""))
    pred = numbers[-1] if numbers else None
    right = pred is not None and float(pred) == float(ground_truth)
    bonus = 0.1 if (extra_info or {}).get("split") == "train" and "####" in solution_str else 0.0
    return {"score": (1.0 if right else 0.0) + bonus, "acc": right, "source_len": len(data_source)}
'''

TRL = '''
def accuracy(completions, solution, **kwargs):
    """TRL's reward shape: a list of floats (None to skip a sample)."""
    out = []
    for completion, sol in zip(completions, solution):
        text = completion[0]["content"] if isinstance(completion, list) else completion
        if sol == "skip":
            out.append(None)
        else:
            out.append(1.0 if text.strip().endswith(str(sol)) else 0.0)
    return out
'''

AREAL = '''
def my_reward_fn(prompt, completions, prompt_ids, completion_ids, answer, **kwargs):
    """AReaL's reward shape."""
    return float(str(answer) in completions) + 0.01 * len(completion_ids) - 0.001 * len(prompt)
'''

OPENRLHF = '''
def reward_func(queries, prompts, labels):
    """OpenRLHF's remote reward shape (lists instead of torch tensors: no torch in a sandbox)."""
    rewards = [1.0 if q.endswith(str(l)) else -1.0 for q, l in zip(queries, labels)]
    return {"rewards": rewards, "scores": rewards, "extra_logs": {"len": [len(queries[0])]}}
'''


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.write_text(textwrap.dedent(text))
    return path


def native(path: Path, function: str):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, function)


def score_all(components, name, items):
    async def main():
        return await asyncio.gather(*[
            components.score(name, completion, prompt=prompt, data=row,
                             prompt_ids=[1, 2, 3], completion_ids=list(range(len(completion) % 7)))
            for prompt, completion, row in items
        ])

    return asyncio.run(main())


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    return tmp_path_factory.mktemp("rewards")


def test_each_trainer_style_gives_the_functions_own_scores(folder):
    """verl, TRL, AReaL and OpenRLHF shapes: the sandboxed score equals the function called
    natively as its trainer calls it, on right, wrong and malformed answers."""
    files = {
        "v": (write(folder, "verl_reward.py", VERL), "compute_score"),
        "t": (write(folder, "trl_reward.py", TRL), "accuracy"),
        "a": (write(folder, "areal_reward.py", AREAL), "my_reward_fn"),
        "o": (write(folder, "openrlhf_reward.py", OPENRLHF), "reward_func"),
    }
    c = rollbox.Components(rewards={k: f"{p}:{fn}" for k, (p, fn) in files.items()})
    answers = ["72", "18", "-3", "1234"]
    completions = ["#### 72", "The answer is 18.", "so -3", "1,234", "no idea", "", "####",
                   "\\boxed{72}", "72 apples then 18"]
    items = []
    for a in answers:
        for comp in completions:
            row = {"data_source": "openai/gsm8k", "reward_model": {"ground_truth": a},
                   "extra_info": {"split": "train"}, "answer": a, "solution": a, "label": a}
            items.append((f"Q{a}: ", comp, row))
    for key, (path, fn_name) in files.items():
        fn = native(path, fn_name)
        got = score_all(c, key, items)
        for (prompt, comp, row), r in zip(items, got):
            assert r["fault"] is None, (key, comp, r)
            if key == "v":
                want = fn(data_source=row["data_source"], solution_str=comp,
                          ground_truth=row["reward_model"]["ground_truth"],
                          extra_info=row["extra_info"])["score"]
            elif key == "t":
                extra = {k: [v] for k, v in row.items()}
                want = fn(prompts=[prompt], completions=[comp], completion_ids=[[0]], **extra)[0]
            elif key == "a":
                want = fn(prompt, comp, [1, 2, 3], list(range(len(comp) % 7)), **row)
            else:
                want = fn([prompt + comp], [prompt], [row["label"]])["rewards"][0]
            assert r["score"] == want, (key, comp, r["score"], want)


def test_a_conversational_trl_row_gets_messages_and_none_is_a_clear_error(folder):
    path = write(folder, "trl_chat.py", TRL)
    c = rollbox.Components(rewards={"t": f"{path}:accuracy"})
    row = {"prompt": [{"role": "user", "content": "2+2?"}], "solution": "4"}
    [right, wrong] = score_all(c, "t", [("", "it is 4", row), ("", "it is 5", row)])
    assert (right["score"], wrong["score"]) == (1.0, 0.0), (right, wrong)
    [skipped] = score_all(c, "t", [("", "x", {"prompt": "p", "solution": "skip"})])
    assert skipped["fault"] is not None and "None" in skipped["error"], skipped


def test_an_ambiguous_function_needs_a_style_and_a_style_option_sets_it(folder):
    path = write(folder, "plain.py", "def judge(text, ref):\n    return float(text == ref)\n")
    with pytest.raises(ValueError, match="--style verl"):
        rollbox.Components(rewards={"p": f"{path}:judge"})
    with pytest.raises(ValueError, match="unknown style `ray`"):
        rollbox.Components(rewards={"p": {"path": f"{path}:judge", "style": "ray"}})


HOSTILE = '''
import math, os, sys, time

def compute_score(data_source, solution_str, ground_truth, extra_info=None):
    mode = solution_str
    if mode == "loop":
        while True:
            pass
    if mode == "alloc":
        keep = []
        while True:
            keep.append(bytearray(1 << 20))
    if mode == "raise":
        raise KeyError("no such answer")
    if mode == "exit":
        sys.exit(3)
    if mode == "recurse":
        def f(n):
            return f(n + 1) + 1
        return f(0)
    if mode == "os":
        return float(os.system("echo pwned > /tmp/rollbox-pwned"))
    if mode == "subprocess":
        import subprocess
        return float(subprocess.run(["id"]).returncode)
    if mode == "socket":
        import socket
        socket.create_connection(("127.0.0.1", 22))
        return 1.0
    if mode == "file":
        return float(len(open("/etc/passwd").read()))
    if mode == "clock":
        return time.time()
    if mode == "nan":
        return math.nan
    if mode == "inf":
        return math.inf
    if mode == "none":
        return None
    if mode == "str":
        return "1.0"
    if mode == "huge":
        return {"score": 1.0, **{f"k{i}": i for i in range(200_000)}}
    return 0.5
'''


def test_hostile_functions_end_in_a_fault_or_a_named_error(folder):
    path = write(folder, "hostile.py", HOSTILE)
    c = rollbox.Components(rewards={"h": {"path": f"{path}:compute_score", "timeout": "3s",
                                          "memory": "128MiB", "retries": 0}})
    modes = ["loop", "alloc", "raise", "exit", "recurse", "os", "subprocess", "socket", "file",
             "clock", "nan", "inf", "none", "str", "huge", "fine"]
    got = dict(zip(modes, score_all(c, "h", [("", m, {"reward_model": {"ground_truth": "1"}})
                                              for m in modes])))
    assert got["fine"]["score"] == 0.5 and got["fine"]["fault"] is None, got["fine"]
    assert got["loop"]["fault"] == "timeout", got["loop"]
    assert got["alloc"]["fault"] in ("memory_limit", "guest_error"), got["alloc"]
    assert "KeyError: 'no such answer'" in got["raise"]["error"], got["raise"]
    assert "SystemExit" in got["exit"]["error"], got["exit"]
    assert "RecursionError" in got["recurse"]["error"], got["recurse"]
    for mode in ("os", "subprocess", "socket", "file", "clock", "nan", "inf", "none", "str"):
        assert got[mode]["fault"] is not None and got[mode]["score"] is None, (mode, got[mode])
    assert "needed what the sandbox lacks" in got["file"]["error"], got["file"]
    assert "open('/etc/passwd')" in got["file"]["error"], got["file"]
    assert "time.time()" in got["clock"]["error"], got["clock"]
    assert "nan" in got["nan"]["error"] and "inf" in got["inf"]["error"], (got["nan"], got["inf"])
    assert "NoneType" in got["none"]["error"] and "str" in got["str"]["error"], got["none"]
    # A huge result dict: the score alone crosses the boundary (extras past 32 are not stats).
    assert got["huge"]["score"] == 1.0, got["huge"]
    assert not Path("/tmp/rollbox-pwned").exists()


def test_a_native_dependency_is_refused_at_build_naming_it(folder):
    path = write(folder, "needs_numpy.py",
                 "import numpy\n\ndef compute_score(data_source, solution_str, ground_truth):\n"
                 "    return float(numpy.float64(1.0))\n")
    with pytest.raises(ValueError, match=r"`numpy` has no pure-Python wheel"):
        rollbox.Components(rewards={"n": str(path)})
    # Optional imports (inside `try`) are not dependencies.
    path = write(folder, "optional_numpy.py",
                 "try:\n    import numpy\nexcept ImportError:\n    numpy = None\n\n"
                 "def compute_score(data_source, solution_str, ground_truth):\n"
                 "    return 1.0 if numpy is None else 2.0\n")
    c = rollbox.Components(rewards={"o": str(path)})
    [r] = score_all(c, "o", [("", "x", {"ground_truth": "1"})])
    assert r["score"] == 1.0, r


def test_a_changed_local_import_is_rebuilt(folder):
    sub = folder / "local"
    sub.mkdir()
    write(sub, "helper.py", "WEIGHT = 1.0\n")
    path = write(sub, "uses_helper.py",
                 "import helper\n\ndef compute_score(data_source, solution_str, ground_truth):\n"
                 "    return helper.WEIGHT\n")
    c = rollbox.Components(rewards={"h": str(path)})
    assert score_all(c, "h", [("", "x", {"ground_truth": "1"})])[0]["score"] == 1.0
    write(sub, "helper.py", "WEIGHT = 0.25\n")
    c = rollbox.Components(rewards={"h": str(path)})
    assert score_all(c, "h", [("", "x", {"ground_truth": "1"})])[0]["score"] == 0.25


def test_concurrent_first_uses_build_once(folder, tmp_path):
    path = write(folder, "concurrent.py",
                 "def compute_score(data_source, solution_str, ground_truth):\n    return 0.75\n")
    script = textwrap.dedent(f"""
        import asyncio, rollbox
        c = rollbox.Components(rewards={{"r": {str(path)!r}}})
        async def main():
            return await c.score("r", "x", data={{"ground_truth": "1"}})
        print(asyncio.run(main())["score"])
    """)
    env = dict(os.environ, ROLLBOX_CACHE_DIR=str(tmp_path / "cache"),
               PYTHONPATH=str(Path(rollbox.__file__).parents[1]))
    procs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=600) for p in procs]
    assert [o[0].strip() for o in outs] == ["0.75"] * 3, outs
    builds = sum(o[1].count("building ") for o in outs)
    assert builds == 1, [o[1] for o in outs]
    entries = [p for p in (tmp_path / "cache" / "python-builds").iterdir() if p.is_dir()]
    assert len(entries) == 1, entries
    assert oct((tmp_path / "cache" / "python-builds").stat().st_mode & 0o777) == "0o700"


def test_a_tool_from_a_typed_function(folder):
    path = write(folder, "weather.py", '''
        from typing import Literal, Optional

        def forecast(city: str, days: int = 1, unit: Optional[Literal["C", "F"]] = None) -> dict:
            """Tell the forecast for a city.

            Args:
                city: The city's name.
                days: How many days ahead.
                unit: Celsius or Fahrenheit.
            """
            return {"city": city, "days": days, "unit": unit or "C", "temps": [20] * days}
    ''')
    c = rollbox.Components(tools={"forecast": f"{path}:forecast"})
    [schema] = c.tool_schemas()
    assert schema["function"]["name"] == "forecast"
    assert schema["function"]["description"] == "Tell the forecast for a city."
    params = schema["function"]["parameters"]
    assert params["required"] == ["city"]
    assert params["properties"]["days"] == {"type": "integer", "description": "How many days ahead."}
    assert params["properties"]["unit"]["enum"] == ["C", "F"]

    async def call(args):
        return await c.call_tool("forecast", args)

    r = asyncio.run(call({"city": "Oslo", "days": 2}))
    assert json.loads(r["output"]) == {"city": "Oslo", "days": 2, "unit": "C", "temps": [20, 20]}
    r = asyncio.run(call({"town": "Oslo"}))
    assert r["fault"] is not None and "unexpected keyword argument 'town'" in r["error"], r
