"""python-exec: a rollbox tool component that runs model-written Python.

Build (the exact command; `scripts/guests/build-python-exec.sh` runs it):

    componentize-py -d wit -w tool componentize -p workflows/tools/python-exec app -o python_exec.wasm

Every call runs in a fresh component instance (the host instantiates one per call), so nothing a
snippet does survives it. The instance has WASI with nothing granted: no files, no network, no
environment, no subprocesses. Arguments: `{"code": "..."}`. The output is a JSON object:

    {"ok": true|false, "stdout": "...", "value": "repr of the last expression" | null,
     "error_type": "ZeroDivisionError" | null, "error": "the exception text" | null,
     "truncated": false}

Limits inside the instance: stdout and stderr together keep at most MAX_OUTPUT_CHARS characters
(the middle is cut, `truncated` is set), the code is at most MAX_CODE_CHARS characters. Time,
memory and fuel are the host's per-call limits (`--tool NAME=PATH,timeout=5s,memory=128MiB`):
a snippet that runs past them is stopped by the host, which reports a timeout or a trap.
"""

import ast
import builtins
import io
import json
import sys
import traceback

# The standard library modules model code reaches for, imported here so they are part of the
# pre-initialised snapshot: importing them in a snippet is a lookup in sys.modules.
import array  # noqa: F401
import base64  # noqa: F401
import binascii  # noqa: F401
import bisect  # noqa: F401
import calendar  # noqa: F401
import cmath  # noqa: F401
import collections  # noqa: F401
import contextlib  # noqa: F401
import copy  # noqa: F401
import dataclasses  # noqa: F401
import datetime  # noqa: F401
import decimal  # noqa: F401
import difflib  # noqa: F401
import enum  # noqa: F401
import fractions  # noqa: F401
import functools  # noqa: F401
import hashlib  # noqa: F401
import heapq  # noqa: F401
import itertools  # noqa: F401
import math  # noqa: F401
import numbers  # noqa: F401
import operator  # noqa: F401
import pprint  # noqa: F401
import random  # noqa: F401
import re  # noqa: F401
import statistics  # noqa: F401
import string  # noqa: F401
import struct  # noqa: F401
import textwrap  # noqa: F401
import time  # noqa: F401
import typing  # noqa: F401
import unicodedata  # noqa: F401

import wit_world
from componentize_py_types import Err

MAX_OUTPUT_CHARS = 16384
MAX_CODE_CHARS = 65536
MARKER = "...(truncated)..."

# Kept before any snippet runs: a snippet that replaces `json.dumps` cannot break the reply.
_dumps = json.dumps


class _Capped(io.TextIOBase):
    """A text stream that keeps the first and last MAX_OUTPUT_CHARS / 2 characters."""

    def __init__(self):
        self.head = []
        self.head_len = 0
        self.tail = ""
        self.dropped = False

    def writable(self):
        return True

    def write(self, s):
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        half = MAX_OUTPUT_CHARS // 2
        room = half - self.head_len
        if room > 0:
            self.head.append(s[:room])
            self.head_len += min(len(s), room)
            s = s[room:]
        if s:
            self.tail = (self.tail + s)[-half:]
            if len(self.tail) == half:
                self.dropped = True
        return len(s)

    def text(self):
        head = "".join(self.head)
        return head + (MARKER if self.dropped else "") + self.tail


def _run(code):
    out = _Capped()
    result = {"ok": True, "stdout": "", "value": None, "error_type": None, "error": None}
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = out
    try:
        tree = ast.parse(code, "<code>", "exec")
        last = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
        scope = {"__name__": "__main__", "__builtins__": builtins}
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
        return _dumps(_run(code))
