"""AReaL 1.0.4's `gsm8k_reward_fn` (math-verify 0.8.0 + sympy) as a rollbox reward component.

Build: `scripts/guests/build-math-verify-reward.sh` (pinned dependencies into a cache, then
componentize-py 0.25.1 with `--stub-wasi`); see README.md next to this file.

Scoring is AReaL's `MathVerifyWorker._verify_impl`, calling math-verify's own `parse` and
`verify` with the same configurations: gold and completion are each parsed with
`(ExprExtractionConfig(try_extract_without_anchor=True), LatexExtractionConfig())` and
`parsing_timeout=None`; the score is 1.0 when both parses are non-empty and
`verify(gold, pred, float_rounding=6, timeout_seconds=None)` is true, else 0.0; an exception
inside parse/verify gives 0.0 (AReaL's `except Exception`). AReaL's thread-based 5 s timeout is
the host's per-call reward timeout here (`--reward NAME=PATH,timeout=5s`); the signal-based
timeouts of math-verify stay off (there are no signals or threads in the component).

The gold answer is the first of `answer`, `solution`, `reward_model.ground_truth` (verl),
`ground_truth`, `final_answer`, `gold`
present (not null) in the row, passed through `str()` as AReaL does.

The component runs with `--stub-wasi` (every WASI call traps) and is pre-initialised
(componentize-py runs this module once at build time, in its CPython 3.14, and snapshots the
heap, so each `score` call starts from the imported and warmed-up state and never imports
anything). `rollbox_wrap.sandbox` (guest-sdk/python, shared with `rollbox build`) does what that
asks of any Python; this module adds the lazily imported modules and the warm-up:

* sympy imports `ctypes` (only for `sizeof(c_long)`, used with gmpy2/flint ground types);
  the WASI Python has no `_ctypes`, so a two-name stand-in is installed for that import.
* Python logging stamps every record with `time.time_ns()` (a WASI clock: a trap), and
  math-verify logs a warning on its first `parse` and `verify` with timeouts off; logging gets
  a fixed clock and a handler that forwards to the host's `log`, and `sys.stdout`,
  `sys.stderr` and `warnings` go to the host's `log` too (stdio is WASI as well).
* A `SyntaxError` from `compile(..., "exec")` (sympy's `parse_expr(evaluate=False)` runs
  `ast.parse` on candidates such as `(58).`) makes CPython `fopen` the pseudo-file
  `<unknown>` for the offending line: a trap. An audit hook refuses every `open` during a call
  with a Python exception, which CPython treats as the failed open it is natively.
* `linecache` (used when a traceback is formatted) stats and reads source files: it reads
  nothing at run time here (tracebacks come without source lines).
* sympy, antlr4 and latex2sympy import modules lazily inside functions; an import at run time
  would read the file system (a trap). `_PREIMPORT` names the lazily imported modules found
  on tests/fixtures/rewards/math_corpus.jsonl and the warm-up below reaches more; after that
  an import of a bundled module that was not imported at build time is refused, and the call
  returns `err(...)` naming it instead of trapping (an unbundled one, e.g. numpy, is simply
  absent, as in a venv without it).
* The clocks (`time.time`, `perf_counter`, ...), `os.urandom` and file opens other than
  pseudo-files raise instead of trapping, and the call returns `err(...)` naming them: a score
  computed without them could differ from AReaL's. None is reached on the corpus.
"""

import json

import wit_world
from componentize_py_types import Err
from wit_world.imports import log as host_log

# What the sandbox needs of any Python (stdio, logging, warnings and linecache to the host's
# log; the ctypes stand-in sympy imports; after `seal`, no imports, clocks, entropy or files):
# the module `rollbox build` wraps plain functions with (guest-sdk/python/rollbox_wrap).
from rollbox_wrap import sandbox


# --- the real thing ----------------------------------------------------------------------------
from math_verify.grader import verify as math_verify_verify  # noqa: E402
from math_verify.parser import ExprExtractionConfig, LatexExtractionConfig, parse  # noqa: E402

GOLD_EXTRACTION = (ExprExtractionConfig(try_extract_without_anchor=True), LatexExtractionConfig())
PRED_EXTRACTION = (ExprExtractionConfig(try_extract_without_anchor=True), LatexExtractionConfig())
PRECISION = 6


def verify_impl(response: str, ground_truth: str) -> float:
    """AReaL 1.0.4 `MathVerifyWorker._verify_impl`, verbatim but for the names."""
    gold_parsed = parse(ground_truth, extraction_config=GOLD_EXTRACTION, parsing_timeout=None)
    pred_parsed = parse(response, extraction_config=PRED_EXTRACTION, parsing_timeout=None)
    if not gold_parsed or not pred_parsed:
        return 0.0
    result = math_verify_verify(
        gold_parsed, pred_parsed, float_rounding=PRECISION, timeout_seconds=None
    )
    return 1.0 if result else 0.0


def areal_verify(response: str, ground_truth: str) -> float:
    """AReaL's `MathVerifyWorker.verify` without its thread timeout: exceptions give 0.0."""
    try:
        return verify_impl(response, ground_truth)
    except Exception as e:
        sandbox.send(host_log.Level.WARN, f"math-verify raised {type(e).__name__}: {e}; scored 0.0")
        return 0.0


# Modules the package imports lazily (inside functions), found by running math-verify over
# tests/fixtures/rewards/math_corpus.jsonl in CPython and diffing sys.modules; the warm-up
# reaches more.
_PREIMPORT = (
    "antlr4.LL1Analyzer",
    "sympy.assumptions.wrapper",
    "sympy.physics.units",
    "sympy.physics.units.systems.si",
    "sympy.sets.handlers.issubset",
    "sympy.sets.setexpr",
    "sympy.tensor.tensor",
    "sympy.combinatorics",
)
for _name in _PREIMPORT:
    __import__(_name)

# Warm-up pairs (rollbox_wrap.warmup, shared with `rollbox build`): running them here imports
# what they need, compiles math-verify's regexes and fills antlr4's DFA cache before the
# snapshot; results are discarded.
from rollbox_wrap.warmup import PAIRS as _WARMUP  # noqa: E402

for _gold, _pred in _WARMUP:
    try:
        verify_impl(_pred, _gold)
    except Exception:
        pass
    try:
        verify_impl(_gold, _pred)
    except Exception:
        pass
del _gold, _pred


# The snapshot: no file system, clocks or entropy from here on. The lazily imported modules
# are the list and warm-up above (following every lazy import of sympy would double the
# component's size).
sandbox.seal(lazy=False)


# The same keys, in the same order, as the Rust `math` reward's REFERENCE_KEYS.
_GOLD_KEYS = (
    "answer",
    "solution",
    "reward_model.ground_truth",
    "ground_truth",
    "final_answer",
    "gold",
)


def gold_answer(row):
    if isinstance(row, dict):
        for key in _GOLD_KEYS:
            value = row
            for part in key.split("."):
                value = value.get(part) if isinstance(value, dict) else None
            if value is not None:
                return value
    raise Err(
        "the row has none of " + ", ".join(f"`{k}`" for k in _GOLD_KEYS) + " to check against"
    )


class WitWorld(wit_world.WitWorld):
    def score(self, input) -> float:
        with sandbox.calling() as c:
            value, failure = None, None
            try:
                row = json.loads(input.data) if input.data else {}
            except ValueError as e:
                failure = Err(f"the row is not JSON: {e}")
            else:
                try:
                    value = areal_verify(str(input.completion), str(gold_answer(row)))
                except Err as e:
                    failure = e
        if c.violations:
            raise Err(
                "math-verify needed what the sandbox lacks, so the score may differ from "
                "AReaL's: " + "; ".join(c.violations)
            )
        if failure is not None:
            raise failure
        return value
