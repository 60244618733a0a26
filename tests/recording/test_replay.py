from __future__ import annotations

from pathlib import Path

from brisvox.core.clock import SystemClock
from brisvox.inference.vad import energy_vad
from brisvox.recording import load_recording
from brisvox.recording.replay import VIRTUAL_TOLERANCE, compare, compared_events
from brisvox.server.replay import replay_recording
from tests.recording._calls import lookup_tools, recorded_call, recording_agent, recordings


async def test_a_recorded_simulated_call_replays_with_the_same_events_at_the_same_virtual_times(
        tmp_path: Path) -> None:
    agent, tools = recording_agent(tmp_path), lookup_tools()
    await recorded_call(agent, tools)
    [path] = recordings(tmp_path)
    recording = load_recording(path)
    assert recording.header.clock == "virtual" and recording.dropped == 0
    recorded = compared_events(list(recording.records))
    names = [seen.line.split()[0] for seen in recorded]
    assert names.count("TurnEnded") == 3 and "ToolCallStarted" in names and "BotHeard" in names
    assert any("barge_in=True" in seen.line for seen in recorded)
    replayed = compared_events(await replay_recording(recording, agent, tools, SystemClock()))
    _rows, differences = compare(recorded, replayed, VIRTUAL_TOLERANCE)
    assert differences == [], "\n".join(map(str, differences))
    assert recorded == replayed  # the same events at the same times, to the microsecond


async def test_a_shorter_silence_threshold_in_the_replay_shows_the_turns_ending_earlier(tmp_path: Path) -> None:
    agent, tools = recording_agent(tmp_path), lookup_tools()
    await recorded_call(agent, tools)
    recording = load_recording(recordings(tmp_path)[0])
    recorded = compared_events(list(recording.records))
    replayed = compared_events(await replay_recording(recording, agent, tools, SystemClock(), silence=0.3,
                                                      vad=energy_vad))
    _rows, differences = compare(recorded, replayed, VIRTUAL_TOLERANCE)
    ends = [(d.recorded, d.replayed) for d in differences
            if d.recorded is not None and d.replayed is not None and d.recorded.line.startswith("TurnEnded")]
    assert ends, "\n".join(map(str, differences))
    assert all(b.t < a.t - 0.4 for a, b in ends)  # 0.5 s sooner, give or take a frame
