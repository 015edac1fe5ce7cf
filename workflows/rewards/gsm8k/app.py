"""A GSM8K-style answer-match reward written in Python, compiled to a rollbox reward component.

Build (the exact command; `scripts/build-python-reward.sh` runs it):

    pip install componentize-py==0.25.1
    componentize-py -d wit -w reward componentize --stub-wasi \
        -p workflows/rewards/gsm8k app -o python_reward.wasm

`--stub-wasi` replaces every WASI import with a trapping stub, so the component imports only
`rollbox:workflow/log` and the `types` it uses. Load it with `--reward NAME=python_reward.wasm`.

Scoring: the reference answer is `data["answer"]` (GSM8K's `#### n` suffix taken); the prediction
is the last `\\boxed{...}`, else the text after the last `####`, else the last number in the
completion. Both are read as numbers (thousands separators, fractions `a/b`, `\\frac{a}{b}`) and
compared to 6 significant digits; 1.0 when they agree, else 0.0.
"""

import json

import wit_world
from componentize_py_types import Err

import gsm8k


class WitWorld(wit_world.WitWorld):
    def score(self, input) -> float:
        row = json.loads(input.data) if input.data else {}
        answer = row.get("answer") if isinstance(row, dict) else None
        if answer is None:
            raise Err("the row has no `answer` to check against")
        return gsm8k.score(input.completion, str(answer))
