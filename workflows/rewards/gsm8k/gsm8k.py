"""Pure-Python GSM8K answer matching used by the reward component (`app.py`) and by the
AReaL-style process-pool baseline (`scripts/baselines/reward_baseline.py`)."""

import re

_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:/\d+)?")
_FRAC = re.compile(r"\\[dt]?frac\{([^{}]*)\}\{([^{}]*)\}")
# Every pattern is compiled here, at import: componentize-py snapshots the imported module, so
# a fresh instance per call never recompiles a regex (re's own cache starts empty each time).
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")
_FRACTION = re.compile(r"\(?(-?\d+(?:\.\d+)?)\)?(?:/\(?(-?\d+(?:\.\d+)?)\)?)?")


def _last_boxed(text: str):
    start = max(text.rfind("\\boxed{"), text.rfind("\\fbox{"))
    if start < 0:
        return None
    start = text.index("{", start) + 1
    depth = 1
    for i in range(start, len(text)):
        if text[i] == "{":
            depth += 1
        elif text[i] == "}":
            depth -= 1
            if depth == 0:
                return text[start:i].strip()
    return None


def _prediction(completion: str):
    boxed = _last_boxed(completion)
    if boxed is not None:
        return boxed
    if "####" in completion:
        tail = completion.rsplit("####", 1)[1].strip()
        return tail.splitlines()[0] if tail else None
    numbers = _NUMBER.findall(completion)
    return numbers[-1] if numbers else None


def _value(text: str):
    s = text.replace("$", "").replace("\\left", "").replace("\\right", "").replace("\\!", "").strip()
    s = _FRAC.sub(lambda m: f"({m.group(1)})/({m.group(2)})", s)
    s = s.rstrip(".").replace(" ", "")
    s = _THOUSANDS.sub("", s)
    m = _FRACTION.fullmatch(s)
    if not m:
        return None
    num = float(m.group(1))
    if m.group(2) is not None:
        den = float(m.group(2))
        if den == 0:
            return None
        num /= den
    return num


def _same(a: float, b: float) -> bool:
    return a == b or f"{a:.5e}" == f"{b:.5e}"



def score(completion: str, answer: str) -> float:
    """1.0 when the completion's final answer equals `answer` (6 significant digits)."""
    if "####" in answer:
        answer = answer.rsplit("####", 1)[1].strip()
    pred = _prediction(completion)
    if pred is None:
        return 0.0
    a, b = _value(pred), _value(answer)
    if a is None or b is None:
        return 1.0 if pred.strip() and pred.strip() == answer.strip() else 0.0
    return 1.0 if _same(a, b) else 0.0
