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

Everything below the imports exists because the component runs with `--stub-wasi` (every WASI
call traps) and is pre-initialised (componentize-py runs this module once at build time, in
its CPython 3.14, and snapshots the heap, so each `score` call starts from the imported and
warmed-up state and never imports anything):

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

import gc
import io
import json
import logging
import os
import sys
import time
import types
import warnings

import wit_world
from componentize_py_types import Err
from wit_world.imports import log as host_log
# The world's other import (unused here), loaded now: componentize-py imports it after this
# module, when the hook below refuses imports.
from wit_world.imports import tools as _host_tools  # noqa: F401


class _State:
    in_call = False  # True while `score` runs (host imports are usable only then)
    violations: list = []  # sandbox features reached during the current call


def _violation(what: str):
    if _State.in_call:
        _State.violations.append(what)


def _send(level, text: str):
    """A line to the host's log while a call runs; to the real stderr at build time."""
    text = text.rstrip("\n")
    if not text:
        return
    if _State.in_call:
        host_log.log(level, text)
    else:
        sys.__stderr__.write(text + "\n")


# --- ctypes: sympy.external.gmpy does `from ctypes import c_long, sizeof` --------------------
try:
    import ctypes  # noqa: F401
except ImportError:
    _ctypes = types.ModuleType("ctypes")

    class c_long:  # noqa: N801 - the name sympy imports
        """Stand-in: only `sizeof(c_long)` is used (LONG_MAX for gmpy2/flint, absent here)."""

    _ctypes.c_long = c_long
    _ctypes.sizeof = lambda t: 4  # C `long` on wasm32
    sys.modules["ctypes"] = _ctypes


# --- stdio, logging, warnings, linecache ------------------------------------------------------
class _HostStream(io.TextIOBase):
    def __init__(self, level, name):
        self._level = level
        self._name = name
        self._buf = ""

    def writable(self):
        return True

    def write(self, s):
        if not _State.in_call:
            return sys.__stderr__.write(s)
        self._buf += s
        while "\n" in self._buf:
            line, self._buf = self._buf.split("\n", 1)
            if line.strip():
                _send(self._level, f"{self._name}: {line}")
        return len(s)

    def flush(self):
        if _State.in_call and self._buf:
            _send(self._level, f"{self._name}: {self._buf}")
            self._buf = ""


class _HostLogHandler(logging.Handler):
    _LEVELS = (
        (logging.ERROR, host_log.Level.ERROR),
        (logging.WARNING, host_log.Level.WARN),
        (logging.INFO, host_log.Level.INFO),
        (logging.DEBUG, host_log.Level.DEBUG),
    )

    def emit(self, record):
        level = next((h for p, h in self._LEVELS if record.levelno >= p), host_log.Level.TRACE)
        try:
            _send(level, f"{record.name}: {record.getMessage()}")
        except Exception:  # a bad format string must not fail the score
            pass


class _FixedClock:
    """logging's `time`: records get created=0 instead of a trapping clock read."""

    @staticmethod
    def time():
        return 0.0

    @staticmethod
    def time_ns():
        return 0


logging.time = _FixedClock
logging.logThreads = False
logging.logProcesses = False
logging.logMultiprocessing = False
logging.logAsyncioTasks = False
logging.getLogger().addHandler(_HostLogHandler())


def _showwarning(message, category, filename, lineno, file=None, line=None):
    _send(host_log.Level.WARN, f"{category.__name__}: {message} ({filename}:{lineno})")


import linecache  # noqa: E402

linecache.checkcache = lambda filename=None: None
linecache.updatecache = lambda filename, module_globals=None: []


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
        _send(host_log.Level.WARN, f"math-verify raised {type(e).__name__}: {e}; scored 0.0")
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

# (gold, completion) pairs over the shapes math-verify handles: numbers, units, currency,
# percentages, fractions, roots, pi, intervals, sets, tuples, matrices, equations,
# inequalities, functions. Running them here imports what they need, compiles math-verify's
# regexes and fills antlr4's DFA cache before the snapshot; results are discarded.
_WARMUP = (
    ("#### 72", "So the answer is \\boxed{72}."),
    ("#### 1,234", "The total is 1,234 dollars."),
    ("18", "The answer is $18.00."),
    ("-7", "Final answer: -7"),
    ("25\\%", "That is 25%."),
    ("\\frac{3}{4}", "$\\boxed{\\dfrac{6}{8}}$"),
    ("0.75", "\\boxed{3/4}"),
    ("2\\frac{1}{2}", "\\boxed{\\frac{5}{2}}"),
    ("\\sqrt{2}", "\\boxed{\\frac{2}{\\sqrt{2}}}"),
    ("2\\sqrt[3]{5}", "\\boxed{\\sqrt[3]{40}}"),
    ("\\pi", "\\boxed{3.14159265}"),
    ("2\\pi r", "\\boxed{2 \\pi r}"),
    ("(1, 3]", "\\boxed{(1,3]}"),
    ("[0, \\infty)", "\\boxed{x \\geq 0}"),
    ("(-\\infty, 2) \\cup (3, \\infty)", "\\boxed{(-\\infty,2)\\cup(3,\\infty)}"),
    ("\\{1, 2, 3\\}", "\\boxed{\\{3, 2, 1\\}}"),
    ("(2, -1)", "\\boxed{(2,-1)}"),
    ("\\begin{pmatrix} 1 & 2 \\\\ 3 & 4 \\end{pmatrix}",
     "\\boxed{\\begin{pmatrix}1&2\\\\3&4\\end{pmatrix}}"),
    ("x = 5", "\\boxed{x=5}"),
    ("y = 2x + 3", "\\boxed{y=3+2x}"),
    ("x^2 + 2x + 1", "\\boxed{(x+1)^2}"),
    ("\\frac{x+1}{x-1}", "\\boxed{\\frac{1+x}{-1+x}}"),
    ("x < 3", "\\boxed{x<3}"),
    ("\\sin^2 x + \\cos^2 x", "\\boxed{1}"),
    ("\\log_2 8", "\\boxed{3}"),
    ("\\ln(e^2)", "\\boxed{2}"),
    ("e^{i\\pi}", "\\boxed{-1}"),
    ("3 + 4i", "\\boxed{4i+3}"),
    ("\\binom{5}{2}", "\\boxed{10}"),
    ("5!", "\\boxed{120}"),
    ("|{-3}|", "\\boxed{3}"),
    ("\\lfloor 2.5 \\rfloor", "\\boxed{2}"),
    ("90^\\circ", "\\boxed{\\frac{\\pi}{2}}"),
    ("5 \\text{ cm}", "\\boxed{5\\text{ cm}}"),
    ("10 \\text{ meters}", "The length is \\boxed{10 \\text{ m}}."),
    ("\\$5.50", "It costs \\boxed{\\$5.50}."),
    ("\\text{(B)}", "\\boxed{B}"),
    ("\\sum_{k=1}^{3} k", "\\boxed{6}"),
    ("\\int_0^1 x\\,dx", "\\boxed{\\frac{1}{2}}"),
    ("\\lim_{x \\to 0} \\frac{\\sin x}{x}", "\\boxed{1}"),
    ("\\frac{d}{dx} x^2", "\\boxed{2x}"),
    ("f(x) = x^2", "\\boxed{f(x)=x^2}"),
    ("a = 1, b = 2", "\\boxed{a=1, b=2}"),
    ("1 \\text{ and } 2", "\\boxed{1, 2}"),
    ("\\emptyset", "\\boxed{\\varnothing}"),
    ("\\mathbb{R}", "\\boxed{(-\\infty,\\infty)}"),
    ("1.5e3", "\\boxed{1500}"),
    ("\\frac{1}{3}", "0.333333"),
    ("\\text{no solution}", "There is no answer here."),
    ("12", "Twelve apples, so \\boxed{12"),
)
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


# --- after the snapshot: no file system, clocks or entropy -------------------------------------
def _bundled_modules():
    """Dotted names of every module on sys.path (read now, at build time)."""
    names = set()
    for entry in sys.path:
        if not isinstance(entry, str) or not os.path.isdir(entry):
            continue
        for root, dirs, files in os.walk(entry):
            rel = os.path.relpath(root, entry)
            prefix = "" if rel == "." else rel.replace(os.sep, ".") + "."
            if prefix and not os.path.exists(os.path.join(root, "__init__.py")):
                dirs[:] = []
                continue
            dirs[:] = [d for d in dirs if d != "__pycache__" and d.isidentifier()]
            for f in files:
                if f.endswith(".py") and f != "__init__.py":
                    names.add(prefix + f[:-3])
            for d in dirs:
                names.add(prefix + d)
    return frozenset(names)


_BUNDLED = _bundled_modules()

# Drop the build-time garbage (a smaller snapshot), then move every surviving object to the
# permanent generation, so a collection during a call never walks sympy's import-time heap.
gc.collect()
gc.freeze()


class _NoRuntimeImports:
    """First on sys.meta_path: an import that would read the file system is refused."""

    @classmethod
    def find_spec(cls, name, path=None, target=None):
        if name in _BUNDLED:
            _violation(f"import of {name} (not imported at build time)")
        raise ModuleNotFoundError(f"No module named {name!r} (reward sandbox)", name=name)


def _trap_guard(name, fn_name):
    def refuse(*args, **kwargs):
        _violation(f"{name}.{fn_name}()")
        raise OSError(f"{name}.{fn_name} is unavailable in the reward sandbox")

    return refuse


for _fn in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
            "process_time", "process_time_ns", "thread_time", "thread_time_ns", "sleep"):
    if hasattr(time, _fn):
        setattr(time, _fn, _trap_guard("time", _fn))
os.urandom = _trap_guard("os", "urandom")
sys.meta_path.insert(0, _NoRuntimeImports)


def _audit(event, args):
    """Refuse file opens while a call runs (a WASI call: a trap), as a Python exception.

    CPython opens the file named in a `SyntaxError` raised by `compile(..., "exec")` to show
    the offending line: `ast.parse` names it `<unknown>`, and sympy's `parse_expr(...,
    evaluate=False)` (math-verify's expression extraction) calls `ast.parse` on candidate
    expressions like `(58).`. Natively that `fopen` fails and the message falls back to the
    source string; here it would trap. `_Py_fopen_obj` raises the `open` audit event first, and
    an exception from the hook is the same failed open. Pseudo-file names (`<...>`) are refused
    quietly; any other open is a sandbox violation.
    """
    if event != "open" or not _State.in_call:
        return
    path = args[0] if args else None
    if not (isinstance(path, str) and path.startswith("<") and path.endswith(">")):
        _violation(f"open({path!r})")
    raise FileNotFoundError(2, "file access is unavailable in the reward sandbox", path)


sys.addaudithook(_audit)
sys.stdout = _HostStream(host_log.Level.INFO, "stdout")
sys.stderr = _HostStream(host_log.Level.WARN, "stderr")
warnings.showwarning = _showwarning


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
        _State.in_call = True
        _State.violations = []
        try:
            try:
                row = json.loads(input.data) if input.data else {}
            except ValueError as e:
                raise Err(f"the row is not JSON: {e}")
            value = areal_verify(str(input.completion), str(gold_answer(row)))
            sys.stdout.flush()
            sys.stderr.flush()
            if _State.violations:
                raise Err(
                    "math-verify needed what the sandbox lacks, so the score may differ from "
                    "AReaL's: " + "; ".join(dict.fromkeys(_State.violations))
                )
            return value
        finally:
            _State.in_call = False
