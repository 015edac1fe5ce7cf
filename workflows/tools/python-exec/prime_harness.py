"""verl 0.9.1's `prime_code` harness, as the programs it grades see it (`"harness": "prime_code"`).

The `code` reward's `prime_code` semantics promise verl's scores, and verl's scores depend on how
its harness runs a program, not only on what the program prints. These are the facts of that
harness (verl/utils/reward_score/prime_code/testing_util.py, read and measured against its own
runs in `tests/fixtures/rewards/code_real_corpus.jsonl`); this module makes the same conditions in
a python-exec instance:

* The program is a module named `tmp_sol` loaded after the APPS harness's imports (`from
  builtins import *` among them, after verl has set `builtins.exit`, `quit` and `help` to None:
  `exit()` is a `TypeError`), with verl's guard on: `os.getcwd`, `os.remove` and the like are
  None, and `resource`, `subprocess`, `ctypes` (and a few others) cannot be imported.
* stdio: the program is rewritten before it is loaded. A last statement `if __name__ ==
  '__main__':` (spelled so by `ast.unparse`) is replaced by its body; then every line that does
  not start with `from ` or `import ` is indented by a tab into `def code():`, which starts at
  the first such line (with `stdin = sys.stdin` and `stdout = sys.stdout` before it), and
  `from`/`import` lines after it are indented too. So top-level names are locals of `code()`
  (`global x` finds nothing), a `from x import *` after the first statement is a SyntaxError,
  and a top-level `return` is valid.
* While the module loads, the streams are the worker's: stdin reads nothing, stdout writes
  nowhere. Names bound then (`from sys import stdin`, the harness's own `stdin`, `stdout`) keep
  those objects; during the case, that stdin's `readline` gives the input's lines without their
  newline (and `StopIteration` at the end), `readlines` the lines split on newlines, `read` the
  whole input, and iterating it gives nothing.
* During the case (`code()`), `sys.stdin` is an `io.StringIO` of the input (no `buffer`, no
  `fileno`), `sys.stdout` a fresh `io.StringIO` whose text is the output, and `builtins.open`
  opens the input whatever the path (a name bound by the harness's imports, `open` included, is
  the real function: `open(0)` reads the worker's empty stdin). A `SystemExit` ends the case as
  a run that finished, whatever its code; any other exception is a runtime error.
* call-based: the program is loaded as written; the function is an attribute of `Solution()` when
  the text contains `class Solution`, else of the module; each input line is one JSON argument;
  when the first argument is an object whose keys all read as integers, the call gets that
  object with integer keys and no other argument. The result must be JSON-serialisable (else a
  runtime error) and a tuple becomes a list; it is compared with the expected value in another
  instance (`check_calls`), never here.
"""

import ast
import builtins
import io
import json
import sys
import types

import stdio

# A JSON text of expected values `check_calls` takes at most (per case).
MAX_EXPECTED_CHARS = 1 << 24


def module_source(program):
    """The module text the stdio harness loads (after the APPS imports) for `program`."""
    test = program
    # The unwrap needs `__name__` in the text (ASCII: a non-ASCII identifier could normalise to
    # it): without it, nothing to parse.
    if "__name__" not in program and program.isascii():
        return _wrap(test)
    try:
        tree = ast.parse(test)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            test = ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    except Exception:  # noqa: BLE001 - the harness leaves the program as it is
        pass
    return _wrap(test)


def _wrap(test):
    """verl's line rewrite: into `def code():` from the first line that is not an import."""
    lines = [
        x + "\n" if x.startswith(("from ", "import ")) else "\t" + x + "\n"
        for x in test.split("\n")
    ]
    out = []
    started = False
    for line in lines:
        if line.startswith("\t") and not started:
            out.append("stdin = sys.stdin\nstdout = sys.stdout\ndef code():\n")
            out.append(line)
            started = True
        elif started and line.startswith(("from ", "import ")):
            out.append("\t" + line)
        else:
            out.append(line)
    return "".join(out)


# Decorators a definition may carry and stay silent (the standard library's, which print nothing
# when applied).
_QUIET_DECORATORS = {"lru_cache", "cache", "staticmethod", "classmethod", "property",
                     "cached_property", "wraps", "total_ordering", "dataclass"}


def silent_as_stdio(program):
    """Whether `program`, run as verl's second pass runs a call-based program (rewritten into
    `def code():` and called), can print nothing: every top-level statement defines a function
    or class, imports, binds a name to a literal or a name, or is a docstring or `pass`, with no
    call but a quiet decorator's. The `code` reward then knows that pass scores 0 (unless an
    expected output is blank) without running it. False whenever unsure."""
    try:
        tree = ast.parse(module_source(program))
    except (SyntaxError, ValueError, RecursionError):
        return True  # verl's -2 on every case: nothing printed
    body = []
    for stmt in tree.body:
        if isinstance(stmt, ast.FunctionDef) and stmt.name == "code":
            body.extend(stmt.body)  # what the case runs
        else:
            body.append(stmt)
    return all(_quiet(s) for s in body)


def _quiet(stmt):
    if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass, ast.Global, ast.Nonlocal)):
        return True
    if isinstance(stmt, ast.Expr):
        return isinstance(stmt.value, ast.Constant)
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
        a = stmt.args
        return (all(_quiet_decorator(d) for d in stmt.decorator_list)
                and all(_literal(d) for d in a.defaults + [d for d in a.kw_defaults if d])
                and all(_annotation(x.annotation) for x in a.posonlyargs + a.args + a.kwonlyargs
                        + [x for x in (a.vararg, a.kwarg) if x])
                and _annotation(stmt.returns) and not getattr(stmt, "type_params", None))
    if isinstance(stmt, ast.ClassDef):
        return (all(_quiet_decorator(d) for d in stmt.decorator_list)
                and all(_literal(b) for b in stmt.bases) and not stmt.keywords
                and not getattr(stmt, "type_params", None)
                and all(_quiet(s) for s in stmt.body))
    if isinstance(stmt, ast.Assign):
        return all(isinstance(t, ast.Name) for t in stmt.targets) and _literal(stmt.value)
    if isinstance(stmt, ast.AnnAssign):
        return (isinstance(stmt.target, ast.Name) and _annotation(stmt.annotation)
                and (stmt.value is None or _literal(stmt.value)))
    return False


def _quiet_decorator(d):
    if isinstance(d, ast.Call):
        return (_quiet_decorator(d.func) and all(_literal(a) for a in d.args)
                and all(_literal(k.value) for k in d.keywords))
    name = d.attr if isinstance(d, ast.Attribute) else d.id if isinstance(d, ast.Name) else None
    return name in _QUIET_DECORATORS and _literal(d)


def _annotation(a):
    return a is None or _literal(a) or (
        isinstance(a, ast.Subscript) and _literal(a.value) and _annotation_index(a.slice))


def _annotation_index(x):
    if isinstance(x, ast.Tuple):
        return all(_annotation(e) for e in x.elts)
    return _annotation(x)


def _literal(e):
    """A constant, a name, an attribute of one, or literal arithmetic and containers of those:
    evaluating it calls nothing a program wrote (a name's lookup and arithmetic on constants)."""
    if isinstance(e, (ast.Constant, ast.Name)):
        return True
    if isinstance(e, ast.Attribute):
        return _literal(e.value)
    if isinstance(e, ast.UnaryOp):
        return isinstance(e.operand, ast.Constant)
    if isinstance(e, ast.BinOp):
        return isinstance(e.left, ast.Constant) and isinstance(e.right, ast.Constant) or (
            isinstance(e.left, (ast.Constant, ast.BinOp)) and isinstance(e.right, ast.Constant)
            and _literal(e.left))
    if isinstance(e, (ast.Tuple, ast.List, ast.Set)):
        return all(_literal(x) for x in e.elts)
    if isinstance(e, ast.Dict):
        return all(k is not None and _literal(k) for k in e.keys) and all(
            _literal(v) for v in e.values)
    return False


class _Discard(io.RawIOBase):
    def writable(self):
        return True

    def write(self, b):
        return len(b)


def _worker_streams():
    """The worker's stdin (reads nothing) and stdout and stderr (write nowhere)."""
    stdin = io.TextIOWrapper(io.BufferedReader(stdio.FdIO(0, source=stdio.Source(b""))),
                             encoding="utf-8")
    out = io.TextIOWrapper(io.BufferedWriter(_Discard()), encoding="utf-8")
    err = io.TextIOWrapper(io.BufferedWriter(_Discard()), encoding="utf-8")
    return stdin, out, err


# Made once, at the snapshot's imports: each instance starts with its own copy, so a case never
# pays for building them.
_WORKER_STREAMS = _worker_streams()

# What verl's guard sets to None before it loads a program: functions of `os`, and modules
# (an import of one raises ImportError).
_GUARD_OS = (
    "kill", "system", "putenv", "remove", "removedirs", "rmdir", "fchdir", "setuid", "fork",
    "forkpty", "killpg", "rename", "renames", "truncate", "replace", "unlink", "fchmod",
    "fchown", "chmod", "chown", "chroot", "lchflags", "lchmod", "lchown", "getcwd", "chdir",
)
_GUARD_MODULES = ("ipdb", "joblib", "resource", "psutil", "tkinter", "subprocess", "ctypes")


def _guard():
    """What verl disables before it loads a program (the parts a python-exec program can see)."""
    import os

    builtins.exit = None
    builtins.quit = None
    builtins.help = None
    for name in _GUARD_OS:
        setattr(os, name, None)
    for name in _GUARD_MODULES:
        sys.modules[name] = None


def _load(source, prelude_scope, stand_in, recursion_limit):
    """`source` as the module `tmp_sol` after the APPS imports (bound in `prelude_scope`;
    `stand_in` takes their lines' place, so that nothing in `source` comes first: a `from
    __future__` import is the SyntaxError it is in verl); raises what loading raises."""
    module = types.ModuleType("tmp_sol")
    scope = module.__dict__
    # The prelude's names after the module's own (one C-level update, not a loop per name).
    scope.update(prelude_scope)
    scope["__name__"] = "tmp_sol"
    del scope["__builtins__"]
    # `from builtins import *` ran after verl's guard; `from sys import *` while the worker's
    # streams were the process's.
    scope["exit"] = scope["quit"] = scope["help"] = None
    scope["stdin"], scope["stdout"], scope["stderr"] = sys.stdin, sys.stdout, sys.stderr
    sys.modules["tmp_sol"] = module
    sys.setrecursionlimit(recursion_limit)
    exec(compile(stand_in + source, "<string>", "exec"), scope)
    return module


def run(code, stdin_text, call, prelude_scope, stand_in, recursion_limit, cap, result):
    """One case under the harness; fills `result` (app.py's program-mode reply)."""
    _guard()
    worker_in, worker_out, worker_err = _WORKER_STREAMS
    saved = sys.stdin, sys.stdout, sys.stderr, builtins.open
    sys.stdin, sys.stdout, sys.stderr = worker_in, worker_out, worker_err
    captured = io.StringIO()
    errors = io.StringIO()
    # Asked of one case of a row (the reward needs it once): the analysis parses the program.
    silent = call is not None and call.get("silent") is True and silent_as_stdio(code)
    try:
        try:
            source = code if call is not None else module_source(code)
            module = _load(source, prelude_scope, stand_in, recursion_limit)
            if call is not None:
                target = module.Solution() if "class Solution" in code else module
                method = getattr(target, call["fn_name"])
            else:
                method = module.code
        except Exception as e:  # noqa: BLE001 - verl's -2: the program could not be loaded
            result.update(ok=False, exit_code=1, error_type=type(e).__name__, error=_text(e))
            return
        result["phase"] = "run"
        if call is not None:
            _call(method, call, result, cap)
            # Read from the text, before the program ran, and only ever used to skip a pass
            # that would score 0: a program that forges it can only lower its own score.
            result["silent"] = silent
        else:
            _stdio(method, stdin_text, worker_in, captured, errors, result)
    except BaseException as e:  # noqa: BLE001 - verl's worker dies: every case is -1
        result.update(ok=False, phase="run", exit_code=1, error_type=type(e).__name__,
                      error=_text(e))
    finally:
        sys.stdin, sys.stdout, sys.stderr, builtins.open = saved
    out = captured.getvalue()
    result["stdout_truncated"] = result["truncated"] = len(out) > cap
    if len(out) > cap:
        out = out[: cap // 2] + stdio.MARKER + out[-(cap - cap // 2):]
    result["stdout"] = out
    result["stderr"] = errors.getvalue()[:cap]


def _stdio(method, inputs, worker_in, captured, errors, result):
    lines = iter(inputs.split("\n"))
    # The harness patches the worker's stdin before it replaces `sys.stdin`.
    worker_in.readline = lambda *a: next(lines)
    worker_in.readlines = lambda *a: inputs.split("\n")
    worker_in.read = lambda *a: inputs
    sys.stdin = io.StringIO(inputs)
    sys.stdout = captured
    sys.stderr = errors
    builtins.open = lambda *a, **k: io.StringIO(inputs)
    try:
        method()
    except SystemExit as e:
        result["exited"] = True
        result["exit_code"] = stdio.exit_code(e)
    except Exception as e:  # noqa: BLE001 - a runtime error: verl's -1
        result.update(ok=False, exit_code=1, error_type=type(e).__name__, error=_text(e))


def _call(method, call, result, cap):
    try:
        raw = call["inputs"]
        args = [json.loads(line) for line in raw.split("\n")]
    except Exception as e:  # noqa: BLE001 - verl's harness fails every case
        result.update(ok=False, exit_code=1, error_type=type(e).__name__, error=_text(e))
        return
    try:
        if isinstance(args[0], dict):
            args = [{int(k): v for k, v in args[0].items()}]
    except Exception:  # noqa: BLE001 - as verl: the arguments stay as they are
        pass
    try:
        value = method(*args)
        json.dumps(value)
        if isinstance(value, tuple):
            value = list(value)
    except Exception as e:  # noqa: BLE001 - a runtime error (verl's -1); SystemExit is not caught there either
        result.update(ok=False, exit_code=1, error_type=type(e).__name__, error=_text(e))
        return
    import assert_values  # the program may have replaced names; this module's own is kept

    try:
        result["result"] = assert_values.encode(value, cap)
    except assert_values.Refused as e:
        # A subclass of a plain type (whose `==` verl would ask) or a value past the cap.
        result.update(ok=False, exit_code=1, error_type="Refused", error=str(e))


def check_calls(cases):
    """Each call-based case's value against its expected JSON text, by verl's rules (a clean
    instance: the values are rebuilt from their encoding, never the program's objects)."""
    import assert_values

    out = []
    for c in cases:
        try:
            output = assert_values.decode(c["value"])
        except ValueError as e:
            out.append({"pass": False, "error": f"the value cannot be read: {e}"})
            continue
        expected = json.loads(c["expected"])
        try:
            if isinstance(expected, dict):
                expected = [{int(k): v for k, v in expected.items()}]
        except Exception:  # noqa: BLE001 - verl keeps it as it is
            pass
        try:
            if isinstance(expected[0], dict):
                expected = [{int(k): v for k, v in expected[0].items()}]
        except Exception:  # noqa: BLE001
            pass
        ok = output == expected
        if isinstance(expected, list) and expected:
            ok = ok or (output == expected[0])
        try:
            if isinstance(output[0], tuple):
                ok = ok or ([list(x) for x in output] == expected[0])
        except Exception:  # noqa: BLE001
            pass
        out.append({"pass": ok is True})
    return {"cases": out}


def _text(e):
    try:
        return f"{type(e).__name__}: {e}"[:4096]
    except BaseException:  # noqa: BLE001
        return type(e).__name__
