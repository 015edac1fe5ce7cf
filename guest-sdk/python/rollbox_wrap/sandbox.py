"""What plain Python needs to run as a component built with `--stub-wasi`, where every WASI call
(stdio, clocks, files, entropy) traps.

Used by the wrappers `rollbox build` puts around a user's file (`reward.py`, `tool.py` here).
The component is pre-initialised: componentize-py imports the user's module once at build, in
its CPython 3.14, and snapshots the heap, so each call starts from the imported state. So:

* at import (build time), stdout/stderr, `logging` and `warnings` are pointed at the host's
  `log` (each line a record; before a call they go to the build's stderr), `logging` gets a
  fixed clock (a record's timestamp would read a WASI clock), `linecache` reads no files,
  `ctypes` (absent in WASI CPython) gets the two-name stand-in sympy imports, and
  `signal.alarm` (absent too) is a no-op and a `ThreadPoolExecutor` runs what is submitted
  at once (no thread starts in WASI): the host's per-call timeout bounds a call instead of an
  alarm or a future's timeout;
* [`seal`], called once the user's module is imported, drops the build's garbage, freezes the
  heap, and from then on refuses what would trap, as Python exceptions: an import of a bundled
  module that was not imported at build (it would read the file system), the clocks,
  `os.urandom`, and opening files (through an audit hook, which CPython treats as the failed
  open it is natively; it also covers the pseudo-file a `SyntaxError` from `compile` opens);
* [`calling`] marks a call: what the sandbox refused during it is collected, and the call
  fails naming it (a score computed without the clock or a file could differ from the
  function's own).
"""

import gc
import io
import logging
import os
import sys
import time
import types
import warnings

from wit_world.imports import log as host_log


class _State:
    in_call = False  # True while a call runs (the host's imports are usable only then)
    violations: list = []  # what the sandbox refused during the current call


def violation(what: str) -> None:
    if _State.in_call:
        _State.violations.append(what)


def send(level, text: str) -> None:
    """A line to the host's log while a call runs; to the build's stderr before."""
    text = text.rstrip("\n")
    if not text:
        return
    if _State.in_call:
        host_log.log(level, text)
    else:
        sys.__stderr__.write(text + "\n")


# --- ctypes: sympy.external.gmpy does `from ctypes import c_long, sizeof` ---------------------
try:
    import ctypes  # noqa: F401
except ImportError:
    _ctypes = types.ModuleType("ctypes")

    class c_long:  # noqa: N801 - the name sympy imports
        """Stand-in: only `sizeof(c_long)` is used (LONG_MAX for gmpy2/flint, absent here)."""

    _ctypes.c_long = c_long
    _ctypes.sizeof = lambda t: 4  # C `long` on wasm32
    sys.modules["ctypes"] = _ctypes


# --- signal: WASI CPython has no alarm ------------------------------------------------------------
# math-verify's timeouts (TRL's accuracy_reward runs them in the main thread) call
# `signal.alarm`. No signal is ever delivered in WASI, so an alarm never fires: the call is
# bounded by the host's per-call timeout instead.
import signal  # noqa: E402

if not hasattr(signal, "alarm"):
    signal.alarm = lambda seconds: 0
if not hasattr(signal, "setitimer") and hasattr(signal, "SIGALRM"):
    signal.ITIMER_REAL = 0
    signal.setitimer = lambda which, seconds, interval=0.0: (0.0, 0.0)


# --- threads: WASI CPython starts none ------------------------------------------------------------
# A `ThreadPoolExecutor` is how reward code puts a timeout on a call (AReaL's MathVerifyWorker:
# `submit(...).result(timeout=5)`); its worker thread cannot start here (`can't start new
# thread`, which such code catches and scores 0.0). Work submitted runs at once, in the call's
# thread, and its future is done: the host's per-call timeout bounds it instead.
import concurrent.futures  # noqa: E402
import concurrent.futures.thread  # noqa: E402


class _InlineExecutor(concurrent.futures.Executor):
    def __init__(self, *args, **kwargs):
        pass

    def submit(self, fn, /, *args, **kwargs):
        future = concurrent.futures.Future()
        try:
            future.set_result(fn(*args, **kwargs))
        except BaseException as e:  # the future carries it, as a worker's would
            future.set_exception(e)
        return future


concurrent.futures.ThreadPoolExecutor = _InlineExecutor
concurrent.futures.thread.ThreadPoolExecutor = _InlineExecutor


# --- stdio, logging, warnings, linecache -------------------------------------------------------
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
                send(self._level, f"{self._name}: {line}")
        return len(s)

    def flush(self):
        if _State.in_call and self._buf:
            send(self._level, f"{self._name}: {self._buf}")
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
            send(level, f"{record.name}: {record.getMessage()}")
        except Exception:  # a bad format string must not fail the call
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
    send(host_log.Level.WARN, f"{category.__name__}: {message} ({filename}:{lineno})")


import linecache  # noqa: E402

linecache.checkcache = lambda filename=None: None
linecache.updatecache = lambda filename, module_globals=None: []

sys.stdout = _HostStream(host_log.Level.INFO, "stdout")
sys.stderr = _HostStream(host_log.Level.WARN, "stderr")
warnings.showwarning = _showwarning


# --- after the snapshot: no file system, clocks or entropy --------------------------------------
def _bundled_modules():
    """Dotted names of every module on sys.path (read at build time)."""
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


def _refusing(name, fn_name):
    def refuse(*args, **kwargs):
        violation(f"{name}.{fn_name}()")
        raise OSError(f"{name}.{fn_name} is unavailable in the sandbox")

    return refuse


def _audit(event, args):
    """Refuse file opens while a call runs (a WASI call: a trap) as a failed open.

    A `SyntaxError` from `compile(..., "exec")` makes CPython open the pseudo-file it names
    (`<unknown>`) to show the line: natively that fails quietly, so pseudo-file names are
    refused without counting as a violation.
    """
    if event != "open" or not _State.in_call:
        return
    path = args[0] if args else None
    if not (isinstance(path, str) and path.startswith("<") and path.endswith(">")):
        violation(f"open({path!r})")
    raise FileNotFoundError(2, "file access is unavailable in the sandbox", path)


def load(module: str):
    """The user's file `module.py` (the first on sys.path), loaded by path as a trainer loads a
    reward file, under a name of its own: a file named like a standard-library module
    (`concurrent.py`) neither shadows nor is shadowed by it."""
    import importlib.util

    for entry in sys.path:
        path = os.path.join(entry, module + ".py") if isinstance(entry, str) else None
        if path and os.path.isfile(path):
            spec = importlib.util.spec_from_file_location("rollbox_user_module", path)
            loaded = importlib.util.module_from_spec(spec)
            sys.modules["rollbox_user_module"] = loaded
            spec.loader.exec_module(loaded)
            return loaded
    raise ImportError(f"{module}.py is not in the build")


def _lazy_imports(module):
    """The modules `module`'s source imports inside functions (absolute names)."""
    import ast

    path = getattr(module, "__file__", None)
    if not path or not path.endswith(".py"):
        return []
    try:
        with open(path, "rb") as f:
            tree = ast.parse(f.read())
    except (OSError, SyntaxError, ValueError):
        return []
    package = module.__name__ if hasattr(module, "__path__") else module.__name__.rpartition(".")[0]
    found = []
    for fn in ast.walk(tree):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                found.extend(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")
                    if node.level - 1 > len(parts):
                        continue
                    head = ".".join(parts[: len(parts) - (node.level - 1)])
                    base = f"{head}.{base}" if base else head
                if base:
                    found.append(base)
                    found.extend(f"{base}.{a.name}" for a in node.names if a.name != "*")
    return found


def preimport_lazy() -> int:
    """Import, until nothing new comes, what the bundled (not standard-library) modules import
    inside their functions: a call then never imports (which would read the file system).
    Modules that fail to import (optional extras) are left out. Returns how many came in."""
    import importlib
    import sysconfig

    stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
    roots = tuple(
        os.path.realpath(p) + os.sep for p in sys.path
        if isinstance(p, str) and p and os.path.isdir(p)
        and not os.path.realpath(p).startswith(stdlib)
    )
    seen, added = set(), 0
    while True:
        todo = [(n, m) for n, m in list(sys.modules.items()) if n not in seen]
        if not todo:
            return added
        for name, module in todo:
            seen.add(name)
            path = getattr(module, "__file__", None)
            if not path or not os.path.realpath(path).startswith(roots):
                continue
            for target in _lazy_imports(module):
                if target in sys.modules:
                    continue
                try:
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        importlib.import_module(target)
                    added += 1
                except BaseException:  # an optional extra, absent or failing here
                    pass


def seal(preimport=(), lazy=True) -> None:
    """After the user's module is imported (at build): import `preimport` and (with `lazy`)
    what bundled modules import lazily, drop the build's garbage, freeze the heap, and refuse
    what would trap from now on."""
    for name in preimport:
        try:
            __import__(name)
        except ImportError:
            pass  # a lazy import of something absent fails the same way at run time
    if lazy:
        preimport_lazy()
    bundled = _bundled_modules()

    class _NoRuntimeImports:
        """First on sys.meta_path: an import that would read the file system is refused."""

        @classmethod
        def find_spec(cls, name, path=None, target=None):
            if not _State.in_call:
                return None  # still building: componentize-py imports what it needs
            if name in bundled:
                violation(
                    f"import of {name} (not imported at build time; name it with "
                    f"`rollbox build ... --preimport {name}`)"
                )
            raise ModuleNotFoundError(f"No module named {name!r} (sandbox)", name=name)

    # Drop the build-time garbage (a smaller snapshot), then move every surviving object to
    # the permanent generation, so a collection during a call never walks the import-time heap.
    gc.collect()
    gc.freeze()
    for fn in ("time", "time_ns", "monotonic", "monotonic_ns", "perf_counter", "perf_counter_ns",
               "process_time", "process_time_ns", "thread_time", "thread_time_ns", "sleep"):
        if hasattr(time, fn):
            setattr(time, fn, _refusing("time", fn))
    os.urandom = _refusing("os", "urandom")
    sys.meta_path.insert(0, _NoRuntimeImports)
    sys.addaudithook(_audit)


class calling:
    """`with calling():` around one call: the host's log is usable, and what the sandbox
    refused meanwhile is in `.violations` afterwards."""

    def __enter__(self):
        _State.in_call = True
        _State.violations = []
        return self

    def __exit__(self, *exc):
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            self.violations = list(dict.fromkeys(_State.violations))
            _State.in_call = False
        return False
