"""Speech-to-speech calls recorded through the server's S2S runner, and replayed."""

from __future__ import annotations

from pathlib import Path

import pytest

from brisvox.__main__ import main
from brisvox.core.clock import SystemClock, run_virtual
from brisvox.core.errors import ConfigError
from brisvox.providers.s2s import S2sInterrupted
from brisvox.recording import load_recording
from brisvox.recording.replay import VIRTUAL_TOLERANCE, compare, compared_events, judge
from brisvox.server.replay import offered_tools, replay_recording
from tests.recording._calls import (
    TimedS2s,
    lookup_tools,
    recording_agent,
    recordings,
    s2s_agent,
    s2s_recorded_call,
    s2s_script,
)


async def test_an_s2s_call_is_recorded_with_the_models_events_and_what_the_call_sent_it(tmp_path: Path) -> None:
    agent, tools = s2s_agent(tmp_path), lookup_tools()
    model = TimedS2s(SystemClock(), s2s_script())
    await s2s_recorded_call(agent, tools, model)
    [path] = recordings(tmp_path)
    recording = load_recording(path)
    assert recording.header.pipeline == "s2s" and recording.header.input_rate == 16_000
    assert [t["name"] for t in recording.header.tools or ()] == ["lookup"]
    kinds = [r["ev"] for r in recording.of("s2s")]
    assert kinds.count("audio") == 50 and "tool_call" in kinds and "interrupted" in kinds
    assert sum(r["samples"] for r in recording.of("s2s") if r["ev"] == "audio") == 50 * 1600
    sent = [r["op"] for r in recording.of("s2s_in")]
    assert sent == [op for op, _ in model.sent] == ["results", "request", "truncate"]
    assert recording.of("tool") == [{"t": pytest.approx(2.35, abs=0.05), "k": "tool", "name": "lookup",
                                     "result": "red shoes: in stock"}]
    assert len(recording.of("audio")) == 400 and recording.of("stop")
    names = [seen.line.split()[0] for seen in compared_events(list(recording.records))]
    assert "BotHeard" in names and "ToolCallSettled" in names and names.count("ToModel") == 3


async def test_a_recorded_s2s_call_replays_identically_against_the_same_agent(tmp_path: Path) -> None:
    agent, tools = s2s_agent(tmp_path), lookup_tools()
    await s2s_recorded_call(agent, tools, TimedS2s(SystemClock(), s2s_script()))
    recording = load_recording(recordings(tmp_path)[0])
    recorded = compared_events(list(recording.records))
    replayed_records = await replay_recording(recording, agent, tools, SystemClock())
    replayed = compared_events(replayed_records)
    _rows, differences = compare(recorded, replayed, VIRTUAL_TOLERANCE)
    assert differences == [], "\n".join(map(str, differences))
    assert recorded == replayed
    assert judge(recording, replayed_records, offered=offered_tools(agent, tools)).differences == []


async def test_an_s2s_replay_shows_a_changed_tool_result_in_what_reaches_the_model(tmp_path: Path) -> None:
    agent, tools = s2s_agent(tmp_path), lookup_tools()
    await s2s_recorded_call(agent, tools, TimedS2s(SystemClock(), s2s_script()))
    recording = load_recording(recordings(tmp_path)[0])
    recorded = compared_events(list(recording.records))
    for r in recording.of("tool"):
        r["result"] = "red shoes: sold out"  # the tool answers otherwise now: the model is told that
    replayed = compared_events(await replay_recording(recording, agent, tools, SystemClock()))
    _rows, differences = compare(recorded, replayed, VIRTUAL_TOLERANCE)
    [difference] = differences
    assert difference.recorded is not None and "in stock" in difference.recorded.line
    assert difference.replayed is not None and difference.replayed.line.startswith("ToModel results")
    assert "sold out" in difference.replayed.line


async def test_an_s2s_recording_and_a_cascaded_agent_do_not_replay_together(tmp_path: Path) -> None:
    await s2s_recorded_call(s2s_agent(tmp_path), lookup_tools(), TimedS2s(SystemClock(), s2s_script()))
    recording = load_recording(recordings(tmp_path)[0])
    with pytest.raises(ConfigError, match="speech-to-speech call and the agent 'shop' is cascaded"):
        await replay_recording(recording, recording_agent(tmp_path / "c"), lookup_tools(), SystemClock())
    with pytest.raises(ConfigError, match="--silence applies to a cascaded call"):
        await replay_recording(recording, s2s_agent(tmp_path / "s"), lookup_tools(), SystemClock(), silence=0.3)


def test_brisvox_replay_replays_an_s2s_recording_without_the_models_key(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run_virtual(lambda: s2s_recorded_call(s2s_agent(tmp_path), lookup_tools(), TimedS2s(SystemClock(), s2s_script())))
    [path] = recordings(tmp_path)
    assert main(["replay", str(path)], tools=lookup_tools()) == 0  # TEST_S2S_KEY is not set: never needed
    out = capsys.readouterr().out
    assert "ToModel results=[('lookup', 'red shoes: in stock', False)]" in out and "the replay matches" in out


async def test_an_s2s_call_whose_barge_in_our_vad_decided_replays_identically(tmp_path: Path) -> None:
    agent, tools = s2s_agent(tmp_path, barge_in="ours"), lookup_tools()
    script = [(at, event) for at, event in s2s_script() if not isinstance(event, S2sInterrupted)]
    await s2s_recorded_call(agent, tools, TimedS2s(SystemClock(), script), speech=(5.8, 6.6))
    recording = load_recording(recordings(tmp_path)[0])
    assert recording.header.vad == "energy"
    recorded = compared_events(list(recording.records))
    assert "ToModel cancel" in [seen.line for seen in recorded]  # our VAD cut the model
    assert any(seen.line.startswith("BotHeard") for seen in recorded)
    replayed = compared_events(await replay_recording(recording, agent, tools, SystemClock()))
    _rows, differences = compare(recorded, replayed, VIRTUAL_TOLERANCE)
    assert differences == [], "\n".join(map(str, differences))
