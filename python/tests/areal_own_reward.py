"""AReaL 1.0.4's own `gsm8k_reward_fn`, unchanged, as a sandboxed component (issue 56): the real
`areal/reward/gsm8k.py`, `areal/reward/__init__.py` (its MathVerifyWorker) and
`areal/utils/logging.py`, copied byte for byte from the installed package beside empty
`areal/__init__.py` and `areal/utils/__init__.py` (the real ones import the trainer, torch and
all), imported by a one-line file that rollbox builds from its `.py` path with math-verify,
its dependencies and colorlog pinned to this venv's versions. On 1,200 pairs of
tests/fixtures/rewards/math_corpus.jsonl, scored through `rollbox.Components` in AReaL's shape,
every score must equal `gsm8k_reward_fn` called natively here as AReaL calls it, and the
corpus's recorded AReaL score.

The worker's `ThreadPoolExecutor` timeout (5 s) runs inline in the sandbox (no thread starts in
WASI; rollbox_wrap's sandbox module): the host's per-call timeout bounds the call instead.

    PYTHONPATH=python ~/.cache/rollbox/areal-venv/bin/python python/tests/areal_own_reward.py
"""

import asyncio
import importlib.metadata
import json
import shutil
import sys
import tempfile
from pathlib import Path

import areal.reward as areal_reward
import areal.reward.gsm8k as areal_gsm8k
import areal.utils.logging as areal_logging
from areal.reward.gsm8k import gsm8k_reward_fn

import rollbox

ROOT = Path(__file__).resolve().parents[1].parent
CORPUS = ROOT / "tests/fixtures/rewards/math_corpus.jsonl"
PAIRS = 1200


def main() -> int:
    rows = [json.loads(line) for line in CORPUS.read_text().splitlines()]
    rows = rows[:: max(1, len(rows) // PAIRS)][:PAIRS]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        for rel, source in [
            ("areal/__init__.py", None),
            ("areal/utils/__init__.py", None),
            ("areal/utils/logging.py", areal_logging.__file__),
            ("areal/reward/__init__.py", areal_reward.__file__),
            ("areal/reward/gsm8k.py", areal_gsm8k.__file__),
        ]:
            (tmp / rel).parent.mkdir(parents=True, exist_ok=True)
            if source is None:
                (tmp / rel).write_text("")
            else:
                shutil.copyfile(source, tmp / rel)
        (tmp / "my_reward.py").write_text("from areal.reward.gsm8k import gsm8k_reward_fn\n")
        pins = ["math-verify", "latex2sympy2_extended", "sympy", "mpmath",
                "antlr4-python3-runtime", "colorlog"]
        (tmp / "requirements.txt").write_text(
            "".join(f"{p}=={importlib.metadata.version(p)}\n" for p in pins)
        )
        c = rollbox.Components(rewards={"r": {
            "path": f"{tmp}/my_reward.py:gsm8k_reward_fn", "style": "areal",
            "requirements": str(tmp / "requirements.txt"), "timeout": "60s",
        }})

        async def score_all():
            return await asyncio.gather(*[
                c.score("r", r["completion"], prompt="", data={"answer": r["answer"]})
                for r in rows
            ])

        got = asyncio.run(score_all())
    differ = []
    for r, g in zip(rows, got):
        want = gsm8k_reward_fn("", r["completion"], [], [], answer=r["answer"])
        if g["fault"] is not None or g["score"] != want or want != r["areal"]:
            differ.append((r["completion"][-60:], r["answer"][-20:], g["score"], g["error"], want,
                           r["areal"]))
    print(f"areal gsm8k_reward_fn: {len(rows) - len(differ)}/{len(rows)} equal to the native "
          f"call and the recorded score")
    for d in differ[:5]:
        print("  differs:", d)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
