"""Function tools for verl's agent loop, each call in a rollbox sandbox.

    actor_rollout_ref.rollout.multi_turn.function_tool_path=$(python -c \
        "import importlib.util; print(importlib.util.find_spec('rollbox.verl_tools').origin)")

verl 0.9 ships no tool implementations of its own; this file registers `calculator`
(arithmetic, the built-in `calculator` component) with verl's `@function_tool`. Each call runs
in a fresh sandbox (5 s, 128 MiB by default); a call that faults returns its error as the
tool's text, so the model sees it and the rollout goes on. verl loads this file by path; do not
also import it (verl refuses a tool name registered twice).
"""

from __future__ import annotations

import json

from verl.tools.function_tool import function_tool

from rollbox import _components  # absolute: verl loads this file by path


async def _call(tool: str, args: dict) -> str:
    r = await _components.cached(tools={tool: tool}).call_tool(tool, args)
    if r["fault"] is not None:
        return f"error: {r['error']}"
    return r["output"]


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
