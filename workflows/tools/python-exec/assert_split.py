"""How an assert case is split: which names are the program's, which parts of the case the
program's instance evaluates, and the case rewritten to take their values (`Case`).

Static: the program and the case are parsed, never run. `assert_cases.py` (plan, evaluate,
check) uses it in each instance; its module doc says which names are the program's.
"""

import ast
import builtins
import copy

# Parts of one case evaluated in the program's instance.
MAX_STEPS = 1024
# The name the rewritten case calls for each part's value; the parts' parameter names (an
# argument sent as a value; one made where the part runs).
TAKE = "__rollbox_take"
PARAM = "__rollbox_arg"
MADE = "__rollbox_made"
BUILTINS = frozenset(dir(builtins))


class Unsupported(Exception):
    """A case that cannot be split without running test code in the program's instance."""


# ---- names ----------------------------------------------------------------------------------


def _scopes_skipped(node):
    """The nodes under `node` (itself included) that run in `node`'s own scope: a nested def,
    class, lambda or comprehension is not entered (a def or class node itself, its decorators,
    defaults and bases are, and the target of a walrus in a comprehension)."""
    stack = [node]
    while stack:
        n = stack.pop()
        yield n
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = n.args
            stack.extend(a.defaults + [d for d in a.kw_defaults if d is not None])
            stack.extend(getattr(n, "decorator_list", []))
        elif isinstance(n, ast.ClassDef):
            stack.extend(n.decorator_list + n.bases + [k.value for k in n.keywords])
        elif isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            stack.extend(x.target for x in ast.walk(n) if isinstance(x, ast.NamedExpr))
        else:
            stack.extend(ast.iter_child_nodes(n))


def _bound_here(node, imports=True):
    """Names a statement binds in its own scope (`imports=False`: not counting imports)."""
    names = set()
    for n in _scopes_skipped(node):
        if isinstance(n, ast.Name) and isinstance(n.ctx, (ast.Store, ast.Del)):
            names.add(n.id)
        elif isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            if imports:
                names.update(_import_names(n))
        elif isinstance(n, ast.ExceptHandler) and n.name:
            names.add(n.name)
        elif type(n).__name__ in ("MatchAs", "MatchStar") and getattr(n, "name", None):
            names.add(n.name)
        elif type(n).__name__ == "MatchMapping" and getattr(n, "rest", None):
            names.add(n.rest)
    return names


def _import_names(node):
    return {a.asname or a.name.split(".")[0] for a in node.names if a.name != "*"}


def _free_loads(node):
    """The names `node` reads that it does not bind in a scope of its own."""
    out = set()

    def params(a):
        return {x.arg for x in a.posonlyargs + a.args + a.kwonlyargs} | {
            x.arg for x in (a.vararg, a.kwarg) if x is not None}

    def visit(n, local):
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            a = n.args
            for d in a.defaults + [d for d in a.kw_defaults if d is not None]:
                visit(d, local)
            if not isinstance(n, ast.Lambda):
                for d in n.decorator_list:
                    visit(d, local)
                body = n.body
            else:
                body = [n.body]
            inner = set(local) | params(a)
            for s in body:
                inner |= _bound_here(s)
            for s in body:
                visit(s, inner)
            return
        if isinstance(n, ast.ClassDef):
            for d in n.decorator_list + n.bases + [k.value for k in n.keywords]:
                visit(d, local)
            inner = set(local)
            for s in n.body:
                inner |= _bound_here(s)
            for s in n.body:
                visit(s, inner)
            return
        if isinstance(n, (ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            inner = set(local)
            for g in n.generators:
                inner |= {x.id for x in ast.walk(g.target) if isinstance(x, ast.Name)}
            for child in ast.iter_child_nodes(n):
                visit(child, inner)
            return
        if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load) and n.id not in local:
            out.add(n.id)
        if (isinstance(n, ast.AugAssign) and isinstance(n.target, ast.Name)
                and n.target.id not in local):
            out.add(n.target.id)  # `r += 1` reads `r`
        for child in ast.iter_child_nodes(n):
            visit(child, local)

    visit(node, set())
    return out


class ProgramNames:
    """What a program binds at its top level, read from its source (it never runs here):
    `defined` (by anything but an import), and its `imports` (statements, run again on the
    clean side so a case may use a module the program imported)."""

    def __init__(self, source):
        self.defined, self.imports = set(), []
        try:
            tree = ast.parse(source, "<program>", "exec")
        except BaseException:  # noqa: BLE001 - a program that does not parse fails to run anyway
            return
        for stmt in tree.body:
            self.defined |= _bound_here(stmt, imports=False)
            self.imports += [n for n in _scopes_skipped(stmt)
                             if isinstance(n, (ast.Import, ast.ImportFrom))]
        for n in ast.walk(tree):
            if isinstance(n, ast.Global):
                self.defined.update(n.names)


# ---- planning ------------------------------------------------------------------------------

_SCOPED = (ast.Lambda, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)
_PROGRAMISH = ("program", "held", "unknown", "shadow")


def _chain_root(node):
    """The start of an attribute/subscript/call chain, and whether the chain has links."""
    links = False
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        node = node.func if isinstance(node, ast.Call) else node.value
        links = True
    return node, links


def _chain_inputs(node):
    """The argument and index expressions along a chain."""
    out = []
    while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
        if isinstance(node, ast.Call):
            out += node.args + [k.value for k in node.keywords]
            node = node.func
        else:
            if isinstance(node, ast.Subscript):
                out.append(node.slice)
            node = node.value
    return out


def _map_children(node, fn):
    """`node` with each child expression replaced by `fn(child)`."""
    for field, value in ast.iter_fields(node):
        if isinstance(value, ast.expr):
            setattr(node, field, fn(value))
        elif isinstance(value, list):
            new = []
            for item in value:
                if isinstance(item, ast.expr):
                    item = fn(item)
                elif isinstance(item, ast.keyword):
                    item.value = fn(item.value)
                new.append(item)
            setattr(node, field, new)
    return node


def is_take(n):
    return isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id == TAKE


class Case:
    """The static split of one case: its statements with each part of the program's replaced
    by `__rollbox_take(k, (args...))` (`module`), and the parts (`steps`). Planning and checking
    both build it from the same text, so both see the same parts."""

    def __init__(self, entry, names, clean_names):
        self.names = names
        self.clean_names = clean_names
        self.bound = {}  # the test's names: "test", "held" (the program's object), "uses_program"
        self.tainted = set()  # test names whose value came from the program's results
        self.steps = []
        self.kinds = []  # per statement: "clean", "program" (has parts) or "dependent"
        body = self._inline(ast.parse(entry, "<assert>", "exec").body, {}, set(), 0)
        out = [self._statement(s) for s in body]
        self.module = ast.fix_missing_locations(ast.Module(body=out, type_ignores=[]))

    # -- names --

    def kind(self, name):
        """How a name the case reads resolves: `test`, `held`, `clean`, `program`, `shadow`
        (the program's, over a clean one) or `unknown` (the module's doc says which is which)."""
        k = self.bound.get(name)
        if k == "uses_program":
            raise Unsupported(f"`{name}` is a function of the test's that calls the program; "
                              f"only a call `{name}(...)` as a statement is inlined")
        if k is not None:
            return k
        if name in BUILTINS:
            return "clean"
        clean = name in self.clean_names
        if name in self.names.defined:
            return "shadow" if clean else "program"
        return "clean" if clean else "unknown"

    def programish(self, node):
        return any(self.kind(n) in _PROGRAMISH for n in _free_loads(node))

    def calls_program(self, node, own):
        """Whether `node` (a statement run as written) reads a name of the program's."""
        return any(self.kind(n) in ("program", "unknown", "shadow")
                   for n in _free_loads(node) - own)

    def is_part(self, node):
        """Whether `node` is a part the program's instance evaluates."""
        root, links = _chain_root(node)
        if not isinstance(root, ast.Name):
            return False
        k = self.kind(root.id)
        if k == "program":
            return True
        if k == "held":
            return links
        if k in ("unknown", "shadow"):
            # Given the program's results it is a helper of the test's (`isclose(f(x), y)`);
            # given plain arguments, the function under test.
            return not any(self.programish(x) for x in _chain_inputs(node))
        return False

    # -- parts --

    def part(self, node, want, bind=None):
        """Record `node` as a part and return its take."""
        params, made, held, by_name = [], [], set(), {}

        def param(n):
            key = n.id if isinstance(n, ast.Name) else None
            if key is not None and key in by_name:
                return ast.Name(by_name[key], ast.Load())
            for x in _free_loads(n):
                if x in self.tainted:
                    raise Unsupported(f"`{x}` holds a value computed from the program's results "
                                      f"and the case passes it back to the program")
            name = f"{PARAM}{len(params)}"
            params.append(n)
            if key is not None:
                by_name[key] = name
            return ast.Name(name, ast.Load())

        def inner(n):
            if isinstance(n, ast.Name):
                k = self.kind(n.id)
                if k == "held":
                    held.add(n.id)
                elif k == "test":
                    return param(n)
                return n  # the program's, or a builtin: resolved where the part runs
            if isinstance(n, (ast.Starred, ast.Slice)) or (
                    isinstance(n, ast.Tuple) and any(isinstance(e, ast.Slice) for e in n.elts)):
                return _map_children(n, inner)
            free = {x: self.kind(x) for x in _free_loads(n)}
            if not free:
                return n  # a literal
            if any(k in _PROGRAMISH for k in free.values()):
                if isinstance(n, _SCOPED):
                    if "test" in free.values():
                        raise Unsupported("a lambda or comprehension given to the program reads "
                                          "the test's variables")
                    held.update(x for x, k in free.items() if k == "held")
                    return n
                return _map_children(n, inner)
            if isinstance(n, ast.Lambda) and set(free.values()) == {"clean"}:
                return n
            if all(k == "clean" and x in BUILTINS for x, k in free.items()):
                # Built from literals and builtins only (`list(range(10**6))`): an input made
                # where the part runs, with the real builtins, rather than sent.
                made.append(ast.unparse(n))
                return ast.Name(f"{MADE}{len(made) - 1}", ast.Load())
            return param(n)

        expr = inner(node) if isinstance(node, ast.Name) else _map_children(node, inner)
        names = ([f"{PARAM}{i}" for i in range(len(params))]
                 + [f"{MADE}{i}" for i in range(len(made))] + sorted(held))
        lam = ast.Lambda(ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in names],
                                       vararg=None, kwonlyargs=[], kw_defaults=[], kwarg=None,
                                       defaults=[]), expr)
        k = len(self.steps)
        if k >= MAX_STEPS:
            raise Unsupported(f"more than {MAX_STEPS} parts of the program's in one case")
        self.steps.append({"source": ast.unparse(ast.fix_missing_locations(ast.Expression(lam))),
                           "params": params, "made": made, "held": sorted(held), "bind": bind,
                           "want": want})
        return ast.Call(ast.Name(TAKE, ast.Load()),
                        [ast.Constant(k), ast.Tuple([copy.deepcopy(p) for p in params],
                                                    ast.Load())], [])

    def rewrite(self, node):
        """`node` (an expression the clean side runs) with each part replaced by its take."""
        if self.is_part(node):
            return self.part(node, want=True)
        if not self.programish(node):
            return node
        if isinstance(node, _SCOPED):
            raise Unsupported("the program is called inside a lambda or comprehension of the "
                              "test's")
        if isinstance(node, (ast.NamedExpr, ast.Await, ast.Yield, ast.YieldFrom)):
            raise Unsupported(f"a `{type(node).__name__}` holds a part of the program's")
        if isinstance(node, ast.Call):
            root, _ = _chain_root(node.func)
            if isinstance(root, ast.Name) and self.kind(root.id) in ("unknown", "shadow"):
                # A helper given the program's results: the name stays the clean one.
                node.args = [self.rewrite(a) for a in node.args]
                for kw in node.keywords:
                    kw.value = self.rewrite(kw.value)
                return node
        return _map_children(node, self.rewrite)

    # -- statements --

    def _statement(self, stmt):
        before = len(self.steps)
        binds = _bound_here(stmt)
        uses = _free_loads(stmt)
        held_bind = None
        if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.Pass, ast.Delete, ast.Global,
                             ast.Nonlocal)):
            new = stmt
        elif isinstance(stmt, ast.Assert):
            # The message only matters once the case failed.
            msg = None if stmt.msg is None or self.programish(stmt.msg) else stmt.msg
            new = ast.Assert(self.rewrite(stmt.test), msg)
        elif isinstance(stmt, ast.Expr):
            value = stmt.value
            value = self.part(value, False) if self.is_part(value) else self.rewrite(value)
            new = ast.Expr(value)
        elif isinstance(stmt, ast.Assign):
            target = stmt.targets[0] if len(stmt.targets) == 1 else None
            if isinstance(target, ast.Name) and self.is_part(stmt.value):
                value = self.part(stmt.value, False, bind=target.id)
                held_bind = target.id
            else:
                value = self.rewrite(stmt.value)
            new = ast.Assign([self._target(t) for t in stmt.targets], value)
        elif isinstance(stmt, ast.AugAssign):
            new = ast.AugAssign(self._target(stmt.target), stmt.op, self.rewrite(stmt.value))
        elif isinstance(stmt, ast.AnnAssign):
            value = None if stmt.value is None else self.rewrite(stmt.value)
            new = ast.AnnAssign(self._target(stmt.target), stmt.annotation, value, stmt.simple)
        elif isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef)):
            # Defining it is harmless; calling it is refused (unless inlined).
            if self.calls_program(stmt, set()):
                self.bound[stmt.name] = "uses_program"
                self.kinds.append("clean")
                return stmt
            new = stmt
        else:
            # A loop, `if`, `try`, `with`, class: run as written on the clean side, so it must
            # not need the program (it may read values already taken from it).
            if self.calls_program(stmt, binds):
                raise Unsupported(f"a `{type(stmt).__name__.lower()}` statement of the test's "
                                  f"calls the program")
            new = stmt
        depends = any(self.bound.get(n) == "held" or n in self.tainted for n in uses)
        kind = "program" if len(self.steps) > before else "dependent" if depends else "clean"
        self.kinds.append(kind)
        if kind != "clean":
            # What the statement's clean part reads it may change, where the planner skips it.
            for n in _free_loads(without_params(new)):
                if self.bound.get(n) == "test":
                    self.tainted.add(n)
        for name in binds:
            self.bound[name] = "held" if name == held_bind else "test"
            if kind == "clean" or name == held_bind:
                self.tainted.discard(name)
            else:
                self.tainted.add(name)
        return ast.copy_location(new, stmt)

    def _target(self, target):
        if isinstance(target, ast.Name) or not self.programish(target):
            return target
        if isinstance(target, (ast.Tuple, ast.List)):
            target.elts = [self._target(t) for t in target.elts]
            return target
        if isinstance(target, ast.Starred):
            target.value = self._target(target.value)
            return target
        if isinstance(target, (ast.Subscript, ast.Attribute)):
            root, _ = _chain_root(target.value)
            if isinstance(root, ast.Name) and self.kind(root.id) in ("test", "clean"):
                # Into the test's own object (`d[f(x)] = 1`): its key may be a part.
                return _map_children(target, self.rewrite)
        raise Unsupported("the case assigns into an object of the program's")

    # -- `def check(candidate): ...; check(f)`, `def test_x(): ...; test_x()` --

    def _inline(self, body, defs, seen, depth):
        out = []
        for stmt in body:
            call = stmt.value if isinstance(stmt, ast.Expr) else None
            if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name)
                    and call.func.id in defs and depth < 4):
                fn = defs[call.func.id]
                args = [a for a in call.args] + [k.value for k in call.keywords]
                if any(self._reaches_program(a, seen) for a in args) or self._reaches_program(
                        fn, seen | {fn.name}):
                    out.extend(self._inline(_inlined(fn, call), defs, seen, depth + 1))
                    continue
            bound = _bound_here(stmt)
            for name in bound:
                defs.pop(name, None)
            if isinstance(stmt, ast.FunctionDef) and not stmt.decorator_list:
                defs[stmt.name] = stmt
            seen |= bound
            out.append(stmt)
        return out

    def _reaches_program(self, node, seen):
        return any(n not in BUILTINS and (n in self.names.defined or n not in self.clean_names)
                   for n in _free_loads(node) - seen)


def _inlined(fn, call):
    """`fn`'s body with its parameters bound to `call`'s arguments first, or `Unsupported` when
    the body returns or yields, or the call does not fit."""
    a = fn.args
    if a.vararg or a.kwarg or a.posonlyargs or any(isinstance(x, ast.Starred) for x in call.args):
        raise Unsupported(f"`{fn.name}` takes *args or **kwargs, so it cannot be inlined")
    names = [x.arg for x in a.args]
    kwonly = [x.arg for x in a.kwonlyargs]
    if len(call.args) > len(names):
        raise Unsupported(f"`{fn.name}` is called with too many arguments")
    given = dict(zip(names, call.args))
    for kw in call.keywords:
        if kw.arg is None or kw.arg in given or kw.arg not in names + kwonly:
            raise Unsupported(f"`{fn.name}` is called with arguments it does not take")
        given[kw.arg] = kw.value
    defaults = dict(zip(names[len(names) - len(a.defaults):], a.defaults))
    defaults.update({x.arg: d for x, d in zip(a.kwonlyargs, a.kw_defaults) if d is not None})
    for s in fn.body:
        for n in _scopes_skipped(s):
            if isinstance(n, (ast.Return, ast.Yield, ast.YieldFrom, ast.Await, ast.Global,
                              ast.Nonlocal)):
                raise Unsupported(f"`{fn.name}` returns or yields, so it cannot be inlined")
    binds = []
    for name in names + kwonly:
        value = given.get(name, defaults.get(name))
        if value is None:
            raise Unsupported(f"`{fn.name}` is called without `{name}`")
        binds.append(ast.Assign([ast.Name(name, ast.Store())], copy.deepcopy(value)))
    return binds + copy.deepcopy(fn.body)


def without_params(stmt):
    """`stmt` without the argument tuples of its takes (the planner computes those)."""
    stmt = copy.deepcopy(stmt)
    for n in ast.walk(stmt):
        if is_take(n) and len(n.args) == 2:
            n.args[1] = ast.Tuple([], ast.Load())
    return stmt
