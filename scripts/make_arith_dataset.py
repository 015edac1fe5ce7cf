"""Write workflows/rlvr/data/arith.jsonl: small arithmetic word problems written for rollbox
(templates and numbers below; deterministic), in the rlvr workflow's row format:
{"messages": [{"role": "user", "content": ...}], "answer": "N"}.

    python3 scripts/make_arith_dataset.py
"""

import json
import os
import random

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "workflows", "rlvr", "data", "arith.jsonl")
SUFFIX = " Give the final answer as \\boxed{number}."

TEMPLATES = [
    ("A baker fills {a} trays with {b} rolls each. How many rolls is that?", lambda a, b: a * b),
    ("Mia has {a} stickers and gets {b} more from a friend. How many stickers does she have now?", lambda a, b: a + b),
    ("A shelf holds {a} books. {b} are taken away. How many books are left?", lambda a, b: a - b),
    ("{a} marbles are shared equally among {b} children. How many marbles does each child get?", lambda a, b: a // b),
    ("A train travels {a} km every hour for {b} hours. How far does it go?", lambda a, b: a * b),
    ("Leo saves {a} coins on Monday and {b} coins on Tuesday. How many coins did he save?", lambda a, b: a + b),
    ("A garden has {a} rows of {b} tulips. How many tulips are there?", lambda a, b: a * b),
    ("Sam had {a} crayons and gave {b} to his sister. How many crayons does Sam keep?", lambda a, b: a - b),
]


def main():
    rng = random.Random(2026)
    rows = []
    for i in range(16):
        text, f = TEMPLATES[i % len(TEMPLATES)]
        a, b = rng.randint(6, 40), rng.randint(2, 9)
        if "shared equally" in text:
            a = b * rng.randint(2, 9)
        if "taken away" in text or "gave" in text:
            a = a + b
        rows.append({"messages": [{"role": "user", "content": text.format(a=a, b=b) + SUFFIX}],
                     "answer": str(f(a, b))})
    with open(OUT, "w") as fh:
        for r in rows:
            fh.write(json.dumps(r) + "\n")
    print(f"wrote {len(rows)} rows to {OUT}")


if __name__ == "__main__":
    main()
