"""A recorded call whose agent link serves a tool (an SDK brain on 127.0.0.1): the remote tool's
spec and results are recorded, and ``brisvox replay`` (which has no link) replays the call the same."""

from __future__ import annotations

import argparse
import asyncio
import io
from pathlib import Path

import pytest

import brisvox
from brisvox.core.clock import SystemClock
from brisvox.engine import Providers
from brisvox.inference.vad import energy_vad
from brisvox.recording import load_recording
from brisvox.sdk import Brain, serve
from brisvox.server.agent_file import load_agent_file
from brisvox.server.call import EngineCall, engine_runner
from brisvox.server.call_providers import CallProviders
from brisvox.server.replay import run_replay
from brisvox.server.tools import ToolSet
from brisvox.sim import Call, MockStt, MockTts, Say, ScenarioBuilder, ScriptedLlm
from brisvox.transport import LoopbackTransport
from tests.recording._calls import recordings
from tests.sdk.test_brain import Day


class Hours(Brain):
    @brisvox.tool.read_only(timeout=2.0)
    async def opening_hours(self, args: Day) -> str:
        """When the shop is open on a day."""
        return f"{args.day}: nine to five"


async def _linked_call(directory: Path) -> None:
    """One call of a recording agent whose link serves ``opening_hours``; the model calls it once."""
    server = await serve(Hours, "127.0.0.1", 0)
    try:
        url = f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        (directory / "agent.toml").write_text(
            '[agent]\nname = "shop"\nprompt = "p"\n\n[turn]\npolicy = "fixed_silence"\nsilence = 0.4\n\n'
            f'[agent_link]\nurl = "{url}"\nconnect_timeout = 2\n\n[record]\nenabled = true\ndir = "{directory}"\n')
        agent = load_agent_file(directory / "agent.toml", available_tools=set())
        clock = SystemClock()
        scenario = ScenarioBuilder().pause(0.4).say("when are you open on monday").pause(2.0).build()
        llm = ScriptedLlm(clock, [[Call(name="opening_hours", arguments={"day": "monday"})], [Say("Nine to five.")]])
        providers = CallProviders(
            providers=Providers(stt=MockStt.for_scenario(clock, scenario), llm=llm, tts=MockTts(clock),
                                vad=energy_vad),
            llm_label="scripted (test)", vad_label="energy")

        async def no_text(_: str) -> None:
            return None

        runner = engine_runner(agent, ToolSet(), clock, providers)
        async with LoopbackTransport(clock) as transport:
            client = await transport.connect(metadata={"sample_rate": "16000"})
            call = asyncio.ensure_future(runner(EngineCall(await transport.accept(), no_text), asyncio.Event()))
            for pcm in scenario.frames(0.02):
                await client.send_audio(pcm)
                await clock.sleep(0.02)
            await client.hangup()
            await call
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
        ("opening_hours", True, 2.0)]
    assert [(r["name"], r["result"]) for r in recording.of("tool")] == [("opening_hours", "monday: nine to five")]
    out = io.StringIO()
    code = run_replay(argparse.Namespace(recording=path, agent=None, silence=None, tolerance=None), ToolSet(), out=out)
    assert code == 0, out.getvalue()
    assert "ToolCallSettled" in out.getvalue() and "the replay matches" in out.getvalue()
