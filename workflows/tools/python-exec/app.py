"""python-exec: a rollbox tool component that runs model-written Python.

Build (the exact command; `scripts/guests/build-python-exec.sh` runs it):

    componentize-py -d wit -w tool componentize -p workflows/tools/python-exec app -o python_exec.wasm

Every call runs in a fresh component instance (the host instantiates one per call), so nothing a
snippet does survives it. In a session (`Runtime::open_session`: one instance kept for an
episode's calls) snippets share one namespace: a variable, function or import one defines is
there for the next. The instance has WASI with nothing granted: no files, no network, no
environment, no subprocesses. Arguments: `{"code": "..."}`. The output is a JSON object:

    {"ok": true|false, "stdout": "...", "value": "repr of the last expression" | null,
     "error_type": "ZeroDivisionError" | null, "error": "the exception text" | null,
     "truncated": false}

Limits inside the instance: stdout and stderr together keep at most MAX_OUTPUT_CHARS characters
(the middle is cut, `truncated` is set), the code is at most MAX_CODE_CHARS characters. Time,
memory and fuel are the host's per-call limits (`--tool NAME=PATH,timeout=5s,memory=128MiB`):
a snippet that runs past them is stopped by the host, which reports a timeout or a trap.

Program mode (what the `code` reward runs each test case with): when the arguments carry
`stdin` (a string) or `call`, the code runs as a program's `__main__` instead of a snippet:

    {"code": "...", "stdin": "1 2\n", "prelude": false, "max_output_chars": 1048576,
     "call": {"fn_name": "solve", "args": [1, 2], "solution_class": false}}

`stdin` is what `input()`, `sys.stdin` (text and `.buffer`) read. `prelude` runs the APPS test
harness's imports first (`from math import *`, ..., `sys.setrecursionlimit(600000)`), as verl's
`prime_code` does. `call` then calls `fn_name` (a method of `Solution()` when `solution_class`
is true; with `"fallback"`, the program's function if it defines one, else `Solution()`'s method)
with `args` and returns its result as JSON text: the comparison is made by the caller, outside
the program's reach, on JSON values, never on an object the program built. The output is

    {"ok": true, "phase": "run", "exit_code": 0, "stdout": "...", "stderr": "...",
     "result": "[1, 2]" | null, "error_type": null, "error": null, "truncated": false}

`phase` is `compile` when the program never ran (a syntax error; in call mode also an
exception while defining it, or no `fn_name`), `run` otherwise; `exit_code` is 0, the
`SystemExit` code, or 1 for an exception; `sys.exit(0)` keeps `ok`.

Assert cases (the `code` reward's `assert_case` rows; `assert_cases.py` has the design): a case
is never appended to the program. `{"mode": "assert-plan", "code": program, "asserts": [...],
"prelude": bool}` (a clean instance: the program is parsed, not run) returns each case's parts
that need the program; program mode with `"evaluate": [parts]` evaluates them after the program
ran (after a `sys.exit(0)` too) and returns their values as type-tagged JSON text in
`evaluated`; `{"mode": "assert-check", "code": program, "prelude": bool, "cases": [{"assert",
"steps", "evaluated"}]}` (another clean instance) runs each case with those values in place and
returns `{"cases": [{"pass": bool, "error"?}]}`.
"""

import ast
import builtins
import io
import json
import sys
import traceback

# The standard library modules model code reaches for, imported here so they are part of the
# pre-initialised snapshot: importing them in a snippet is a lookup in sys.modules.
import abc  # noqa: F401
import array  # noqa: F401
import atexit
import base64  # noqa: F401
import binascii  # noqa: F401
import bisect  # noqa: F401
import calendar  # noqa: F401
import cmath  # noqa: F401
import collections  # noqa: F401
import contextlib  # noqa: F401
import csv  # noqa: F401
import copy  # noqa: F401
import dataclasses  # noqa: F401
import datetime  # noqa: F401
import decimal  # noqa: F401
import difflib  # noqa: F401
import enum  # noqa: F401
import fnmatch  # noqa: F401
import fractions  # noqa: F401
import gc  # noqa: F401
import graphlib  # noqa: F401
import functools  # noqa: F401
import hashlib  # noqa: F401
import heapq  # noqa: F401
import itertools  # noqa: F401
import logging  # noqa: F401
import math  # noqa: F401
import numbers  # noqa: F401
import operator  # noqa: F401
import pickle  # noqa: F401
import pprint  # noqa: F401
import queue  # noqa: F401
import random  # noqa: F401
import re  # noqa: F401
import resource  # noqa: F401 - a stand-in: limits are the host's (resource.py)
import secrets  # noqa: F401
import statistics  # noqa: F401
import string  # noqa: F401
import struct  # noqa: F401
import textwrap  # noqa: F401
import threading  # noqa: F401 - runs a thread to its end at start() (threads.py)
import time  # noqa: F401
import timeit  # noqa: F401
import types  # noqa: F401
import typing  # noqa: F401
import unicodedata  # noqa: F401
import unittest  # noqa: F401 - the repo environment runs a project's tests
import uuid  # noqa: F401
import weakref  # noqa: F401

try:
    # `ast.unparse` (the assert modes) imports this on first use from CPython 3.14 on: imported
    # here, it is in the snapshot (componentize-py bundles what the build imported).
    import _ast_unparse  # noqa: F401
except ImportError:  # CPython before 3.14
    pass

import assert_cases
import prime_harness
import stdio
import threads
import wit_world
from componentize_py_types import Err

MAX_OUTPUT_CHARS = 16384
# Program mode's output cap may be raised to this (test cases with large outputs).
MAX_PROGRAM_OUTPUT_CHARS = 4 << 20
MAX_CODE_CHARS = 65536
MAX_STDIN_CHARS = 16 << 20
# Cases one assert mode call takes (a row has as many as its ground truth).
MAX_ASSERT_CASES = 4096
MARKER = stdio.MARKER

# The modules the APPS test harness (and verl's prime_code after it) star-imports and imports
# ahead of every program, in its order, then its recursion limit.
_PRELUDE_STAR = (
    "string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random",
    "statistics", "itertools", "functools", "operator", "io", "sys", "json", "builtins",
    "typing",
)
_PRELUDE_PLAIN = (
    "string", "re", "datetime", "collections", "heapq", "bisect", "copy", "math", "random",
    "statistics", "itertools", "functools", "operator", "io", "sys", "json",
)
_PRELUDE_IMPORTS = "".join(f"from {m} import *\n" for m in _PRELUDE_STAR) + "".join(
    f"import {m}\n" for m in _PRELUDE_PLAIN
)
_PRELUDE_RECURSION_LIMIT = 6 * 10**5
# The prelude's names, bound once, when the snapshot is made: compiling and running the
# prelude's imports for every program cost ~2 ms of a ~3 ms case in the instance. A program
# gets a copy and is compiled after a stand-in of the prelude's lines (blank lines and `pass`),
# so its line numbers are the ones after the real prelude and nothing it writes can come first
# (a `from __future__` import is the same error as after the prelude). The recursion limit is
# set per program (it is the instance's state, not a name), and so are the names of the
# streams (below).
_PRELUDE_SCOPE = {"__name__": "__main__", "__builtins__": builtins}
exec(compile(_PRELUDE_IMPORTS, "<program>", "exec"), _PRELUDE_SCOPE)
# One line per import, then the harness's `sys.setrecursionlimit(...)` line.
_PRELUDE_STAND_IN = "\n" * _PRELUDE_IMPORTS.count("\n") + "pass\n"

# Kept before any snippet runs: a snippet that replaces `json.dumps` cannot break the reply.
_dumps = json.dumps
# The real one, whatever a program binds to the name (a class of its own called SystemExit).
_SystemExit = SystemExit


class _Capped(io.TextIOBase):
    """A text stream that keeps the first and last `cap / 2` characters."""

    def __init__(self, cap=MAX_OUTPUT_CHARS):
        self.cap = cap
        self.head = []
        self.head_len = 0
        self.tail = ""
        self.total = 0
        self.dropped = False

    def writable(self):
        return True

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        half = self.cap // 2
        self.total += len(s)
        room = half - self.head_len
        if room > 0:
            self.head.append(s[:room])
            self.head_len += min(len(s), room)
            s = s[room:]
        if s:
            self.tail = (self.tail + s)[-(self.cap - half):]
            # Cut only once more was written than the cap keeps.
            if self.total > self.cap:
                self.dropped = True
        return len(s)

    def text(self):
        head = "".join(self.head)
        return head + (MARKER if self.dropped else "") + self.tail


# The snippets' namespace. Each call is a fresh instance, so a call starts with an empty one;
# in a session (one instance kept for an episode's calls) a snippet sees the variables,
# functions and imports the session's earlier snippets left.
_SCOPE = None


def _run(code):
    global _SCOPE
    if _SCOPE is None:
        _SCOPE = {"__name__": "__main__", "__builtins__": builtins}
    out = _Capped()
    result = {"ok": True, "stdout": "", "value": None, "error_type": None, "error": None}
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = out
    try:
        tree = ast.parse(code, "<code>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        scope = _SCOPE
        exec(compile(tree, "<code>", "exec"), scope)
        if last is not None:
            value = eval(compile(last, "<code>", "eval"), scope)
            if value is not None:
                text = repr(value)
                if len(text) > MAX_OUTPUT_CHARS:
                    half = MAX_OUTPUT_CHARS // 2
                    text = text[:half] + MARKER + text[-half:]
                result["value"] = text
    except BaseException as e:  # SystemExit and KeyboardInterrupt are the snippet's too.
        result["ok"] = False
        result["error_type"] = type(e).__name__
        try:
            lines = traceback.format_exception_only(type(e), e)
            result["error"] = "".join(lines).strip()[:MAX_OUTPUT_CHARS]
        except BaseException:
            result["error"] = type(e).__name__
    finally:
        sys.stdout, sys.stderr = saved
    result["stdout"] = out.text()
    result["truncated"] = out.dropped
    return result


def _error_text(e):
    try:
        return "".join(traceback.format_exception_only(type(e), e)).strip()[:MAX_OUTPUT_CHARS]
    except BaseException:
        return type(e).__name__


def _program(code, stdin, prelude, call, cap, evaluate=None, harness=None, stdin_pipe=False):
    """Run `code` as a program (see the module's doc); then, when it ran to its end or exited
    with 0, the parts in `evaluate`."""
    result = {
        "ok": True, "phase": "compile", "exit_code": 0, "exited": False, "stdout": "",
        "stderr": "", "result": None, "error_type": None, "error": None, "truncated": False,
        "stdout_truncated": False, "evaluated": None,
    }
    if harness == "prime_code":
        prime_harness.run(code, stdin, call, _PRELUDE_SCOPE, _PRELUDE_STAND_IN,
                          _PRELUDE_RECURSION_LIMIT, cap, result)
        return result
    streams = stdio.Streams(stdin.encode("utf-8", "surrogatepass"), cap, stdin_pipe).install(sys)
    if prelude:
        scope = dict(_PRELUDE_SCOPE)
        # `from sys import *` bound the streams of its time; the prelude run here would bind
        # the program's.
        scope["stdin"], scope["stdout"], scope["stderr"] = sys.stdin, sys.stdout, sys.stderr
    else:
        scope = {"__name__": "__main__", "__builtins__": builtins}
    try:
        try:
            source = (_PRELUDE_STAND_IN if prelude else "") + code
            compiled = compile(source, "<program>", "exec")
            if call is None:
                result["phase"] = "run"
            if prelude:
                sys.setrecursionlimit(_PRELUDE_RECURSION_LIMIT)
            exec(compiled, scope)
            if call is not None:
                by_class = call["solution_class"]
                if by_class == "fallback":
                    by_class = call["fn_name"] not in scope
                if by_class:
                    target = getattr(scope["Solution"](), call["fn_name"])
                else:
                    target = scope[call["fn_name"]]
                result["phase"] = "run"
                value = target(*call["args"])
                text = _dumps(value, allow_nan=False)
                if len(text) > cap:
                    raise ValueError(f"the result's JSON is {len(text)} characters; at most {cap}")
                result["result"] = text
        except _SystemExit as e:
            result["exited"] = True
            result["exit_code"] = stdio.exit_code(e)
            if result["exit_code"] != 0:
                result["ok"] = False
                result["error_type"] = "SystemExit"
                result["error"] = _error_text(e)
        except BaseException as e:  # KeyboardInterrupt and the like are the program's too.
            result["ok"] = False
            result["exit_code"] = 1
            result["error_type"] = type(e).__name__
            result["error"] = _error_text(e)
        # What CPython does at exit: the program's exit handlers, then the streams flushed.
        _run_exit_handlers()
        streams.finish(sys)
        if evaluate is not None and result["ok"] and result["phase"] == "run":
            # An exit cannot skip the assertions: they run on what the program defined. What
            # comes back is data only (see assert_cases.evaluate).
            try:
                result["evaluated"] = assert_cases.evaluate(scope, evaluate, cap)
            except BaseException as e:  # noqa: BLE001 - no values: the cases fail
                result["error"] = _error_text(e)
    finally:
        streams.finish(sys)
        streams.restore(sys)
    result["stdout"] = streams.out.text(MARKER)
    result["stderr"] = streams.err.text(MARKER)
    result["truncated"] = streams.out.dropped or streams.err.dropped
    result["stdout_truncated"] = streams.out.dropped
    return result


def _run_exit_handlers():
    """The functions the program registered with `atexit`, as CPython runs them at exit (an
    error in one is reported on stderr and the next runs)."""
    try:
        atexit._run_exitfuncs()
    except BaseException:  # noqa: BLE001 - the program's handlers may raise anything
        pass


def _program_args(parsed):
    """The program-mode arguments, checked; raises Err naming what is wrong."""
    stdin = parsed.get("stdin", "")
    if not isinstance(stdin, str):
        raise Err("`stdin` must be a string")
    if len(stdin) > MAX_STDIN_CHARS:
        raise Err(f"`stdin` is {len(stdin)} characters; at most {MAX_STDIN_CHARS}")
    prelude = parsed.get("prelude", False)
    if not isinstance(prelude, bool):
        raise Err("`prelude` must be true or false")
    cap = parsed.get("max_output_chars", MAX_OUTPUT_CHARS)
    if not isinstance(cap, int) or isinstance(cap, bool) or not 2 <= cap <= MAX_PROGRAM_OUTPUT_CHARS:
        raise Err(f"`max_output_chars` must be an integer from 2 to {MAX_PROGRAM_OUTPUT_CHARS}")
    harness = parsed.get("harness")
    if harness not in (None, "prime_code"):
        raise Err('`harness` must be "prime_code" or absent')
    call = parsed.get("call")
    if call is not None and harness is not None:
        if not (isinstance(call, dict) and isinstance(call.get("fn_name"), str)
                and isinstance(call.get("inputs"), str)):
            raise Err('under `harness`, `call` is {"fn_name": "solve", "inputs": "1\\n[2, 3]"}: '
                      "the test's input text, one JSON argument a line")
        call = {"fn_name": call["fn_name"], "inputs": call["inputs"],
                "silent": call.get("silent") is True}
    elif call is not None:
        if not isinstance(call, dict) or not isinstance(call.get("fn_name"), str):
            raise Err('`call` needs `fn_name`, a string: {"fn_name": "solve", "args": [1, 2]}')
        args = call.get("args", [])
        if not isinstance(args, list):
            raise Err("`call.args` must be a list of the function's arguments")
        solution_class = call.get("solution_class", False)
        if not (solution_class is True or solution_class is False or solution_class == "fallback"):
            raise Err('`call.solution_class` must be true, false or "fallback"')
        call = {"fn_name": call["fn_name"], "args": args, "solution_class": solution_class}
    evaluate = parsed.get("evaluate")
    if evaluate is not None:
        evaluate = _steps(evaluate)
        if harness is not None:
            raise Err("`evaluate` and `harness` do not go together")
    stdin_kind = parsed.get("stdin_kind", "file")
    if stdin_kind not in ("file", "pipe"):
        raise Err('`stdin_kind` must be "file" (a judge\'s `<input`) or "pipe" (SandboxFusion\'s)')
    return stdin, prelude, call, cap, evaluate, harness, stdin_kind == "pipe"


def _steps(steps):
    """The parts of `evaluate`, checked (as `assert-plan` gives them)."""
    if not isinstance(steps, list) or len(steps) > assert_cases.MAX_STEPS:
        raise Err(f"`evaluate` must be a list of at most {assert_cases.MAX_STEPS} parts")
    out = []
    for s in steps:
        if not (isinstance(s, dict) and isinstance(s.get("source"), str)
                and _strings(s.get("args", [])) and _strings(s.get("held", []))
                and _strings(s.get("made", []))
                and (s.get("bind") is None or isinstance(s.get("bind"), str))
                and isinstance(s.get("want", True), bool)
                and (s.get("error") is None or isinstance(s.get("error"), str))):
            raise Err('each part of `evaluate` is {"source": "lambda ...", "args": [...], '
                      '"held": [...], "bind": null, "want": true}, as `assert-plan` gives it')
        out.append({"source": s["source"], "args": s.get("args", []), "made": s.get("made", []),
                    "held": s.get("held", []), "bind": s.get("bind"), "want": s.get("want", True),
                    "error": s.get("error")})
    return out


def _strings(v):
    return isinstance(v, list) and all(isinstance(x, str) for x in v)


def _clean(fn, *args):
    """Run `fn` (an assert mode: test code, never the program's) with its prints kept out of
    the reply."""
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = _Capped()
    try:
        return fn(*args)
    finally:
        sys.stdout, sys.stderr = saved


def _assert_mode(mode, parsed, code):
    """`assert-plan` and `assert-check` (see the module's doc)."""
    prelude = parsed.get("prelude", False)
    if not isinstance(prelude, bool):
        raise Err("`prelude` must be true or false")
    base = _PRELUDE_SCOPE if prelude else {"__name__": "__main__", "__builtins__": builtins}
    if mode == "assert-plan":
        asserts = parsed.get("asserts")
        if not (isinstance(asserts, list) and all(isinstance(a, str) for a in asserts)):
            raise Err('`asserts` must be a list of test cases, each a string of code')
        if len(asserts) > MAX_ASSERT_CASES or any(len(a) > MAX_CODE_CHARS for a in asserts):
            raise Err(f"at most {MAX_ASSERT_CASES} cases of at most {MAX_CODE_CHARS} characters")
        return _clean(assert_cases.plan, code, asserts, base)
    cases = parsed.get("cases")
    if not (isinstance(cases, list) and len(cases) <= MAX_ASSERT_CASES and all(
            isinstance(c, dict) and isinstance(c.get("assert"), str)
            and len(c["assert"]) <= MAX_CODE_CHARS and isinstance(c.get("steps"), list)
            and isinstance(c.get("evaluated"), str) for c in cases)):
        raise Err(f'`cases` must be a list of at most {MAX_ASSERT_CASES} '
                  '{"assert": text, "steps": [...], "evaluated": text}')
    return _clean(assert_cases.check, code, cases, base)


def _call_cases(parsed):
    """`prime-call-check`'s cases, checked."""
    cases = parsed.get("cases")
    if not (isinstance(cases, list) and len(cases) <= MAX_ASSERT_CASES and all(
            isinstance(c, dict) and isinstance(c.get("value"), str)
            and isinstance(c.get("expected"), str)
            and len(c["expected"]) <= prime_harness.MAX_EXPECTED_CHARS for c in cases)):
        raise Err(f"`cases` must be a list of at most {MAX_ASSERT_CASES} "
                  '{"value": the encoded result, "expected": the expected JSON text}')
    return cases


class WitWorld(wit_world.WitWorld):
    def describe(self) -> str:
        return json.dumps({
            "description": (
                "Run Python 3 code and return what it printed, the value of its last expression "
                "and the exception it raised, if any. Standard library only (math, fractions, "
                "decimal, itertools, re, json, statistics, ...); no files, network or processes. "
                "Nothing is kept between calls."
            ),
            "parameters": {
                "type": "object",
                "properties": {
                    "code": {"type": "string", "description": "The Python code to run"},
                },
                "required": ["code"],
            },
        })

    def call(self, name: str, args: str) -> str:
        try:
            parsed = json.loads(args)
        except ValueError as e:
            raise Err(f"arguments are not JSON: {e}")
        code = parsed.get("code") if isinstance(parsed, dict) else None
        if not isinstance(code, str):
            raise Err('arguments need `code`, a string: {"code": "print(1 + 1)"}')
        if len(code) > MAX_CODE_CHARS:
            raise Err(f"`code` is {len(code)} characters; at most {MAX_CODE_CHARS}")
        mode = parsed.get("mode")
        if mode in ("assert-plan", "assert-check"):
            return _dumps(_assert_mode(mode, parsed, code))
        if mode == "prime-call-check":
            return _dumps(_clean(prime_harness.check_calls, _call_cases(parsed)))
        if "stdin" in parsed or "call" in parsed:
            return _dumps(_program(code, *_program_args(parsed)))
        return _dumps(_run(code))
