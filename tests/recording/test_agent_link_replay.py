"""A recorded call whose agent link serves a tool (an SDK brain on 127.0.0.1): the remote tool's
spec and results are recorded, and ``brisvox replay`` (which has no link) replays the call the same."""

from __future__ import annotations

import argparse
import asyncio
import io
from pathlib import Path

import pytest

from brisvox.core.clock import SystemClock
from brisvox.recording import load_recording
from brisvox.sdk import serve
from brisvox.server.agent_file import load_agent_file
from brisvox.server.replay import run_replay
from brisvox.server.tools import ToolSet
from brisvox.sim import Call, Say, ScenarioBuilder, ScriptedLlm
from tests.recording._calls import recordings, scenario_call
from tests.server.test_agent_link_call import Shop


async def _linked_call(directory: Path) -> None:
    """One call of a recording agent whose link serves the shop's tools; the model calls ``opening_hours``."""
    server = await serve(Shop, "127.0.0.1", 0)
    try:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        (directory / "agent.toml").write_text(
            '[agent]\nname = "shop"\nprompt = "p"\n\n[turn]\npolicy = "fixed_silence"\nsilence = 0.4\n\n'
            f'[agent_link]\nurl = "{url}"\nconnect_timeout = 2\n\n[record]\nenabled = true\ndir = "{directory}"\n')
        agent = load_agent_file(directory / "agent.toml", available_tools=set())
        scenario = ScenarioBuilder().pause(0.4).say("when are you open on monday").pause(2.0).build()
        llm = ScriptedLlm(SystemClock(), [[Call(name="opening_hours", arguments={"day": "monday"})],
                                          [Say("Nine to five.")]])
        await scenario_call(agent, ToolSet(), scenario, llm)
    finally:
        server.close()
        await server.wait_closed()


@pytest.mark.realtime
def test_a_call_whose_agent_link_serves_a_tool_is_recorded_and_replays_without_the_link(tmp_path: Path) -> None:
    asyncio.run(_linked_call(tmp_path))
    [path] = recordings(tmp_path)
    recording = load_recording(path)
    assert recording.header.tools is not None
    assert [(t["name"], t.get("agent_link"), t.get("timeout")) for t in recording.header.tools] == [
        ("book", True, 3.0), ("opening_hours", True, 2.0)]
    assert [(r["name"], r["result"]) for r in recording.of("tool")] == [("opening_hours", "monday: nine to five")]
    out = io.StringIO()
    code = run_replay(argparse.Namespace(recording=path, agent=None, silence=None, tolerance=None), ToolSet(), out=out)
    assert code == 0, out.getvalue()
    assert "ToolCallSettled" in out.getvalue() and "the replay matches" in out.getvalue()
