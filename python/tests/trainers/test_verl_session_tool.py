"""rollbox.verl.SessionTool against verl 0.9.1 itself: built from a tool config by verl's own
`initialize_tools_from_config`, called as verl's `ToolAgentLoop` calls a `BaseTool` (`create`,
`execute(instance_id, args, agent_data=...)`, `release` around every call) with verl's own
`AgentData`: what one call of a trajectory defines is there in its next call, another
trajectory sees none of it, the session goes when verl frees the trajectory, a call that times
out answers with its error and the next call starts afresh.

Run in the trainers venv (scripts/install/trainers-venv.sh) by scripts/test.sh."""

from __future__ import annotations

import asyncio
import gc
from pathlib import Path

from verl.experimental.agent_loop.tool_agent_loop import AgentData
from verl.tools.tool_registry import initialize_tools_from_config

from rollbox.verl import SESSION_NOTE

ROOT = Path(__file__).resolve().parents[3]
PYTHON_EXEC = ROOT / "target/wasm-guests/python/python_exec_tool.wasm"


def agent_data() -> AgentData:
    return AgentData(
        messages=[], image_data=[], video_data=[], audio_data=None, mm_processor_kwargs=None,
        metrics={}, request_id="r", tools_kwargs={},
    )


def tool(tmp_path):
    assert PYTHON_EXEC.exists(), f"{PYTHON_EXEC} is built by `cargo test --workspace`"
    config = tmp_path / "tools.yaml"
    config.write_text(
        "tools:\n"
        "  - class_name: rollbox.verl.SessionTool\n"
        f"    config: {{type: native, component: '{PYTHON_EXEC}', name: python, timeout: 2s}}\n"
    )
    (t,) = initialize_tools_from_config(str(config))
    return t


async def call(t, code: str, data: AgentData | None) -> str:
    """One call as verl's ToolAgentLoop makes it."""
    instance_id, _ = await t.create(create_kwargs={})
    try:
        response, reward, _ = await t.execute(instance_id, {"code": code}, agent_data=data)
    finally:
        await t.release(instance_id)
    assert reward == 0.0
    return response.text


def test_a_trajectorys_calls_share_one_interpreter(tmp_path):
    t = tool(tmp_path)
    assert t.name == "python"
    assert SESSION_NOTE in t.tool_schema.function.description
    assert "code" in t.tool_schema.function.parameters.properties

    async def run():
        a, b = agent_data(), agent_data()
        assert await call(t, "x = 41\ndef double(v):\n    return 2 * v", a) == ""
        assert await call(t, "x += 1\nprint(double(x))\nx", a) == "84\n42"
        assert "NameError" in await call(t, "x", b)
        assert t.open_sessions() == 2
        # verl frees a trajectory's AgentData when the trajectory ends: its session goes.
        del a
        gc.collect()
        assert t.open_sessions() == 1
        # A call that times out answers with its error; the next one starts afresh.
        assert await call(t, "y = 1", b) == ""
        text = await call(t, "while True: pass", b)
        assert text.startswith("error: ") and "timed out" in text, text
        assert "NameError" in await call(t, "y", b)
        # Without an AgentData, a session lasts from `create` to `release`.
        assert await call(t, "z = 3\nz", None) == "3"
        assert "NameError" in await call(t, "z", None)

    asyncio.run(run())
