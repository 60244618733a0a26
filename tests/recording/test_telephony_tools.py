"""The built-in telephony tools in a recorded call: recorded like the agent's own tools, so a
replay answers them from the recording."""

from __future__ import annotations

from pathlib import Path

from brisvox.core.clock import SystemClock
from brisvox.recording import load_recording
from brisvox.recording.replay import VIRTUAL_TOLERANCE, compare, compared_events
from brisvox.server.agent_file import load_agent_file
from brisvox.server.replay import replay_recording
from brisvox.server.tools import ToolSet
from brisvox.sim import Call, Say, ScenarioBuilder, ScriptedLlm
from tests.recording._calls import recordings, scenario_call


async def test_a_telephony_tool_is_recorded_and_the_replay_answers_it_from_the_recording(tmp_path: Path) -> None:
    (tmp_path / "agent.toml").write_text(
        '[agent]\nname = "desk"\nprompt = "p"\ntools = ["send_dtmf"]\n\n'
        '[turn]\npolicy = "fixed_silence"\nsilence = 0.8\n\n'
        f'[record]\nenabled = true\ndir = "{tmp_path}"\nkeep = 10\n')
    tools = ToolSet()
    agent = load_agent_file(tmp_path / "agent.toml", available_tools=set(tools.offered()))
    scenario = ScenarioBuilder().pause(0.4).say("press five for me").pause(3.0).build()
    llm = ScriptedLlm(SystemClock(), [[Call(name="send_dtmf", arguments={"digits": "5"})], [Say("Pressed.")]])
    await scenario_call(agent, tools, scenario, llm)  # the loopback is the generic WebSocket's line: tones in band
    [path] = recordings(tmp_path)
    recording = load_recording(path)
    assert [(r["name"], r["result"]) for r in recording.of("tool")] == [("send_dtmf", "sent 1 key(s) (in_band)")]
    # The replay has no phone line: only the recorded result makes it the same call.
    recorded = compared_events(list(recording.records))
    replayed = compared_events(await replay_recording(recording, agent, tools, SystemClock()))
    assert any(seen.line.startswith("ToolCall") for seen in recorded)
    _rows, differences = compare(recorded, replayed, VIRTUAL_TOLERANCE)
    assert differences == [], "\n".join(map(str, differences))
