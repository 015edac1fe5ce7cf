"""Function tools for verl's agent loop, each call in a rollbox sandbox.

    actor_rollout_ref.rollout.multi_turn.function_tool_path=$(python -c \
        "import importlib.util; print(importlib.util.find_spec('rollbox.verl_tools').origin)")

verl 0.9 ships no tool implementations of its own; this file registers `calculator`
(arithmetic, the built-in `calculator` component) with verl's `@function_tool`, and
`python_exec` (model-written Python in a fresh interpreter per call: no files, network or
processes) when `ROLLBOX_PYTHON_EXEC` names the python-exec component
(`scripts/guests/build-python-exec.sh` builds it). Each call runs
in a fresh sandbox (5 s, 128 MiB by default); a call that faults returns its error as the
tool's text, so the model sees it and the rollout goes on. verl loads this file by path; do not
also import it (verl refuses a tool name registered twice).
"""

from __future__ import annotations

import json
import os

from verl.tools.function_tool import function_tool

from rollbox import _components, build_info  # absolute: verl loads this file by path
from rollbox.verl import python_exec_text, tool_text


async def _call(tool: str, args: dict, path: str | None = None) -> str:
    return tool_text(await _components.cached(tools={tool: path or tool}).call_tool(tool, args))


@function_tool
async def calculator(expression: str) -> str:
    """Evaluate an arithmetic expression exactly as written.

    Args:
        expression: The expression, e.g. "(3 + 4) * 12 / 5": numbers, + - * / %, ^ (power), unary minus, parentheses.
    """
    out = await _call("calculator", {"expression": expression})
    try:
        return str(json.loads(out)["result"])
    except (ValueError, KeyError, TypeError):
        return out


# The component at ROLLBOX_PYTHON_EXEC, else the one built into rollbox (where it was built
# with componentize-py).
_PYTHON_EXEC = os.environ.get("ROLLBOX_PYTHON_EXEC") or (
    "python-exec" if "python-exec" in build_info()["builtins"] else None
)

if _PYTHON_EXEC:

    @function_tool
    async def python_exec(code: str) -> str:
        """Run Python code and return what it printed and the value of its last expression.

        Args:
            code: The Python source to run; the standard library is there, files, network and processes are not.
        """
        return python_exec_text(await _call("python-exec", {"code": code}, _PYTHON_EXEC))
