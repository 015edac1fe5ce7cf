"""The trainers' own reward files, unchanged, as sandboxed components (issue 56): verl 0.9.1's
`utils/reward_score/gsm8k.py`, `math_reward.py` and `math_dapo.py`, and TRL 1.16's
`accuracy_reward` (with math-verify and its dependencies bundled, pinned to this venv's
versions), each read from the installed package, built by rollbox on first use from its `.py`
path, and scored through the trainer's own adapter (`rollbox.verl.compute_score`,
`rollbox.trl.reward_func`) on inputs from tests/fixtures/rewards/math_corpus.jsonl (GSM8K
completions, boxed answers, LaTeX, malformed text). Every score must equal the same function's
called natively in this process, as the trainer calls it.

TRL's file imports `..import_utils` (which imports transformers and torch, which a sandbox cannot
hold): it goes in as `trl/rewards/accuracy_rewards.py`, byte for byte, beside a two-line
`trl/import_utils.py` that says math-verify is available, the only name the file takes from it.
The venv's ANTLR runtime is 4.9.3 (verl's omegaconf pins it), which PyPI has only as a source
archive; the sandbox gets 4.13.2's wheel, so the native side runs with 4.13.2 too, and the
count of scores that differ against 4.9.3 is printed (4 of 1,200, `\\%` answers).

Run in the trainers venv (scripts/install/trainers-venv.sh) by scripts/test.sh; the builds need
componentize-py (the test venv's, on PATH there).
"""

from __future__ import annotations

import asyncio
import importlib.metadata
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import verl.utils.reward_score as verl_scores
import trl.rewards.accuracy_rewards as trl_accuracy

import rollbox
import rollbox.trl
import rollbox.verl

ROOT = Path(__file__).resolve().parents[3]
CORPUS = ROOT / "tests/fixtures/rewards/math_corpus.jsonl"
PAIRS_PER_FILE = 1200


def corpus(n: int):
    """`n` (completion, ground truth) pairs spread over the corpus: a GSM8K answer's `#### N`
    number as verl's gsm8k rows carry it, a MATH answer as it is, plus malformed shapes."""
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines()]
    step = max(1, len(rows) // n)
    out = []
    for r in rows[::step][:n]:
        answer = r["answer"]
        m = re.search(r"####\s*(.+)$", answer)
        out.append((r["completion"], m.group(1).strip() if m else answer))
    return out


def native(path: Path, function: str):
    spec = importlib.util.spec_from_file_location(f"native_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, function)


def gather(calls):
    async def main():
        return await asyncio.gather(*calls)

    return asyncio.run(main())


@pytest.mark.parametrize("file", ["gsm8k.py", "math_reward.py", "math_dapo.py"])
def test_verls_own_scorers_unchanged_give_verls_scores(file, tmp_path):
    source = Path(verl_scores.__file__).parent / file
    path = tmp_path / file
    shutil.copyfile(source, path)
    fn = native(source, "compute_score")
    pairs = corpus(PAIRS_PER_FILE)
    got = gather(
        rollbox.verl.compute_score("openai/gsm8k", completion, truth,
                                   reward=f"{path}:compute_score", style="verl")
        for completion, truth in pairs
    )
    differ = []
    for (completion, truth), r in zip(pairs, got):
        assert r["fault"] is None, (completion, r)
        want = fn(completion, truth)
        want = want["score"] if isinstance(want, dict) else want
        if r["score"] != float(want):
            differ.append((completion[-80:], truth, r["score"], want))
    print(f"{file}: {len(pairs) - len(differ)}/{len(pairs)} equal")
    assert not differ, differ[:5]


def test_trls_accuracy_reward_unchanged_with_math_verify_bundled(tmp_path):
    pkg = tmp_path / "trl"
    (pkg / "rewards").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "rewards" / "__init__.py").write_text("")
    (pkg / "import_utils.py").write_text(
        "def is_math_verify_available():\n    return True\n"
    )
    shutil.copyfile(trl_accuracy.__file__, pkg / "rewards" / "accuracy_rewards.py")
    user = tmp_path / "my_rewards.py"
    user.write_text("from trl.rewards.accuracy_rewards import accuracy_reward\n")
    # The sandbox's math-verify stack is this venv's, version for version, but for the ANTLR
    # runtime: verl's omegaconf pins 4.9.3 here, which PyPI has only as a source archive, so the
    # sandbox gets 4.13.2's wheel (latex2sympy2_extended ships a parser for each).
    pins = [f"{p}=={importlib.metadata.version(p)}"
            for p in ("math-verify", "latex2sympy2_extended", "sympy", "mpmath")]
    pins.append("antlr4-python3-runtime==4.13.2")
    requirements = tmp_path / "requirements.txt"
    requirements.write_text("".join(f"{p}\n" for p in pins))
    reward = rollbox.trl.reward_func(f"{user}:accuracy_reward", style="trl",
                                     requirements=str(requirements), timeout="60s")
    pairs = corpus(PAIRS_PER_FILE)
    prompts = [[{"role": "user", "content": "Solve it."}] for _ in pairs]
    completions = [[{"role": "assistant", "content": c}] for c, _ in pairs]
    solutions = [t for _, t in pairs]
    got = asyncio.run(reward(prompts, completions, solution=solutions))
    # Natively with the same ANTLR runtime as the sandbox (4.13.2 first on sys.path), and with
    # this venv's own 4.9.3.
    want = native_accuracy(completions, solutions, antlr_4_13_2())
    differ = [(c[-80:], t, g, w) for (c, t), g, w in zip(pairs, got, want) if g != w]
    own = trl_accuracy.accuracy_reward(completions, solutions)
    print(f"accuracy_reward: {len(pairs) - len(differ)}/{len(pairs)} equal "
          f"({sum(w is None for w in want)} skipped by TRL as unparseable gold); against "
          f"ANTLR 4.9.3 natively {sum(g != w for g, w in zip(got, own))} differ")
    assert not differ, differ[:5]


def antlr_4_13_2() -> Path:
    """antlr4-python3-runtime 4.13.2 (its py3-none-any wheel, by hash) in a folder of its own."""
    folder = Path.home() / ".cache/rollbox/antlr4-python3-runtime-4.13.2"
    if not (folder / ".complete").is_file():
        tmp = folder.with_name(folder.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        (tmp / "req.txt").write_text(
            "antlr4-python3-runtime==4.13.2 --hash=sha256:"
            "fe3835eb8d33daece0e799090eda89719dbccee7aa39ef94eed3818cafa5a7e8\n"
        )
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--require-hashes", "--only-binary=:all:", "--target", str(tmp / "site"),
                        "-r", str(tmp / "req.txt")], check=True)
        (tmp / "site" / ".complete").write_text("")
        shutil.rmtree(folder, ignore_errors=True)
        (tmp / "site").rename(folder)
        shutil.rmtree(tmp)
    return folder


def native_accuracy(completions, solutions, first_on_path: Path):
    """TRL's accuracy_reward natively, in a process with `first_on_path` before the venv."""
    script = (
        "import json, sys\n"
        f"sys.path.insert(0, {str(first_on_path)!r})\n"
        "from trl.rewards.accuracy_rewards import accuracy_reward\n"
        "c, s = json.load(sys.stdin)\n"
        "json.dump(accuracy_reward(c, s), sys.stdout)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], input=json.dumps([completions, solutions]),
                         capture_output=True, text=True, check=True)
    return json.loads(run.stdout)


OPENRLHF = '''
import re

import math_verify


def reward_func(queries, prompts, labels):
    """An OpenRLHF remote reward file's shape: math-verify on the response after the prompt."""
    rewards = []
    for query, prompt, label in zip(queries, prompts, labels):
        response = query[len(prompt):]
        gold = math_verify.parse(str(label), parsing_timeout=None)
        pred = math_verify.parse(response, parsing_timeout=None)
        ok = bool(gold) and bool(pred) and math_verify.verify(gold, pred, timeout_seconds=None)
        boxed = 0.1 if re.search(r"\\\\boxed\\{", response) else 0.0
        rewards.append((1.0 if ok else 0.0) + boxed)
    return {"rewards": rewards, "scores": rewards, "extra_logs": {"boxed": [r % 1 for r in rewards]}}
'''


def test_an_openrlhf_reward_file_gives_its_own_scores(tmp_path):
    """An OpenRLHF-shaped `reward_func(queries, prompts, labels)` file (math-verify bundled,
    pinned to this venv's versions), scored one sample at a time as `rollbox serve` scores
    OpenRLHF's batches, equals the function called natively on each sample."""
    path = tmp_path / "openrlhf_reward.py"
    path.write_text(OPENRLHF)
    pins = [f"{p}=={importlib.metadata.version(p)}"
            for p in ("math-verify", "latex2sympy2_extended", "sympy", "mpmath")]
    (tmp_path / "requirements.txt").write_text("\n".join(pins + ["antlr4-python3-runtime==4.13.2"]))
    c = rollbox.Components(rewards={"r": {
        "path": f"{path}:reward_func", "requirements": str(tmp_path / "requirements.txt"),
        "timeout": "60s"}})
    pairs = corpus(PAIRS_PER_FILE)
    prompt = "Question: solve it.\n"
    got = gather(c.score("r", completion, prompt=prompt, data={"label": truth})
                 for completion, truth in pairs)
    want = native_openrlhf(path, [prompt + c for c, _ in pairs], prompt,
                           [t for _, t in pairs], antlr_4_13_2())
    differ = [(c[-80:], t, g["score"], g["error"], w)
              for (c, t), g, w in zip(pairs, got, want) if g["score"] != w]
    print(f"openrlhf reward_func: {len(pairs) - len(differ)}/{len(pairs)} equal")
    assert not differ, differ[:5]


def native_openrlhf(path: Path, queries, prompt, labels, first_on_path: Path):
    """The file's reward_func natively, one sample a call, with `first_on_path` first."""
    script = (
        "import importlib.util, json, sys\n"
        f"sys.path.insert(0, {str(first_on_path)!r})\n"
        f"spec = importlib.util.spec_from_file_location('r', {str(path)!r})\n"
        "m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)\n"
        "q, p, l = json.load(sys.stdin)\n"
        "json.dump([m.reward_func([a], [p], [b])['rewards'][0] for a, b in zip(q, l)], sys.stdout)\n"
    )
    run = subprocess.run([sys.executable, "-c", script], input=json.dumps([queries, prompt, labels]),
                         capture_output=True, text=True, check=True)
    return json.loads(run.stdout)
