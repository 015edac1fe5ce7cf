"""What `rollbox build` must bundle with a Python file, read from its source (never imported:
the file is not run on the host).

    python -I analyze.py FILE KIND FUNCTION

prints one JSON object: `function` (the one to wrap: FUNCTION, else the kind's usual name, else
the file's only public function), `local` (files next to FILE it imports, transitively, as
paths relative to FILE's folder: modules, and every `.py` file of an imported package),
`third_party` (`{"module", "dist"}` for modules imported outside `try` blocks that are neither
the standard library nor local; `dist` is the distribution that provides the module in this
Python, else the module's name), `preimport` (every module imported inside a function outside
`try` blocks: imported at build, so a call never imports), or `error`.
"""

import ast
import importlib.metadata
import json
import os
import sys

MAX_LOCAL_FILES = 2000
MAX_LOCAL_BYTES = 64 << 20
USUAL = {"reward": ("compute_score", "reward_func", "reward_fn"), "tool": ()}


class Refused(Exception):
    pass


def imports(tree):
    """(module, in_try, in_function, level) for each import in `tree`."""
    out = []

    def walk(node, in_try, in_function):
        for child in ast.iter_child_nodes(node):
            t, f = in_try, in_function
            if isinstance(child, ast.Try) or (hasattr(ast, "TryStar") and isinstance(child, ast.TryStar)):
                # The handlers' own imports are the fallbacks: optional too.
                t = True
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                f = True
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.dump(child.test):
                continue
            if isinstance(child, ast.Import):
                out.extend((a.name, t, f, 0) for a in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                out.append((base, t, f, child.level))
                if child.level == 0 and base:
                    # `from pkg import sub` may name a submodule.
                    out.extend((f"{base}.{a.name}", True, f, 0) for a in child.names if a.name != "*")
            walk(child, t, f)

    walk(tree, False, False)
    return out


def bound_names(tree):
    """Names the module's top level binds: functions, classes, assignments, imports."""
    names = set()
    for n in tree.body:
        if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(n.name)
        elif isinstance(n, (ast.Assign, ast.AnnAssign)):
            targets = n.targets if isinstance(n, ast.Assign) else [n.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(n, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in n.names)
    return names


def parse(path):
    with open(path, "rb") as fh:
        source = fh.read()
    try:
        return ast.parse(source, filename=path)
    except SyntaxError as e:
        raise Refused(f"{path}:{e.lineno}: {e.msg}")


def local_target(root, module):
    """The file or package folder of `module`'s top name under `root`, if there is one."""
    top = module.split(".")[0]
    if not top:
        return None
    for candidate in (os.path.join(root, top + ".py"), os.path.join(root, top)):
        if os.path.isfile(candidate) and candidate.endswith(".py"):
            return candidate
        if os.path.isdir(candidate) and any(
            name.endswith(".py") for name in os.listdir(candidate)
        ):
            return candidate
    return None


def package_files(folder):
    files = []
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__" and d.isidentifier())
        files.extend(os.path.join(dirpath, f) for f in sorted(filenames) if f.endswith(".py"))
    return files


def main():
    path, kind, function = sys.argv[1], sys.argv[2], sys.argv[3]
    root = os.path.dirname(os.path.abspath(path))
    main_tree = parse(path)
    defined = [n.name for n in main_tree.body
               if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if function:
        if function not in bound_names(main_tree):
            raise Refused(f"{path} defines no function `{function}` (it defines: "
                          f"{', '.join(defined) or 'none'})")
    else:
        public = [d for d in defined if not d.startswith("_")]
        usual = [d for d in USUAL[kind] if d in defined]
        if usual:
            function = usual[0]
        elif len(public) == 1:
            function = public[0]
        else:
            raise Refused(f"name the function to wrap: {path}:FUNCTION (it defines: "
                          f"{', '.join(public) or 'no public function'})")
    stdlib = set(sys.stdlib_module_names) | {"__future__"}
    local, third, preimport = [], {}, []
    seen, queue, total = set(), [path], 0
    while queue:
        current = queue.pop()
        if current in seen:
            continue
        seen.add(current)
        files = package_files(current) if os.path.isdir(current) else [current]
        for f in files:
            rel = os.path.relpath(f, root)
            if rel.startswith(".."):
                raise Refused(f"{f} is outside {root}")
            if os.path.islink(f):
                raise Refused(f"{f} is a symbolic link; copy the file there instead")
            total += os.path.getsize(f)
            if f != path:
                local.append(rel)
            if len(local) > MAX_LOCAL_FILES or total > MAX_LOCAL_BYTES:
                raise Refused(f"{root} has over {MAX_LOCAL_FILES} files or "
                              f"{MAX_LOCAL_BYTES >> 20} MiB of local imports; bundle fewer")
            tree = main_tree if f == path else parse(f)
            for module, in_try, in_function, level in imports(tree):
                if level:
                    if f == path:
                        raise Refused(f"{path} uses a relative import (`from {'.' * level}"
                                      f"{module} import ...`): import its modules by name")
                    continue  # inside a local package, which is bundled whole
                top = module.split(".")[0]
                target = local_target(root, module)
                if target is not None:
                    queue.append(target)
                elif top in stdlib or not top:
                    pass
                elif not in_try:
                    third.setdefault(top, None)
                if in_function and not in_try and module and not module.startswith("__"):
                    preimport.append(module)
    dists = importlib.metadata.packages_distributions()
    third_party = [{"module": m, "dist": (dists.get(m) or [m.replace("_", "-")])[0]}
                   for m in sorted(third)]
    print(json.dumps({"function": function, "local": sorted(set(local)),
                      "third_party": third_party,
                      "preimport": list(dict.fromkeys(preimport))}))


if __name__ == "__main__":
    try:
        main()
    except Refused as e:
        print(json.dumps({"error": str(e)}))
    except OSError as e:
        print(json.dumps({"error": f"{e.filename or ''}: {e.strerror or e}"}))
