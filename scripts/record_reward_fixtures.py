"""Record the math-reward differential fixture: thousands of (completion, gold answer) pairs
written the way models and datasets write them, each scored by AReaL 1.0.4's own
`areal.reward.gsm8k.gsm8k_reward_fn` (math-verify, ExprExtractionConfig(try_extract_without_anchor
=True) + LatexExtractionConfig for gold and prediction, float_rounding=6, 5 s thread timeout) and
by math-verify's own defaults (`verify(parse(gold), parse(pred))`).

Run in the AReaL venv (areal==1.0.4, math-verify 0.8.0, sympy, latex2sympy2_extended; no network;
about a minute for the 5,940 pairs with two worker processes, most of it the imports):

    nice -n 10 ~/.cache/rollbox/areal-venv/bin/python scripts/record_reward_fixtures.py [--jobs N]

It writes
    tests/fixtures/rewards/math_corpus.jsonl      one pair per line, in generation order:
        {"class", "part", "completion", "answer", "areal", "math_verify"}
        class        the generator class below (boxed_number, currency, interval, ...)
        part         "gsm8k" (numbers; gold bare or a GSM8K solution ending in `#### n`) or
                     "math" (LaTeX answers; gold bare LaTeX or a MATH solution with \\boxed{})
        completion   the model text given to AReaL as `completions`
        answer       the gold exactly as given to AReaL as `answer`
        areal        the float gsm8k_reward_fn returned (1.0 / 0.0)
        math_verify  math_verify.verify(parse(answer), parse(completion)) with default configs,
                     null when it raised
    tests/fixtures/rewards/math_corpus.meta.json  versions, seed, counts per class and part,
                                                  score tallies, recording time

The pairs come from a seeded `random.Random(SEED)` and are independent of the scoring, so the
JSONL is reproducible; only the slowest-call and timing figures in the meta file vary by run.
AReaL's worker turns a call over 5 s into 0.0 (its `with ThreadPoolExecutor` still waits for
the call to finish); no generated pair comes near that, and the meta file lists any call over
1 s so that a load-dependent score would be visible.
Roughly half of each class's pairs show the gold value and half a wrong one (a near miss, an
intermediate result, a different fraction, ...), except where the class is defined by its
shape (first vs last box correct, no number at all).
"""

import argparse
import importlib.metadata
import json
import logging
import math
import multiprocessing
import os
import platform
import random
import sys
import time
from collections import Counter, defaultdict
from fractions import Fraction

SEED = 20240917
PER_CLASS = 220
OUT_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tests", "fixtures", "rewards")
OUT_JSONL = os.path.join(OUT_DIR, "math_corpus.jsonl")
OUT_META = os.path.join(OUT_DIR, "math_corpus.meta.json")

# --------------------------------------------------------------------------------------------
# Shared text pieces
# --------------------------------------------------------------------------------------------

NAMES = ["Tom", "Maria", "Jin", "Aisha", "Carlos", "Priya", "Liam", "Noor", "Sam", "Elena", "Kofi", "Mei"]
ITEMS = [
    ("apples", "bags"), ("pencils", "boxes"), ("cookies", "trays"), ("stickers", "sheets"),
    ("eggs", "cartons"), ("books", "shelves"), ("marbles", "jars"), ("cupcakes", "plates"),
    ("flowers", "pots"), ("cards", "packs"), ("bottles", "crates"), ("tickets", "rolls"),
]
UNITS = ["dollars", "cm", "apples", "hours", "minutes", "km", "miles", "pages", "students", "meters", "liters", "cookies"]
OPENERS = [
    "", "Let's solve this step by step.\n", "Let me work through this.\n", "We need to find the total.\n",
    "Step 1: understand the problem.\n", "To solve this problem, we compute each part.\n",
]

ONES = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven",
        "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
TENS = ["", "", "twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"]


def words(n: int) -> str:
    """English words for 0 <= |n| < 1,000,000."""
    if n < 0:
        return "negative " + words(-n)
    if n < 20:
        return ONES[n]
    if n < 100:
        return TENS[n // 10] + ("" if n % 10 == 0 else "-" + ONES[n % 10])
    if n < 1000:
        rest = n % 100
        return ONES[n // 100] + " hundred" + ("" if rest == 0 else " " + words(rest))
    rest = n % 1000
    return words(n // 1000) + " thousand" + ("" if rest == 0 else " " + words(rest))


def fmt_num(x) -> str:
    """A plain decimal rendering of an int, Fraction with terminating decimal, or float."""
    if isinstance(x, int):
        return str(x)
    if isinstance(x, Fraction):
        if x.denominator == 1:
            return str(x.numerator)
        return fmt_num(float(x))
    s = f"{x:.6f}".rstrip("0").rstrip(".")
    return s if s not in ("", "-0") else "0"


def join_lead(lead: str, text: str) -> str:
    """Join a lead-in and a sentence; after "..., " the sentence continues in lower case."""
    if lead.endswith(", ") and text[:1].isupper() and text[1:2].islower():
        text = text[0].lower() + text[1:]
    return lead + text


def with_commas(n: int) -> str:
    return f"{n:,}"


# --------------------------------------------------------------------------------------------
# Arithmetic "stories": steps that end in a target value, rendered as a GSM8K reference
# solution (with <<a*b=c>>c calculator annotations) or as a model's chain of thought.
# --------------------------------------------------------------------------------------------


def plan_steps(rng: random.Random, target) -> list:
    """Return [(a, op, b, result), ...] whose last result is `target` (int or Fraction)."""
    if isinstance(target, Fraction) and target.denominator != 1:
        for b in (2, 4, 5, 10, 20, 8, 25, 100):
            a = target * b
            if a.denominator == 1:
                a = int(a)
                if a > 0:
                    return [(a, "/", b, target)]
                return [(abs(a) + b, "-", abs(a) + b - a, Fraction(a, 1)), (a, "/", b, target)]
        return [(target.numerator, "/", target.denominator, target)]
    n = int(target)
    if n <= 0:
        b = rng.randint(2, 30)
        a = n + b
        if a <= 0:
            a, b = b, b - n
        return [(a, "-", b, n)]
    kind = rng.random()
    if kind < 0.45 and n >= 6:
        a = rng.randint(2, 12)
        b = max(1, rng.randint(1, max(1, n // a)))
        if a * b > n:
            b = n // a
        c = n - a * b
        steps = [(a, "*", b, a * b)]
        if c > 0:
            steps.append((a * b, "+", c, n))
        return steps
    if kind < 0.7:
        k = rng.choice([2, 3, 4, 5, 6])
        return [(n, "*", k, n * k), (n * k, "/", k, n)]
    d = rng.randint(1, 40)
    p = rng.randint(1, n + d - 1) if n + d > 1 else 1
    q = n + d - p
    if q <= 0:
        return [(n + d, "-", d, n)]
    return [(p, "+", q, n + d), (n + d, "-", d, n)]


def opstr(op: str, style: str) -> str:
    if op == "*":
        return {"gsm": "*", "ascii": " * ", "latex": " \\times ", "cdot": " \\cdot ", "x": " x "}[style]
    if op == "/":
        return {"gsm": "/", "ascii": " / ", "latex": " \\div ", "cdot": " / ", "x": " / "}[style]
    return op if style == "gsm" else f" {op} "


def gsm8k_solution(rng: random.Random, target, final_str: str | None = None) -> str:
    """A GSM8K-style reference solution ending in `#### final`."""
    name = rng.choice(NAMES)
    item, cont = rng.choice(ITEMS)
    lines = []
    steps = plan_steps(rng, target)
    for i, (a, op, b, r) in enumerate(steps):
        a_s, b_s, r_s = fmt_num(a), fmt_num(b), fmt_num(r)
        expr = f"{a_s}{op}{b_s}"
        ann = f"{expr}=<<{expr}={r_s}>>{r_s}"
        if i == 0 and op == "*":
            lines.append(f"{name} has {a_s} {cont} with {b_s} {item} each, so {name} has {ann} {item}.")
        elif i == 0 and op == "+":
            lines.append(f"{name} had {a_s} {item} and bought {b_s} more, so {name} had {ann} {item}.")
        elif i == 0 and op == "-":
            lines.append(f"{name} had {a_s} {item} and gave away {b_s}, which leaves {ann} {item}.")
        elif i == 0 and op == "/":
            lines.append(f"{name} splits {a_s} {item} into {b_s} equal {cont}, so each holds {ann} {item}.")
        elif op == "+":
            lines.append(f"Adding the other {b_s} {item} gives {ann} {item}.")
        elif op == "-":
            lines.append(f"After giving away {b_s}, there are {ann} {item} left.")
        elif op == "/":
            lines.append(f"Shared among {b_s} people, each gets {ann} {item}.")
        else:
            lines.append(f"{name} has {ann} {item}.")
    lines.append(f"#### {final_str if final_str is not None else fmt_num(target)}")
    return "\n".join(lines)


def cot(rng: random.Random, target, max_steps: int = 3, opener: bool = True) -> str:
    """A short chain of thought whose arithmetic ends in `target` (may be the wrong value)."""
    style = rng.choice(["ascii", "latex", "cdot", "x", "dollar"])
    steps = plan_steps(rng, target)[-max_steps:]
    out = [rng.choice(OPENERS) if opener else ""]
    for i, (a, op, b, r) in enumerate(steps):
        a_s, b_s, r_s = fmt_num(a), fmt_num(b), fmt_num(r)
        if style == "dollar":
            body = f"${a_s}{opstr(op, 'latex')}{b_s} = {r_s}$"
        else:
            body = f"{a_s}{opstr(op, style)}{b_s} = {r_s}"
        lead = ["First, ", "Then ", "Next, ", "So "][min(i, 3)] if len(steps) > 1 else "We get "
        out.append(f"{lead}{body}.\n")
    return "".join(out)


def near_miss(rng: random.Random, n):
    """A plausible wrong answer near the (numeric) value n."""
    if isinstance(n, Fraction) and n.denominator != 1:
        choices = [n + Fraction(1, n.denominator), n * 2, n - 1, n + 1, Fraction(n.denominator, max(1, abs(n.numerator)))]
        w = rng.choice(choices)
        return w if w != n else n + 1
    n = int(n)
    choices = [n + 1, n - 1, n + rng.randint(2, 9), n * 2, n + 10, n - 10, n * 10, n // 2 if n > 3 else n + 3, -n if n else 7]
    w = rng.choice(choices)
    return w if w != n else n + 5


def gsm_gold(rng: random.Random, n, bare: str | None = None) -> str:
    """Gold for the gsm8k part: a bare value (50%) or a GSM8K reference solution (50%)."""
    if rng.random() < 0.5:
        return bare if bare is not None else fmt_num(n)
    return gsm8k_solution(rng, n)


def pick_int(rng: random.Random, lo=2, hi=500) -> int:
    r = rng.random()
    if r < 0.6:
        return rng.randint(lo, min(hi, 120))
    return rng.randint(lo, hi)


def shown(rng: random.Random, gold):
    """(value shown in the completion, is_correct) with ~50% correct."""
    if rng.random() < 0.5:
        return gold, True
    return near_miss(rng, gold), False


# --------------------------------------------------------------------------------------------
# gsm8k part: numeric answers
# --------------------------------------------------------------------------------------------


def g_boxed_number(rng):
    n = pick_int(rng, 0, 2000)
    v, _ = shown(rng, n)
    box = rng.choice([
        "\\boxed{%s}", "$\\boxed{%s}$", "\\[\\boxed{%s}\\]", "\\boxed{ %s }", "The total is \\boxed{%s}.",
        "Therefore, the answer is $\\boxed{%s}$.", "\\(\\boxed{%s}\\)", "**Final answer:** \\boxed{%s}",
    ])
    return cot(rng, v) + box % fmt_num(v), gsm_gold(rng, n)


def g_boxed_units(rng):
    n = pick_int(rng)
    v, _ = shown(rng, n)
    u = rng.choice(UNITS)
    tmpl = rng.choice([
        "\\boxed{%s \\text{ %s}}", "\\boxed{%s\\text{ %s}}", "\\boxed{%s \\text{%s}}", "\\boxed{%s\\,\\text{%s}}",
        "\\boxed{%s \\mbox{ %s}}", "\\boxed{%s\\ \\text{%s}}", "\\boxed{%s %s}", "\\boxed{%s \\, \\mathrm{%s}}",
        "\\boxed{%s \\text{ %s}^2}",
    ])
    return cot(rng, v) + "The answer is " + tmpl % (fmt_num(v), u) + ".", gsm_gold(rng, n)


def money_value(rng):
    if rng.random() < 0.7:
        return Fraction(pick_int(rng, 1, 900))
    return Fraction(rng.randint(100, 9000), 100) if rng.random() < 0.5 else Fraction(rng.randint(2, 400) * 5, 10)


def money(v: Fraction, cents: bool) -> str:
    return f"{float(v):.2f}" if cents or v.denominator != 1 else fmt_num(v)


def g_currency(rng):
    n = money_value(rng)
    v, _ = shown(rng, n)
    cents = rng.random() < 0.4
    m = money(v, cents)
    paid = int(v) + rng.randint(1, 50)
    forms = [
        lambda: cot(rng, v) + f"\\boxed{{\\${m}}}",
        lambda: cot(rng, v) + f"So {rng.choice(NAMES)} spends ${m} in total.",
        lambda: cot(rng, v) + f"The total cost is \\${m}.",
        lambda: cot(rng, v) + f"$\\boxed{{\\${m}}}$",
        lambda: f"{rng.choice(NAMES)} paid ${paid} and got ${fmt_num(paid - v)} back, so the toy cost ${m}.",
        lambda: cot(rng, v) + f"The answer is ${m}.",
        lambda: cot(rng, v) + f"The answer is \\$ {m}.",
        lambda: cot(rng, v) + f"\\boxed{{{m} \\text{{ dollars}}}}",
        lambda: cot(rng, v) + f"Total: ${m} dollars",
        lambda: cot(rng, v) + f"\\boxed{{\\$ {m}}}",
    ]
    completion = rng.choice(forms)()
    gold = gsm_gold(rng, n) if n.denominator == 1 or rng.random() < 0.6 else gsm_gold(rng, n, money(n, True))
    return completion, gold


def g_percent(rng):
    n = rng.randint(1, 100) if rng.random() < 0.85 else rng.randint(101, 400)
    v, _ = shown(rng, n)
    vs = fmt_num(v)
    form = rng.choice([
        f"\\boxed{{{vs}\\%}}", f"{vs}%", f"The answer is {vs}%.", f"{vs} percent", f"\\boxed{{{vs}}}\\%",
        f"So the discount is ${vs}\\%$.", f"\\boxed{{{vs} \\%}}", f"\\boxed{{{vs}\\text{{%}}}}",
        f"The percentage is {vs}%, which is the answer.", f"\\boxed{{{vs}}}%",
    ])
    whole = rng.choice([20, 40, 50, 80, 200, 250, 400])
    lead = rng.choice([
        "", f"Out of {whole} students, the share is computed as a percent.\n",
        f"We divide the part by the whole and multiply by 100.\n", cot(rng, v),
    ])
    return lead + form, gsm_gold(rng, n)


def g_text_wrapper(rng):
    n = pick_int(rng)
    v, _ = shown(rng, n)
    vs = fmt_num(v)
    form = rng.choice([
        f"\\boxed{{\\text{{{vs}}}}}", f"\\text{{{vs}}}", f"\\boxed{{\\textbf{{{vs}}}}}", f"\\boxed{{\\mathrm{{{vs}}}}}",
        f"\\text{{Answer: }} {vs}", f"\\boxed{{\\text{{{vs} {rng.choice(UNITS)}}}}}", f"\\boxed{{\\mathbf{{{vs}}}}}",
        f"$\\text{{The answer is }} {vs}$", f"\\boxed{{\\text{{Answer: }} {vs}}}",
    ])
    return cot(rng, v) + form, gsm_gold(rng, n)


def g_negative(rng):
    n = -rng.randint(1, 200)
    v, _ = shown(rng, n)
    vs = fmt_num(v)
    a = abs(v) if isinstance(v, int) else v
    form = rng.choice([
        f"\\boxed{{{vs}}}", f"The answer is {vs}.", f"\\boxed{{- {a}}}" if v < 0 else f"\\boxed{{{vs}}}",
        f"The answer is \u2212{a}." if v < 0 else f"The answer is {vs}.", f"The answer is negative {a}." if v < 0 else f"The answer is {vs}.",
        f"\\boxed{{({vs})}}", f"$x = {vs}$", f"The temperature drops to {vs} degrees.",
        f"\\boxed{{{vs}^\\circ}}",
    ])
    return cot(rng, v) + form, gsm_gold(rng, n)


def g_thousands(rng):
    n = rng.choice([rng.randint(1000, 9999), rng.randint(10000, 999999), rng.randint(1000000, 99999999)])
    v, _ = shown(rng, n)
    c = with_commas(v)
    braced, thin, spaced = c.replace(",", "{,}"), c.replace(",", "\\,"), c.replace(",", " ")
    form = rng.choice([
        f"\\boxed{{{c}}}", f"The answer is {c}.", f"\\boxed{{{braced}}}", f"{c}",
        f"\\boxed{{{thin}}}", f"The answer is {spaced}.", f"So the total is ${c}.",
        f"The final answer is ${braced}$.", f"\\boxed{{{v}}}", f"The answer is {c} people.",
    ])
    gold = gsm_gold(rng, n) if rng.random() < 0.85 else with_commas(n)
    return cot(rng, v) + form, gold


def g_decimal_zeros(rng):
    r = rng.random()
    if r < 0.4:
        n = Fraction(pick_int(rng, 0, 300))
    elif r < 0.8:
        n = Fraction(rng.randint(1, 600), 2) if rng.random() < 0.5 else Fraction(rng.randint(1, 3000), 10)
    else:
        n = Fraction(rng.randint(1, 99), 100)
    v, _ = shown(rng, n)
    if v.denominator == 1:
        vs = rng.choice([f"{int(v)}.0", f"{int(v)}.00", f"{int(v)}.000", f"{int(v)}."])
    else:
        base = fmt_num(v)
        vs = rng.choice([base + "0", base + "00", base, base.lstrip("0") if base.startswith("0.") else base + "0"])
    form = rng.choice([f"\\boxed{{{vs}}}", f"The answer is {vs}.", f"{vs}", f"The final answer is ${vs}$.", f"\\boxed{{{vs}}} {rng.choice(UNITS)}"])
    gold_bare = fmt_num(n)
    gold = gsm_gold(rng, n, gold_bare) if n.denominator == 1 else (gold_bare if rng.random() < 0.6 else gsm8k_solution(rng, n))
    return cot(rng, v) + form, gold


def g_multi_box_first(rng):
    n = pick_int(rng)
    w = near_miss(rng, n)
    mid = rng.choice([
        " Wait, let me double-check. Actually I think I made an error: ",
        "\n\nHmm, but if we count again, ",
        "\nAlternatively, someone might compute ",
        "\n\nLet me verify: ",
    ])
    text = cot(rng, n) + f"So the answer is \\boxed{{{n}}}." + mid + cot(rng, w, 1, False) + f"That gives \\boxed{{{w}}}."
    return text, gsm_gold(rng, n)


def g_multi_box_last(rng):
    n = pick_int(rng)
    w = near_miss(rng, n)
    mid = rng.choice([
        " Wait, that's wrong. Let me redo it.\n", "\n\nHmm, let me recompute. ", "\nCorrection: ", "\n\nOn second thought, ",
    ])
    text = cot(rng, w, 1) + f"So the answer is \\boxed{{{w}}}." + mid + cot(rng, n, 3, False) + f"The answer is \\boxed{{{n}}}."
    return text, gsm_gold(rng, n)


def g_truncated(rng):
    n = pick_int(rng, 10, 999)
    v, _ = shown(rng, n)
    vs = fmt_num(v)
    cut = rng.randint(1, max(1, len(vs) - 1))
    kind = rng.random()
    if kind < 0.35:
        text = cot(rng, v) + f"So the answer is \\boxed{{{vs}}}. To double check, we recompute: \\boxed{{{vs[:cut]}"
    elif kind < 0.6:
        text = cot(rng, v) + f"The answer is \\boxed{{{vs}"
    elif kind < 0.8:
        text = cot(rng, v) + f"The answer is \\boxed{{{vs[:cut]}"
    else:
        w = near_miss(rng, v)
        text = cot(rng, v) + f"Thus \\boxed{{{vs}}}.\n\nWait, actually the answer should be \\boxed{{{fmt_num(w)}"
    return text, gsm_gold(rng, n)


def g_gsm8k_solution(rng):
    n = pick_int(rng, 1, 1000)
    v, _ = shown(rng, n)
    kind = rng.random()
    if kind < 0.7:
        text = gsm8k_solution(rng, v)
    elif kind < 0.85:
        # The steps compute one value, the final line states another (or the same).
        text = gsm8k_solution(rng, n, fmt_num(v))
    else:
        text = gsm8k_solution(rng, v) + f"\nThe answer is {fmt_num(v)}."
    return text, gsm_gold(rng, n)


def g_answer_is(rng):
    n = pick_int(rng, 0, 1000)
    v, _ = shown(rng, n)
    vs = fmt_num(v)
    item = rng.choice(ITEMS)[0]
    form = rng.choice([
        f"The answer is {vs}", f"The answer is {vs}.", f"The answer is: {vs}", f"Answer: {vs}", f"**Answer:** {vs}",
        f"The answer is {vs} {item}.", f"The answer is \\({vs}\\).", f"So the answer is {vs}, since {rng.randint(2, 9)} groups were used.",
        f"answer is {vs}", f"#### The answer is {vs}",
    ])
    return cot(rng, v) + form, gsm_gold(rng, n)


def g_final_answer_latex(rng):
    n = pick_int(rng, 0, 1000)
    v, _ = shown(rng, n)
    vs = fmt_num(v)
    form = rng.choice([
        f"the final answer is ${vs}$", f"Final Answer: The final answer is ${vs}$. I hope it is correct.",
        f"Therefore, the final answer is: $\\boxed{{{vs}}}$", f"The final answer is $\\boxed{{{vs}}}$.",
        f"The final answer is \\( {vs} \\).", f"Final answer: $$ {vs} $$", f"The final answer is {vs}.",
    ])
    return cot(rng, v) + form, gsm_gold(rng, n)


def g_words(rng):
    n = rng.randint(0, 100) if rng.random() < 0.75 else rng.randint(101, 5000)
    v, _ = shown(rng, n)
    w = words(v)
    form = rng.choice([
        f"The answer is {w}.", f"{w.capitalize()}.", f"{rng.choice(NAMES)} has {w} {rng.choice(ITEMS)[0]} left.",
        f"\\boxed{{\\text{{{w}}}}}", f"The answer is {w} ({v}).", f"The final answer is {w}.", f"Answer: {w}",
    ])
    lead = cot(rng, v) if rng.random() < 0.4 else rng.choice(["", "Counting carefully, ", "After working it out, "])
    return join_lead(lead, form), gsm_gold(rng, n)


def g_plain_number(rng):
    n = pick_int(rng, 0, 1000)
    v, _ = shown(rng, n)
    vs = fmt_num(v)
    name, (item, cont) = rng.choice(NAMES), rng.choice(ITEMS)
    k = rng.randint(2, 9)
    form = rng.choice([
        f"{vs}", f"So {name} has {vs} {item} left.", f"So {name} has {vs} {item} in {k} {cont}.",
        f"{vs} {item}", f"Total = {vs}", f"= {vs}", f"{name} needs {vs} more {item}.\n", f"So it is {vs}.",
    ])
    return cot(rng, v) + form, gsm_gold(rng, n)


def g_no_number(rng):
    n = pick_int(rng, 0, 1000)
    text = rng.choice([
        "I don't know.", "Let me think about this problem step by step.",
        "The problem does not give enough information to determine the answer.",
        "We need to figure out how many items are left after the sale, so we subtract what was sold from what was there.",
        "First, find the total cost. Then divide by the number of people. This gives each person's share.",
        "I'm sorry, but I can't help with that.", "The answer cannot be determined.",
        "Let's think. The farmer has some cows and some chickens; counting legs gives the answer.",
        "\\boxed{}", "The answer is", "So the answer is \\boxed{x}.", "The answer is $n$.",
    ])
    lead = rng.choice(["", "Hmm. ", "Okay, ", "Solution: "])
    return lead + text, gsm_gold(rng, n)


# --------------------------------------------------------------------------------------------
# math part: LaTeX answers
# --------------------------------------------------------------------------------------------

MATH_LEADS = [
    "", "We simplify the expression step by step.\n", "Let's solve for the unknown.\n",
    "Using the given conditions, we set up an equation and solve it.\n",
    "First we rewrite the expression in a simpler form.\n", "By the quadratic formula and some algebra, ",
]


def math_answer_form(rng, x: str) -> str:
    return rng.choice([
        f"So the answer is $\\boxed{{{x}}}$.", f"Final Answer: The final answer is ${x}$. I hope it is correct.",
        f"The answer is ${x}$.", f"\\[\\boxed{{{x}}}\\]", f"Therefore, the final answer is: $\\boxed{{{x}}}$",
        f"\\boxed{{{x}}}", f"**Answer:** ${x}$",
    ])


def math_gold(rng, x: str, context: str = "") -> str:
    """Gold for the math part: bare LaTeX (50%) or a MATH-style solution with \\boxed{} (50%)."""
    if rng.random() < 0.5:
        return x
    lead = context or rng.choice([
        "We compute the required quantity directly.", "Simplifying, we find the value.",
        "Combining the two equations gives the result.", "By symmetry the answer follows.",
    ])
    return rng.choice([
        f"{lead} Therefore, the answer is $\\boxed{{{x}}}$.", f"{lead} So we have $\\boxed{{{x}}}$.",
        f"{lead}\n\nThus the answer is $\\boxed{{{x}}}.$",
    ])


def frac_tex(f: Fraction, cmd: str = "\\frac") -> str:
    if f.denominator == 1:
        return str(f.numerator)
    sign = "-" if f < 0 else ""
    return f"{sign}{cmd}{{{abs(f.numerator)}}}{{{f.denominator}}}"


def rand_fraction(rng, neg=0.15) -> Fraction:
    while True:
        q = rng.randint(2, 16)
        p = rng.randint(1, 3 * q)
        f = Fraction(p, q)
        if f.denominator != 1:
            return -f if rng.random() < neg else f


def wrong_fraction(rng, f: Fraction) -> Fraction:
    cands = [Fraction(f.denominator, f.numerator) if f.numerator else f + 1, f + Fraction(1, f.denominator),
             Fraction(f.numerator + 1, f.denominator), Fraction(f.numerator, f.denominator + 1), -f, f * 2]
    w = rng.choice(cands)
    return w if w != f else f + 1


def m_frac_styles(rng):
    f = rand_fraction(rng)
    v = f if rng.random() < 0.5 else wrong_fraction(rng, f)
    cmd = rng.choice(["\\frac", "\\dfrac", "\\tfrac", "\\dfrac", "\\tfrac"])
    if v.denominator == 1:
        x = str(v.numerator)
    elif rng.random() < 0.15 and abs(v.numerator) < 10 and v.denominator < 10:
        x = ("-" if v < 0 else "") + f"{cmd}{abs(v.numerator)}{v.denominator}"
    elif rng.random() < 0.15 and v < 0:
        x = f"{cmd}{{{v.numerator}}}{{{v.denominator}}}"
    else:
        x = frac_tex(v, cmd)
    gold_cmd = "\\frac" if rng.random() < 0.8 else "\\dfrac"
    return join_lead(rng.choice(MATH_LEADS), math_answer_form(rng, x)), math_gold(rng, frac_tex(f, gold_cmd))


def m_frac_equivalent(rng):
    f = rand_fraction(rng, 0.1)
    correct = rng.random() < 0.5
    v = f if correct else wrong_fraction(rng, f)
    k = rng.randint(2, 6)
    forms = [
        lambda: f"{v.numerator}/{v.denominator}",
        lambda: f"\\frac{{{v.numerator * k}}}{{{v.denominator * k}}}",
        lambda: f"{float(v):.6f}".rstrip("0"),
        lambda: f"{float(v):.3f}",
        lambda: f"{float(v):.10f}".rstrip("0"),
        lambda: f"\\frac{{{v.numerator}}}{{{v.denominator}}}",
        lambda: f"{v.numerator} \\div {v.denominator}",
        lambda: f"\\frac{{{fmt_num(Fraction(v.numerator, 1) / 2)}}}{{{fmt_num(Fraction(v.denominator, 1) / 2)}}}",
    ]
    x = rng.choice(forms)()
    gold = frac_tex(f) if rng.random() < 0.85 else fmt_num(f) if (f.denominator & (f.denominator - 1) == 0 or f.denominator in (5, 10)) else frac_tex(f)
    return join_lead(rng.choice(MATH_LEADS), math_answer_form(rng, x)), math_gold(rng, gold)


def m_mixed_number(rng):
    w = rng.randint(1, 9)
    q = rng.choice([2, 3, 4, 5, 6, 8])
    p = rng.randint(1, q - 1)
    f = Fraction(w * q + p, q)
    correct = rng.random() < 0.5
    if not correct:
        w2, p2 = rng.choice([(w + 1, p), (w, max(1, p - 1) if p > 1 else p + 1 if p + 1 < q else 1), (w - 1 if w > 1 else w + 2, p)])
        if Fraction(w2 * q + p2, q) == f:
            w2 += 1
        w, p = w2, p2
    v = Fraction(w * q + p, q)
    x = rng.choice([
        f"{w}\\frac{{{p}}}{{{q}}}", f"{w} \\frac{{{p}}}{{{q}}}", f"{w}\\tfrac{{{p}}}{{{q}}}", f"{w}\\dfrac{{{p}}}{{{q}}}",
        f"{w} {p}/{q}", f"{w}\\frac{p}{q}",
        frac_tex(v), fmt_num(v) if v.denominator in (2, 4, 5, 8) else frac_tex(v), f"{w} + \\frac{{{p}}}{{{q}}}",
    ])
    tail = rng.choice(["", " cups", " hours"])
    if rng.random() < 0.3:
        completion = f"{rng.choice(NAMES)} needs {x}{tail} in total."
    else:
        completion = join_lead(rng.choice(MATH_LEADS), math_answer_form(rng, x))
    gold_x = frac_tex(f) if rng.random() < 0.7 else f"{f.numerator // f.denominator}\\frac{{{f.numerator % f.denominator}}}{{{f.denominator}}}"
    return completion, math_gold(rng, gold_x)


def interval_tex(lo, hi, lb, rb, style=0):
    los = "-\\infty" if lo is None else str(lo)
    his = "\\infty" if hi is None else str(hi)
    if style == 1:
        return f"\\left{lb}{los}, {his}\\right{rb}"
    if style == 2:
        return f"{lb}{los},{his}{rb}"
    return f"{lb}{los}, {his}{rb}"


def rand_interval(rng):
    a = rng.randint(-10, 10)
    b = a + rng.randint(1, 10)
    kind = rng.random()
    if kind < 0.2:
        return (None, b, "(", rng.choice(")]"))
    if kind < 0.4:
        return (a, None, rng.choice("(["), ")")
    return (a, b, rng.choice("(["), rng.choice(")]"))


def m_interval(rng):
    iv = rand_interval(rng)
    lo, hi, lb, rb = iv
    correct = rng.random() < 0.5
    if not correct:
        r = rng.random()
        if r < 0.4 and lo is not None and hi is not None:
            lb, rb = ("[" if lb == "(" else "("), rb
        elif r < 0.6 and hi is not None:
            rb = "]" if rb == ")" else ")"
            if lo is None and rb == "]":
                pass
        elif r < 0.8 and lo is not None:
            lo = lo - 1
        else:
            hi = (hi + 1) if hi is not None else None
            if hi is None:
                lb = "[" if lb == "(" else "("
    style = rng.choice([0, 0, 1, 2])
    x = interval_tex(lo, hi, lb, rb, style)
    if rng.random() < 0.2:
        x = "x \\in " + x
    if rng.random() < 0.1 and lo is not None and hi is not None:
        x = interval_tex(None, lo, "(", ")", 0) + " \\cup " + interval_tex(hi, None, "(", ")", 0)
    gold_iv = interval_tex(*iv)
    if rng.random() < 0.1 and iv[0] is not None and iv[1] is not None:
        gold_iv = interval_tex(None, iv[0], "(", ")") + " \\cup " + interval_tex(iv[1], None, "(", ")")
    return join_lead(rng.choice(MATH_LEADS), math_answer_form(rng, x)), math_gold(rng, gold_iv, "Solving the inequality, the solution set is an interval.")


def m_set(rng):
    k = rng.choice([2, 2, 3])
    elems = sorted(rng.sample(range(-9, 15), k))
    gold_elems = list(elems)
    correct = rng.random() < 0.5
    if not correct:
        r = rng.random()
        if r < 0.4:
            elems = elems[:-1] if len(elems) > 1 else elems + [elems[0] + 1]
        elif r < 0.7:
            elems = elems + [max(elems) + rng.randint(1, 5)]
        else:
            elems = [elems[0] + 1] + elems[1:]
            if sorted(elems) == gold_elems:
                elems = elems + [99]
    shown_elems = list(elems)
    if rng.random() < 0.5:
        rng.shuffle(shown_elems)
    inner = ", ".join(map(str, shown_elems))
    x = rng.choice([
        f"\\{{{inner}\\}}", f"\\{{{inner.replace(', ', ',')}\\}}", inner, f"\\left\\{{{inner}\\right\\}}",
        f"x = {inner}", " \\text{ or } ".join(f"x = {e}" for e in shown_elems), f"\\{{{inner}\\}}",
    ])
    gold_inner = ", ".join(map(str, gold_elems))
    gold = rng.choice([f"\\{{{gold_inner}\\}}", gold_inner, gold_inner.replace(", ", ",")])
    return join_lead(rng.choice(MATH_LEADS), math_answer_form(rng, x)), math_gold(rng, gold, "Factoring, the roots of the equation are the solutions.")


def m_tuple(rng):
    k = rng.choice([2, 2, 2, 3])
    t = [rng.randint(-9, 12) for _ in range(k)]
    if len(set(t)) == 1:
        t[0] += 1
    correct = rng.random() < 0.5
    s = list(t)
    if not correct:
        r = rng.random()
        if r < 0.4:
            s = s[::-1] if s[::-1] != s else [s[0] + 1] + s[1:]
        elif r < 0.8:
            i = rng.randrange(k)
            s[i] += rng.choice([-2, -1, 1, 2])
        else:
            s = s[:-1] if k > 2 else s + [0]
    inner = ", ".join(map(str, s))
    x = rng.choice([
        f"({inner})", f"({inner.replace(', ', ',')})", f"\\left({inner}\\right)", f"({inner})",
        ", ".join(f"{v} = {c}" for v, c in zip("xyz", s)) if len(s) <= 3 else f"({inner})",
        f"(x, y) = ({inner})" if len(s) == 2 else f"({inner})",
    ])
    gold_inner = ", ".join(map(str, t))
    gold = rng.choice([f"({gold_inner})", f"({gold_inner.replace(', ', ',')})", f"\\left( {gold_inner} \\right)"])
    return join_lead(rng.choice(MATH_LEADS), math_answer_form(rng, x)), math_gold(rng, gold, "Solving the system, we find the point.")


def matrix_tex(rows, env="pmatrix", sep=" \\\\ ", spaced=True):
    amp = " & " if spaced else "&"
    body = sep.join(amp.join(map(str, r)) for r in rows)
    if env == "array":
        return f"\\left(\\begin{{array}}{{{'c' * len(rows[0])}}} {body} \\end{{array}}\\right)"
    return f"\\begin{{{env}}} {body} \\end{{{env}}}" if spaced else f"\\begin{{{env}}}{body}\\end{{{env}}}"


def m_matrix(rng):
    shape = rng.choice([(2, 1), (3, 1), (2, 2), (2, 2), (1, 2)])
    rows = [[rng.randint(-9, 12) for _ in range(shape[1])] for _ in range(shape[0])]
    correct = rng.random() < 0.5
    s = [list(r) for r in rows]
    if not correct:
        r = rng.random()
        if r < 0.7:
            i, j = rng.randrange(shape[0]), rng.randrange(shape[1])
            s[i][j] += rng.choice([-1, 1, 2])
        else:
            s = [list(c) for c in zip(*s)] if shape[0] == shape[1] and s != [list(c) for c in zip(*s)] else [[-v for v in r] for r in s]
            if s == rows:
                s[0][0] += 1
    env = rng.choice(["pmatrix", "pmatrix", "bmatrix", "array"])
    x = matrix_tex(s, env, rng.choice([" \\\\ ", "\\\\"]), rng.random() < 0.7)
    gold = matrix_tex(rows, "pmatrix", rng.choice([" \\\\ ", "\\\\"]), rng.random() < 0.5)
    return join_lead(rng.choice(MATH_LEADS), math_answer_form(rng, x)), math_gold(rng, gold, "Multiplying the matrices entry by entry gives the product.")


SQUAREFREE = [2, 3, 5, 6, 7, 10, 11, 13, 14, 15, 17, 19, 21, 22, 23]


def sqrt_tex(k, m, style=0):
    if k == 1:
        return f"\\sqrt{{{m}}}" if style != 1 else f"\\sqrt{m}" if m < 10 else f"\\sqrt{{{m}}}"
    return [f"{k}\\sqrt{{{m}}}", f"{k}\\sqrt{m}" if m < 10 else f"{k}\\sqrt{{{m}}}", f"{k} \\sqrt{{{m}}}", f"{k} \\cdot \\sqrt{{{m}}}", f"\\sqrt{{{m}}} \\cdot {k}"][style]


def m_sqrt(rng):
    k = rng.choice([1, 1, 2, 3, 4, 5, 6])
    m = rng.choice(SQUAREFREE)
    correct = rng.random() < 0.5
    sk, sm = k, m
    if not correct:
        r = rng.random()
        if r < 0.5:
            sk = k + rng.choice([1, 2]) if k == 1 or rng.random() < 0.5 else k - 1
        else:
            sm = rng.choice([q for q in SQUAREFREE if q != m])
    kind = rng.random()
    if kind < 0.5:
        x = sqrt_tex(sk, sm, rng.randrange(5))
    elif kind < 0.65:
        x = f"\\sqrt{{{sk * sk * sm}}}"
    elif kind < 0.8:
        x = f"{sk * math.sqrt(sm):.{rng.choice([2, 4, 6, 8])}f}"
    elif kind < 0.9 and sk == 1:
        # rationalised vs not: 1/sqrt(m) == sqrt(m)/m
        x = rng.choice([f"\\frac{{1}}{{\\sqrt{{{sm}}}}}", f"\\frac{{\\sqrt{{{sm}}}}}{{{sm}}}"])
        gold = rng.choice([f"\\frac{{\\sqrt{{{m}}}}}{{{m}}}", f"\\frac{{1}}{{\\sqrt{{{m}}}}}"])
        return join_lead(rng.choice(MATH_LEADS), math_answer_form(rng, x)), math_gold(rng, gold)
    else:
        x = f"\\sqrt{{{sm}}}{sk}" if sk > 1 else f"\\sqrt{{{sm}}}"
    gold = sqrt_tex(k, m, 0)
    return join_lead(rng.choice(MATH_LEADS), math_answer_form(rng, x)), math_gold(rng, gold, "By the Pythagorean theorem we find the length.")


def pi_tex(f: Fraction, style=0):
    p, q = f.numerator, f.denominator
    if q == 1:
        return "\\pi" if p == 1 else f"{p}\\pi" if style != 2 else f"{p} \\pi"
    num = "\\pi" if p == 1 else f"{p}\\pi"
    if style == 1:
        return f"{num}/{q}"
    if style == 2:
        return f"\\frac{{{p}}}{{{q}}}\\pi"
    if style == 3:
        return f"\\dfrac{{{num}}}{{{q}}}"
    return f"\\frac{{{num}}}{{{q}}}"


def m_pi(rng):
    f = Fraction(rng.randint(1, 8), rng.choice([1, 2, 3, 4, 6]))
    correct = rng.random() < 0.5
    v = f
    if not correct:
        v = rng.choice([f * 2, f / 2, f + Fraction(1, f.denominator), f + 1])
    kind = rng.random()
    if kind < 0.6:
        x = pi_tex(v, rng.randrange(4))
    elif kind < 0.75:
        x = f"{float(v) * math.pi:.{rng.choice([2, 4, 6, 8])}f}"
    elif kind < 0.85:
        x = f"{fmt_num(v * 180)}^\\circ"
    elif kind < 0.93:
        x = f"{fmt_num(v) if v.denominator in (1, 2, 4) else frac_tex(v)}\\pi"
    else:
        x = f"{fmt_num(v * 180)} degrees"
    gold = pi_tex(f, 0) if rng.random() < 0.9 else f"{fmt_num(f * 180)}^\\circ"
    return join_lead(rng.choice(MATH_LEADS), math_answer_form(rng, x)), math_gold(rng, gold, "Converting the angle to radians gives the answer.")


def poly_tex(coeffs, var="x", order="desc"):
    """coeffs[i] is the coefficient of var**i."""
    terms = []
    idx = range(len(coeffs) - 1, -1, -1) if order == "desc" else range(len(coeffs))
    for i in idx:
        c = coeffs[i]
        if c == 0:
            continue
        mono = "" if i == 0 else var if i == 1 else f"{var}^{i}" if i < 10 else f"{var}^{{{i}}}"
        cs = str(abs(c)) if (abs(c) != 1 or i == 0) else ""
        sign = "-" if c < 0 else "+"
        terms.append((sign, cs + mono))
    if not terms:
        return "0"
    s = ("-" if terms[0][0] == "-" else "") + terms[0][1]
    for sign, t in terms[1:]:
        s += f" {sign} {t}"
    return s


def m_algebra(rng):
    var = rng.choice(["x", "x", "x", "y", "t", "n"])
    kind = rng.random()
    correct = rng.random() < 0.5
    if kind < 0.4:
        # linear / polynomial, reordered terms
        coeffs = [rng.randint(-9, 9) for _ in range(rng.choice([2, 3]))]
        if coeffs[-1] == 0:
            coeffs[-1] = rng.choice([1, 2, -3])
        gold = poly_tex(coeffs, var)
        s = list(coeffs)
        if not correct:
            i = rng.randrange(len(s))
            s[i] += rng.choice([-1, 1])
        x = poly_tex(s, var, rng.choice(["asc", "desc"]))
    elif kind < 0.75:
        # product of two linear factors vs the expanded form
        r1, r2 = rng.randint(-6, 6), rng.randint(-6, 6)
        exp_coeffs = [r1 * r2, r1 + r2, 1]  # (x + r1)(x + r2)
        fac = f"({var} {'+' if r1 >= 0 else '-'} {abs(r1)})({var} {'+' if r2 >= 0 else '-'} {abs(r2)})"
        exp = poly_tex(exp_coeffs, var)
        if rng.random() < 0.5:
            gold, x = exp, fac
        else:
            gold, x = fac, exp
        if not correct:
            if x == fac:
                x = f"({var} {'+' if r1 >= 0 else '-'} {abs(r1)})({var} {'-' if r2 >= 0 else '+'} {abs(r2) if r2 else 1})"
            else:
                c = list(exp_coeffs)
                c[0] += rng.choice([-2, -1, 1, 2])
                x = poly_tex(c, var)
    else:
        # equation forms: y = 2x + 1 vs 2x + 1, x = 3 vs 3
        m, b = rng.randint(-6, 6) or 2, rng.randint(-9, 9)
        gold = rng.choice([f"y = {poly_tex([b, m], 'x')}", poly_tex([b, m], "x")])
        sm, sb = (m, b) if correct else rng.choice([(m + 1, b), (m, b - 1), (-m, b)])
        x = rng.choice([f"y = {poly_tex([sb, sm], 'x', 'asc')}", f"y={poly_tex([sb, sm], 'x')}".replace(" ", ""),
                        poly_tex([sb, sm], "x", rng.choice(["asc", "desc"])), f"f(x) = {poly_tex([sb, sm], 'x')}",
                        f"{poly_tex([sb, sm], 'x')} = y"])
    return join_lead(rng.choice(MATH_LEADS), math_answer_form(rng, x)), math_gold(rng, gold, "Expanding and collecting like terms gives the expression.")


def m_no_answer(rng):
    f = rng.choice([rand_fraction(rng), None])
    gold_x = frac_tex(f) if f is not None else sqrt_tex(rng.randint(1, 4), rng.choice(SQUAREFREE))
    text = rng.choice([
        "We cannot simplify this further without more information.", "This problem requires the use of the quadratic formula.",
        "Let $f$ be the function defined above. We want to find its inverse.", "The answer is \\boxed{}.",
        "So the answer is $\\boxed{\\text{undefined}}$.", "There is no solution.", "Thus the expression is $\\frac{a}{b}$.",
        "Therefore, the answer is $\\boxed{x}$.", "The set of solutions is empty, $\\emptyset$.",
    ])
    return join_lead(rng.choice(MATH_LEADS), text), math_gold(rng, gold_x)


CLASSES = [
    ("boxed_number", "gsm8k", g_boxed_number),
    ("boxed_units", "gsm8k", g_boxed_units),
    ("currency", "gsm8k", g_currency),
    ("percent", "gsm8k", g_percent),
    ("text_wrapper", "gsm8k", g_text_wrapper),
    ("negative", "gsm8k", g_negative),
    ("thousands_separator", "gsm8k", g_thousands),
    ("decimal_trailing_zeros", "gsm8k", g_decimal_zeros),
    ("multi_box_first_correct", "gsm8k", g_multi_box_first),
    ("multi_box_last_correct", "gsm8k", g_multi_box_last),
    ("truncated_box", "gsm8k", g_truncated),
    ("gsm8k_solution", "gsm8k", g_gsm8k_solution),
    ("answer_is", "gsm8k", g_answer_is),
    ("final_answer_latex", "gsm8k", g_final_answer_latex),
    ("number_words", "gsm8k", g_words),
    ("plain_trailing_number", "gsm8k", g_plain_number),
    ("no_number", "gsm8k", g_no_number),
    ("frac_styles", "math", m_frac_styles),
    ("frac_equivalent", "math", m_frac_equivalent),
    ("mixed_number", "math", m_mixed_number),
    ("interval", "math", m_interval),
    ("set", "math", m_set),
    ("tuple", "math", m_tuple),
    ("matrix", "math", m_matrix),
    ("sqrt", "math", m_sqrt),
    ("pi", "math", m_pi),
    ("algebra", "math", m_algebra),
    ("math_no_answer", "math", m_no_answer),
]


def generate(seed: int = SEED, per_class: int = PER_CLASS) -> list[dict]:
    rng = random.Random(seed)
    pairs = []
    for name, part, fn in CLASSES:
        count = per_class if name != "no_number" and name != "math_no_answer" else per_class // 2
        for _ in range(count):
            completion, answer = fn(rng)
            pairs.append({"class": name, "part": part, "completion": completion, "answer": answer})
    return pairs


# --------------------------------------------------------------------------------------------
# Scoring (in worker processes: AReaL's import is heavy and math-verify is CPU-bound)
# --------------------------------------------------------------------------------------------

_AREAL = None
_MV = None
_WARNINGS = Counter()


class _CountingHandler(logging.Handler):
    def emit(self, record):
        _WARNINGS[record.getMessage().split(" for ")[0][:80]] += 1


def _init_worker():
    global _AREAL, _MV
    from areal.reward.gsm8k import gsm8k_reward_fn
    import math_verify

    _AREAL = gsm8k_reward_fn
    _MV = math_verify
    # Quiet the per-call logging; count AReaL's warnings (timeouts, exceptions) instead.
    for name in ("RewardUtils", "GSM8KReward"):
        lg = logging.getLogger(name)
        lg.handlers = [_CountingHandler()]
        lg.propagate = False
    for name in ("math_verify", "math_verify.parser", "math_verify.grader", "latex2sympy2_extended"):
        logging.getLogger(name).setLevel(logging.CRITICAL)


def _score(task):
    idx, completion, answer = task
    before = Counter(_WARNINGS)
    t0 = time.perf_counter()
    areal = _AREAL(prompt="", completions=completion, prompt_ids=[], completion_ids=[], answer=answer)
    t1 = time.perf_counter()
    try:
        mv = bool(_MV.verify(_MV.parse(answer), _MV.parse(completion)))
    except Exception:
        mv = None
    t2 = time.perf_counter()
    warned = sorted((_WARNINGS - before).keys())
    return idx, float(areal), mv, t1 - t0, t2 - t1, warned


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=max(1, min(2, os.cpu_count() or 1)))
    ap.add_argument("--limit", type=int, default=0, help="score only the first N pairs (for a quick try; writes nothing)")
    ap.add_argument("--seed", type=int, default=SEED, help="another seed gives a held-out corpus (with --out)")
    ap.add_argument("--out", default=None, help="write only the JSONL here (a held-out corpus; no meta file)")
    args = ap.parse_args()

    pairs = generate(seed=args.seed)
    if args.limit:
        pairs = pairs[: args.limit]
    tasks = [(i, p["completion"], p["answer"]) for i, p in enumerate(pairs)]
    print(f"generated {len(pairs)} pairs; scoring with {args.jobs} worker process(es)", file=sys.stderr)

    start = time.time()
    results = [None] * len(pairs)
    slow = []
    warn = Counter()
    with multiprocessing.Pool(args.jobs, initializer=_init_worker) as pool:
        for k, (idx, areal, mv, ta, tm, warned) in enumerate(pool.imap_unordered(_score, tasks, chunksize=16)):
            results[idx] = (areal, mv)
            if ta > 1.0 or tm > 1.0:
                slow.append((round(ta, 2), round(tm, 2), pairs[idx]["class"], idx))
            for w in warned:
                warn[w] += 1
            if (k + 1) % 500 == 0:
                print(f"  {k + 1}/{len(pairs)} scored, {time.time() - start:.0f} s", file=sys.stderr)
    elapsed = time.time() - start

    for p, (areal, mv) in zip(pairs, results):
        p["areal"] = areal
        p["math_verify"] = mv

    by_class = defaultdict(Counter)
    for p in pairs:
        c = by_class[(p["part"], p["class"])]
        c["pairs"] += 1
        c["areal_1"] += p["areal"] == 1.0
        c["areal_0"] += p["areal"] == 0.0
        c["math_verify_true"] += p["math_verify"] is True
        c["math_verify_null"] += p["math_verify"] is None
        c["disagree"] += (p["math_verify"] is not None) and ((p["areal"] == 1.0) != p["math_verify"])
    by_part = defaultdict(Counter)
    for (part, _), c in by_class.items():
        by_part[part].update(c)

    print(f"scored in {elapsed:.0f} s; slow calls (> 1 s): {len(slow)}; AReaL warnings: {dict(warn)}", file=sys.stderr)
    for part, c in sorted(by_part.items()):
        print(f"  {part}: {dict(c)}", file=sys.stderr)
    for (part, name), c in by_class.items():
        print(f"  {part:5} {name:24} {dict(c)}", file=sys.stderr)
    if args.limit:
        return
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            for p in pairs:
                f.write(json.dumps(p, ensure_ascii=False) + "\n")
        return

    os.makedirs(OUT_DIR, exist_ok=True)
    with open(OUT_JSONL, "w", encoding="utf-8") as f:
        for p in pairs:
            f.write(json.dumps(p, ensure_ascii=False) + "\n")

    def ver(name):
        try:
            return importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            return None

    meta = {
        "generator": "scripts/record_reward_fixtures.py",
        "seed": SEED,
        "per_class": PER_CLASS,
        "reference": "areal.reward.gsm8k.gsm8k_reward_fn(prompt='', completions=completion, prompt_ids=[], completion_ids=[], answer=answer)",
        "math_verify_column": "math_verify.verify(math_verify.parse(answer), math_verify.parse(completion)), default configs; null if it raised",
        "versions": {
            "areal": ver("areal"),
            "math_verify": ver("math-verify"),
            "sympy": ver("sympy"),
            "latex2sympy2_extended": ver("latex2sympy2_extended"),
            "antlr4-python3-runtime": ver("antlr4-python3-runtime"),
            "python": platform.python_version(),
        },
        "pairs": len(pairs),
        "parts": {part: dict(c) for part, c in sorted(by_part.items())},
        "classes": {name: {"part": part, **dict(c)} for (part, name), c in by_class.items()},
        "recording": {
            "seconds": round(elapsed),
            "jobs": args.jobs,
            "calls_over_1s": len(slow),
            "slowest": sorted(slow, reverse=True)[:10],
            "areal_warnings": dict(sorted(warn.items())),
        },
    }
    with open(OUT_META, "w", encoding="utf-8") as f:
        json.dump(meta, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {OUT_JSONL} ({os.path.getsize(OUT_JSONL)} bytes) and {OUT_META}", file=sys.stderr)


if __name__ == "__main__":
    main()
