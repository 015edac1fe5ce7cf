"""verl's SandboxFusion scorer, in process: `reward.sandbox_fusion.url=rollbox://python` runs
each test case in a fresh python-exec instance here instead of posting it to a SandboxFusion
service. Loaded by verl at `import verl` through the `verl.plugins` entry point this package
declares (`VERL_USE_EXTERNAL_PLUGINS`, default `auto`, loads it); other URLs go to verl's own
HTTP client unchanged.

    export ROLLBOX_PYTHON_EXEC=/shared/rollbox/python_exec.wasm
    python -m verl.trainer.main_ppo ... reward.sandbox_fusion.url=rollbox://python

verl's scorer calls `call_sandbox_api(url, code, stdin, compile_timeout, run_timeout,
memory_limit_mb, language)` from its thread pool; for a `rollbox://` URL this answers with the
JSON a SandboxFusion server gives (`status`, `run_result.{status, return_code, stdout,
stderr, execution_time}`), the program limited by `run_timeout` and `memory_limit_mb`. The
module that defines it is patched when it is imported (or now, if it already was).
"""

from __future__ import annotations

import asyncio
import importlib.abc
import importlib.machinery
import json
import sys
from typing import Any

SCHEME = "rollbox://"
_TARGET = "verl.utils.reward_score.sandbox_fusion.utils"
# stdout and stderr kept per program, characters each (as `rollbox serve`'s /run_code).
_OUTPUT_CHARS = 1 << 20


def _runner(run_timeout: float, memory_limit_mb: int | None):
    from . import _components
    from .verl import python_exec_tool

    memory = f"{int(memory_limit_mb)}MiB" if memory_limit_mb and memory_limit_mb > 0 else None
    return _components.cached(
        tools={"python": python_exec_tool(timeout=f"{float(run_timeout)}s", memory=memory)}
    )


def answer(result: dict[str, Any]) -> dict[str, Any]:
    """SandboxFusion's response for a `Components.call_tool` result of python-exec's program
    mode (the same mapping as `rollbox serve`'s `POST /run_code`)."""

    def run(status, code, stdout, stderr):
        return {
            "status": status,
            "execution_time": result["wall_s"],
            "return_code": code,
            "stdout": stdout,
            "stderr": stderr,
        }

    if result["fault"] == "timeout":
        status, run_result = "Failed", run("TimeLimitExceeded", None, "", "")
    elif result["fault"] is not None:
        status, run_result = "Failed", run("Finished", 1, "", f"rollbox: {result['error']}")
    else:
        out = json.loads(result["output"])
        code = out.get("exit_code", 1)
        stderr = out.get("stderr") or ""
        if out.get("error"):
            stderr += ("" if not stderr or stderr.endswith("\n") else "\n") + out["error"]
        status = "Success" if code == 0 else "Failed"
        run_result = run("Finished", code, out.get("stdout") or "", stderr)
    return {
        "status": status,
        "message": "",
        "compile_result": None,
        "run_result": run_result,
        "executor_pod_name": None,
        "files": {},
    }


def _call_in_process(code, stdin, run_timeout, memory_limit_mb, language):
    if language not in ("python", "python3"):
        return None, f"rollbox:// runs Python only; got language `{language}`"
    try:
        components = _runner(run_timeout, memory_limit_mb)
    except ValueError as e:
        return None, str(e)
    # stdin through a pipe, as SandboxFusion gives it (`os.fstat(0).st_size` is 0 there too).
    args = {"code": code, "stdin": stdin or "", "max_output_chars": _OUTPUT_CHARS,
            "stdin_kind": "pipe"}

    async def call():
        return await components.call_tool("python", args)

    return answer(asyncio.run(call())), None


def _patch(module) -> None:
    original = module.call_sandbox_api
    if getattr(original, "_rollbox", False):
        return

    def call_sandbox_api(
        sandbox_fusion_url, code, stdin, compile_timeout, run_timeout, memory_limit_mb,
        language="python",
    ):
        if isinstance(sandbox_fusion_url, str) and sandbox_fusion_url.startswith(SCHEME):
            return _call_in_process(code, stdin, run_timeout, memory_limit_mb, language)
        return original(
            sandbox_fusion_url, code, stdin, compile_timeout, run_timeout, memory_limit_mb,
            language,
        )

    call_sandbox_api._rollbox = True
    module.call_sandbox_api = call_sandbox_api


class _PatchOnImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Patches verl's SandboxFusion client when it is first imported."""

    def find_spec(self, name, path, target=None):
        if name != _TARGET:
            return None
        spec = importlib.machinery.PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        self._inner = spec.loader
        spec.loader = self
        return spec

    def create_module(self, spec):
        return self._inner.create_module(spec)

    def exec_module(self, module):
        self._inner.exec_module(module)
        _patch(module)


def install() -> None:
    """Route `rollbox://` SandboxFusion URLs in process (idempotent)."""
    if _TARGET in sys.modules:
        _patch(sys.modules[_TARGET])
    elif not any(isinstance(f, _PatchOnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchOnImport())


install()
