# The repo environment's test harness, run in a python-exec session (no files: the project is
# the dict FILES, imported through a finder of its own). `run(files, names)` runs the unittest
# modules `names` against `files` and returns a JSON summary: tests run, failures, errors, the
# failing tests' names and the output (capped), and whether the program under test changed
# unittest's own classes while it ran (then nothing it reported counts).
import io
import json
import sys
import unittest

_KEEP = {
    name: dict(vars(cls))
    for name, cls in (("TestCase", unittest.TestCase), ("TestResult", unittest.TestResult),
                      ("TextTestRunner", unittest.TextTestRunner))
}
_Result = unittest.TestResult
_Suite = unittest.TestSuite
_loader = unittest.TestLoader()
_dumps = json.dumps


try:
    from importlib.machinery import ModuleSpec as _Spec
except ImportError:  # the interpreter's frozen bootstrap has it
    from importlib._bootstrap import ModuleSpec as _Spec


class _Files:
    """A finder and loader of the project's modules, from `files` (path -> text)."""

    files = {}

    def find_spec(self, name, path, target=None):
        rel = name.replace(".", "/")
        for cand, package in ((rel + ".py", False), (rel + "/__init__.py", True)):
            if cand in self.files:
                spec = _Spec(name, self, origin=cand, is_package=package)
                if package:
                    spec.submodule_search_locations = [rel]
                return spec
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        origin = module.__spec__.origin
        module.__file__ = origin
        exec(compile(self.files[origin], origin, "exec"), module.__dict__)


_FINDER = _Files()
sys.meta_path.insert(0, _FINDER)


def _tampered():
    return any(
        dict(vars(cls)) != _KEEP[name]
        for name, cls in (("TestCase", unittest.TestCase), ("TestResult", unittest.TestResult),
                          ("TextTestRunner", unittest.TextTestRunner))
    )


def run(files, names, cap=4000):
    # The project's modules are loaded afresh on every run.
    for mod in [m for m, v in sys.modules.items()
                if getattr(getattr(v, "__spec__", None), "loader", None) is _FINDER]:
        del sys.modules[mod]
    _FINDER.files = dict(files)
    out = io.StringIO()
    saved = sys.stdout, sys.stderr
    sys.stdout = sys.stderr = out
    result = _Result()
    broken = []
    try:
        suite = _Suite()
        for name in names:
            try:
                suite.addTests(_loader.loadTestsFromName(name))
            except BaseException as e:  # noqa: BLE001 - a module that does not import
                broken.append(f"{name}: {type(e).__name__}: {e}")
        suite.run(result)
    except BaseException as e:  # noqa: BLE001 - the run itself failed
        broken.append(f"the run: {type(e).__name__}: {e}")
    finally:
        sys.stdout, sys.stderr = saved
    failed = broken + [str(t) for t, _ in result.failures + result.errors]
    text = out.getvalue()
    for t, trace in result.failures + result.errors:
        text += f"\n{t}\n{trace}"
    return _dumps({
        "tests": result.testsRun,
        "failures": len(result.failures),
        "errors": len(result.errors) + len(broken),
        "failed": failed[:50],
        "tampered": _tampered(),
        "output": text[-cap:],
    })
