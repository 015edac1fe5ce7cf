"""verl 0.9.1's `prime_code` harness, as the programs it grades see it (`"harness": "prime_code"`).

The `code` reward's `prime_code` semantics promise verl's scores, and verl's scores depend on how
its harness runs a program, not only on what the program prints. These are the facts of that
harness (verl/utils/reward_score/prime_code/testing_util.py, read and measured against its own
runs in `tests/fixtures/rewards/code_real_corpus.jsonl`); this module makes the same conditions in
a python-exec instance:

* The program is a module named `tmp_sol` loaded after the APPS harness's imports (`from
  builtins import *` among them, after verl has set `builtins.exit`, `quit` and `help` to None:
  `exit()` is a `TypeError`).
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
    try:
        tree = ast.parse(test)
        last = tree.body[-1]
        if isinstance(last, ast.If) and ast.unparse(last.test).strip() == "__name__ == '__main__'":
            test = ast.unparse(tree.body[:-1]) + "\n" + ast.unparse(last.body)
    except Exception:  # noqa: BLE001 - the harness leaves the program as it is
        pass
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


def _guard():
    """What verl disables before it loads a program (the parts a python-exec program can see)."""
    builtins.exit = None
    builtins.quit = None
    builtins.help = None


def _load(source, prelude_scope, stand_in, recursion_limit):
    """`source` as the module `tmp_sol` after the APPS imports (bound in `prelude_scope`;
    `stand_in` takes their lines' place, so that nothing in `source` comes first: a `from
    __future__` import is the SyntaxError it is in verl); raises what loading raises."""
    module = types.ModuleType("tmp_sol")
    scope = module.__dict__
    for k, v in prelude_scope.items():
        if k not in ("__name__", "__builtins__"):
            scope[k] = v
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
    worker_in, worker_out, worker_err = _worker_streams()
    saved = sys.stdin, sys.stdout, sys.stderr, builtins.open
    sys.stdin, sys.stdout, sys.stderr = worker_in, worker_out, worker_err
    captured = io.StringIO()
    errors = io.StringIO()
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
        result["exit_code"] = _exit_code(e)
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


def _exit_code(e):
    code = e.code
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    return 1


def _text(e):
    try:
        return f"{type(e).__name__}: {e}"[:4096]
    except BaseException:  # noqa: BLE001
        return type(e).__name__
