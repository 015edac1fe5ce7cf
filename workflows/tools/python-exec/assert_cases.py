"""Assert cases graded outside the program's reach (the `code` reward's `assert_case` rows).

verl's SandboxFusion appends a case such as `assert f(x) == y` to the program and passes it when
the run ends well, so a program that exits first, returns an object whose `__eq__` always says
yes, or reads `y` out of its caller's frame passes. Here a case is split in two:

* `plan` (a clean instance: the program is parsed, never run) finds the parts of each case that
  need the program (`f(x)`: a name the program defines, with the attribute, subscript and
  call links after it) and computes their program-free arguments by running the case's own
  statements that do not need the program;
* `evaluate` (the program's instance, after the program ran) evaluates only those parts and
  returns each result as a plain value (`assert_values.encode`): an object of the program's,
  or a subclass of a plain type, is refused;
* `check` (another clean instance) runs the case as written, each part replaced by its value
  rebuilt, and the case passes when it runs to its end (`assert` as CPython runs it).

The expected side of an assertion, the assertion's text and every test variable the program's
calls do not take never enter the program's instance. A case that cannot be split (a loop or
a function of the test's that calls the program, other than `check(candidate)` or `test_x()`
called as a statement, which is inlined) is refused with the reason, which the caller grades as
an error: never by running it in the program's instance.

Which names are the program's: a name the case binds is the test's; a builtin is always the
real one (an argument built from builtins only is built with the builtins as they were before
the program ran, and the program's imports, run again on the clean side, never rebind one); a
name the program defines is the program's, except that one which also has a clean
meaning (the prelude's, a module's name the program imports) is a helper of the test's when it
is given the program's results (`isclose(f(x), y)`); a name no one binds is the program's (made
at run time) unless it is given the program's results.

`assert_split.py` finds the parts (static: nothing runs there), `assert_values.py` writes and
reads the values. Standard library only; `app.py` calls these in each mode, and they run under
CPython as they are.
"""

import ast
import builtins
import json
import random
import sys

from assert_split import MAX_STEPS  # noqa: F401 - app.py reads it here
from assert_split import BUILTINS, PARAM, TAKE, Case, ProgramNames, Unsupported, is_take
from assert_values import MUTABLE, Opaque, Refused, decode, encode, quote, update_in_place

# Characters of an argument the case passes the program, encoded.
MAX_ARG_CHARS = 1 << 24
# The builtins as they are before any program runs: an argument built from builtins only is
# made with these, whatever the program did to its own (`builtins.sorted = ...`).
_SEALED_BUILTINS = dict(vars(builtins))


def _clean_scope(base, names):
    """A fresh scope for a case: `base` (the prelude's names, or none) and what the program's
    imports bind, each run on its own (one that fails is left out: the program could not make
    it either). An import binds no builtin and no dunder, and renames nothing to a name with a
    clean meaning (`from operator import is_not as isinstance`, `import cmath as math`): the
    case's helpers stay the real ones."""
    scope = dict(base)
    reserved = BUILTINS | set(base) | set(getattr(sys, "stdlib_module_names", ()))
    for node in names.imports:
        tmp = {"__builtins__": builtins}
        try:
            exec(compile(ast.fix_missing_locations(ast.Module(body=[node], type_ignores=[])),
                         "<imports>", "exec"), tmp)
        except BaseException:  # noqa: BLE001
            continue
        renamed = {a.asname for a in node.names
                   if a.asname is not None and a.asname != a.name.split(".")[-1]}
        for name, value in tmp.items():
            if name.startswith("__") or name in BUILTINS or (name in renamed
                                                              and name in reserved):
                continue
            scope[name] = value
    return scope


def _clean_names(scope):
    return frozenset(scope) - {"__name__", "__builtins__", "__doc__", "__loader__", "__spec__",
                               "__package__"}


def plan(program, entries, base_scope):
    """Each case's parts: `{"cases": [{"steps": [...]} | {"error": why}]}`. A step is
    `{"source": "lambda __rollbox_arg0, __rollbox_made0, r: ...", "args": [encoded, ...],
    "made": [source, ...], "held": [...], "bind": name | null, "want": bool}`: `args` the values
    of the test's that the part takes, `made` the arguments built from builtins only (made
    where the part runs), `held` the program's objects earlier parts bound; with `"error"`
    instead of `args` where computing them raised (the check raises it if the case gets
    there)."""
    names = ProgramNames(program)
    clean_names = _clean_names(_clean_scope(base_scope, names))
    cases = []
    for entry in entries:
        try:
            case = Case(entry, names, clean_names)
        except Unsupported as e:
            cases.append({"error": f"cannot be graded without running the test in the "
                                   f"program's instance: {e}"})
            continue
        except SyntaxError as e:
            cases.append({"error": f"the test case does not parse: {e}"})
            continue
        except Exception as e:  # noqa: BLE001 - too deep, too large, or not understood
            cases.append({"error": f"the test case could not be split: {_describe(e)}"})
            continue
        cases.append({"steps": _snapshot(case, _clean_scope(base_scope, names))})
    return {"cases": cases}


def _snapshot(case, scope):
    """Run the case's clean statements in order (seeded as `check` seeds them), computing each
    part's arguments where it would run."""
    random.seed(0)
    out, k, stopped = [], 0, None
    for stmt, kind in zip(case.module.body, case.kinds):
        for _ in range(sum(1 for n in ast.walk(stmt) if is_take(n))):
            step = case.steps[k]
            k += 1
            public = {"source": step["source"], "made": step["made"], "held": step["held"],
                      "bind": step["bind"], "want": step["want"], "args": []}
            try:
                if stopped is not None:
                    raise RuntimeError(stopped)
                for p in step["params"]:
                    value = eval(compile(ast.Expression(p), "<assert>", "eval"), scope)
                    public["args"].append(encode(value, MAX_ARG_CHARS))
            except Refused as e:
                public["error"] = f"TypeError: the case passes the program {e}"
            except BaseException as e:  # noqa: BLE001 - the test's own error
                public["error"] = _describe(e)
            if "error" in public:
                public["args"] = []
            out.append(public)
        if kind == "clean" and stopped is None:
            try:
                exec(compile(ast.Module(body=[stmt], type_ignores=[]), "<assert>", "exec"), scope)
            except BaseException as e:  # noqa: BLE001 - the check raises it again
                stopped = f"the case failed before this part ({type(e).__name__})"
    return out


# ---- the program's instance ------------------------------------------------------------------


def evaluate(scope, steps, cap):
    """Evaluate the parts in `scope`, after the program ran there: a JSON text, one record per
    part, `{"value": text}` | `{"refused": what}` | `{"error": "Type: text"}` | `{"exit": code}`
    (the last record: nothing after it ran), with `"after"`: the new values of the mutable
    arguments and held objects the part used (a list the program's call sorted in place)."""
    held, records, left = {}, [], cap
    for step in steps:
        if step.get("error"):
            records.append({"error": step["error"]})
            continue
        record = {}
        try:
            args = [decode(a) for a in step["args"]]
            made = [eval(compile(m, "<assert>", "eval"), {"__builtins__": dict(_SEALED_BUILTINS)})
                    for m in step["made"]]
            fn = eval(compile(step["source"], "<assert>", "eval"), scope)
            value = fn(*args, *made, *[held[h] for h in step["held"]])
            # A trace or profile hook of the program's does not run in the encoding.
            sys.settrace(None)
            sys.setprofile(None)
            if step["bind"]:
                held[step["bind"]] = value
            try:
                text = encode(value, left)
                record["value"] = text
                left -= len(text)
            except Refused as e:
                record["refused"] = str(e)
            after = {}
            names = [f"{PARAM}{i}" for i in range(len(args))] + list(step["held"])
            before = list(step["args"]) + [None] * len(step["held"])
            for name, v, was in zip(names, args + [held.get(h) for h in step["held"]], before):
                if type(v) in MUTABLE:
                    try:
                        text = encode(v, left)
                    except Refused:
                        continue
                    if text != was:
                        after[name] = text
                        left -= len(text)
            if after:
                record["after"] = after
        except SystemExit as e:
            records.append({"exit": e.code if type(e.code) is int else 1})
            break
        except BaseException as e:  # noqa: BLE001 - the program's own error
            record = {"error": _describe(e)}
        records.append(record)
    return _records_text(records)


def _records_text(records):
    """`records` as JSON, written with functions captured before the program ran (it may have
    replaced `json.dumps`)."""
    parts = []
    for r in records:
        fields = []
        for key, value in r.items():
            if type(value) is dict:
                text = "{" + ",".join(quote(k) + ":" + quote(v) for k, v in value.items()) + "}"
            elif type(value) is int:
                text = int.__repr__(value)
            else:
                text = quote(str(value))
            fields.append(quote(key) + ":" + text)
        parts.append("{" + ",".join(fields) + "}")
    return "[" + ",".join(parts) + "]"


def _describe(e):
    try:
        return f"{type(e).__name__}: {e}"[:500]
    except BaseException:  # noqa: BLE001 - a __str__ of the program's
        return type(e).__name__


# ---- the check --------------------------------------------------------------------------------


class ProgramFailed(Exception):
    """A part raised, exited or gave what is not plain data."""


def check(program, cases, base_scope):
    """Run each case with the program's values in place: `{"cases": [{"pass": true} | {"pass":
    false, "error": why}]}`. A case is `{"assert": text, "steps": [as `plan` gave them],
    "evaluated": text (as `evaluate` gave it)}`."""
    names = ProgramNames(program)
    clean_names = _clean_names(_clean_scope(base_scope, names))
    out = []
    for c in cases:
        try:
            _check_one(c, names, clean_names, base_scope)
            out.append({"pass": True})
        except BaseException as e:  # noqa: BLE001 - any failure fails the case
            out.append({"pass": False, "error": _describe(e)})
    return {"cases": out}


def _check_one(c, names, clean_names, base_scope):
    case = Case(c["assert"], names, clean_names)
    planned, records = c["steps"], json.loads(c["evaluated"])
    if type(planned) is not list or len(planned) != len(case.steps) or any(
            type(p) is not dict or p.get("source") != s["source"]
            for p, s in zip(planned, case.steps)):
        raise ValueError("the plan does not match the case")
    if type(records) is not list or any(type(r) is not dict for r in records):
        raise ValueError("the program's values are not a list of records")
    scope = _clean_scope(base_scope, names)

    def take(k, args):
        step, given = case.steps[k], planned[k]
        if given.get("error"):
            raise ProgramFailed(given["error"])
        if len(given.get("args", ())) != len(args):
            raise ProgramFailed("the plan does not match the case")
        for text, now in zip(given["args"], args):
            if encode(decode(text), MAX_ARG_CHARS, True) != encode(now, MAX_ARG_CHARS, True):
                raise ProgramFailed("the case's arguments differ from the planned ones (a test "
                                    "that is not deterministic)")
        if k >= len(records):
            raise ProgramFailed("the program's instance ended before this part ran")
        r = records[k]
        if "exit" in r:
            raise ProgramFailed(f"the program exited ({r['exit']}) in this part")
        if "error" in r:
            raise ProgramFailed(f"the program raised {r['error']}")
        after = r.get("after") or {}
        if type(after) is not dict:
            raise ProgramFailed("malformed values")
        for name, text in after.items():
            if name.startswith(PARAM) and name[len(PARAM):].isdigit():
                i = int(name[len(PARAM):])
                if i < len(args):
                    update_in_place(args[i], decode(text))
            elif name in step["held"]:
                scope[name] = update_in_place(scope.get(name), decode(text))
        if "refused" in r:
            if step["want"]:
                raise ProgramFailed(f"the program's result is {r['refused']}, not a plain value")
            return Opaque(str(r["refused"])[:100])
        if type(r.get("value")) is not str:
            raise ProgramFailed("malformed values")
        return decode(r["value"])

    scope[TAKE] = take
    random.seed(0)
    exec(compile(case.module, "<assert>", "exec", dont_inherit=True, optimize=0), scope)
