from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

import brisvox
from brisvox.core.clock import SystemClock
from brisvox.recording import load_recording
from brisvox.recording.format import RecordSettings
from brisvox.recording.tap import QUEUE_LINES, CallRecorder, header
from brisvox.server.agent_file import AgentFileError, parse_agent_file
from brisvox.server.metrics import ServerMetrics
from brisvox.testing import Replay
from tests.recording._calls import lookup_tools, recorded_call, recording_agent, recordings


def _head() -> object:
    return header("a", None, virtual=True, input_rate=16000, output_rate=16000, started="now")


def test_record_is_off_unless_an_agent_turns_it_on_and_a_relative_dir_is_under_the_agent_file(
        tmp_path: Path) -> None:
    plain = parse_agent_file('[agent]\nname = "a"\nprompt = "p"\n', source=tmp_path / "a.toml")
    assert plain.record is None
    on = parse_agent_file('[agent]\nname = "a"\nprompt = "p"\n[record]\nenabled = true\ndir = "calls"\nkeep = 3\n',
                          source=tmp_path / "a.toml")
    assert on.record == RecordSettings(dir=tmp_path / "calls", keep=3)
    with pytest.raises(AgentFileError, match=r"record\.keep"):
        parse_agent_file('[agent]\nname = "a"\nprompt = "p"\n[record]\nenabled = true\nkeep = 0\n')
    s2s = parse_agent_file('[agent]\nname = "a"\nprompt = "p"\n[s2s]\nprovider = "openai-realtime"\n'
                           'api_key_env = "OPENAI_API_KEY"\n[record]\nenabled = true\n', source=tmp_path / "a.toml",
                           environ={"OPENAI_API_KEY": "sk-test-0123456789"})
    assert s2s.record == RecordSettings(dir=tmp_path / "recordings", keep=100)


async def test_with_record_off_the_call_gets_the_servers_own_providers_and_writes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import brisvox.server.call as served

    given: list[object] = []
    real = served.run_call

    async def spy(session: Any, config: Any, providers: Any, *args: Any, **kwargs: Any) -> Any:
        given.append(providers)
        return await real(session, config, providers, *args, **kwargs)

    monkeypatch.setattr(served, "run_call", spy)
    off = await recorded_call(recording_agent(tmp_path, record=False), lookup_tools())
    on = await recorded_call(recording_agent(tmp_path / "on"), lookup_tools())
    assert given[0] is off.providers and given[1] is not on.providers
    assert recordings(tmp_path) == [] and len(recordings(tmp_path / "on")) == 1


async def test_each_closed_recording_is_counted_in_the_metrics(tmp_path: Path) -> None:
    metrics = ServerMetrics(tool_names=["lookup"])
    await recorded_call(recording_agent(tmp_path), lookup_tools(), metrics)
    text = metrics.render().decode()
    assert 'brisvox_recordings_total{outcome="written"} 1.0' in text
    assert 'brisvox_recordings_total{outcome="failed"} 0.0' in text
    assert "brisvox_recording_records_dropped_total 0.0" in text


async def test_only_the_newest_keep_recordings_stay(tmp_path: Path) -> None:
    agent, tools = recording_agent(tmp_path, keep=2), lookup_tools()
    for _ in range(3):
        await recorded_call(agent, tools)
    assert len(recordings(tmp_path)) == 2


async def test_a_full_queue_drops_records_counts_them_in_the_file_and_never_waits(tmp_path: Path,
                                                                                 caplog: pytest.LogCaptureFixture) -> None:
    recorder = CallRecorder(RecordSettings(tmp_path, 5), "c1", SystemClock(), _head())  # type: ignore[arg-type]
    for _ in range(QUEUE_LINES + 10):
        recorder.audio(b"\x00\x00")
    recorder.finish()
    await recorder.run()
    assert recorder.dropped == 11  # the header took one place
    assert load_recording(recorder.path).dropped == 11
    assert sum("records are dropped" in r.getMessage() for r in caplog.records) == 1


async def test_a_recording_that_cannot_be_written_is_logged_with_its_traceback_and_counted(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    recorder = CallRecorder(RecordSettings(blocked, 5), "c1", SystemClock(), _head())  # type: ignore[arg-type]
    recorder.audio(b"\x00\x00")
    recorder.finish()
    await recorder.run()
    assert recorder.failures == 1
    [line] = [r for r in caplog.records if "unrecorded" in r.getMessage()]
    assert line.levelno == logging.ERROR and line.exc_info is not None


def test_a_recording_is_a_regression_test_with_brisvox_testing(tmp_path: Path) -> None:
    import asyncio

    from brisvox.core.clock import VirtualTimeLoop

    agent, tools = recording_agent(tmp_path), lookup_tools()
    loop = VirtualTimeLoop()
    try:
        loop.run_until_complete(recorded_call(agent, tools))
    finally:
        loop.close()
    asyncio.set_event_loop(None)
    [path] = recordings(tmp_path)
    as_agent = brisvox.Agent.from_file(tmp_path / "agent.toml", tools=[lookup_tools().tool("lookup")])  # type: ignore[list-item]
    Replay.from_file(path, agent=as_agent).expect_same()
    changed = Replay.from_file(path, agent=as_agent, silence=0.3)
    assert any(d.recorded is not None and "TurnEnded" in d.recorded.line for d in changed.differences)
    with pytest.raises(AssertionError, match="the replay differs"):
        changed.expect_same()



async def test_caller_audio_heard_while_the_call_set_up_is_recorded_at_a_time_from_the_sessions_opening(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An agent link opens before the pipeline and its recorder (seconds on a loaded machine)
    while the caller already speaks: the recording counts from the session's opening, so none
    of its times is negative and it loads (before: "field 't' must be >= 0")."""
    import contextlib
    from collections.abc import AsyncIterator

    import brisvox.server.call as served

    real = served.call_recording

    @contextlib.asynccontextmanager
    async def slow_set_up(*args: Any) -> AsyncIterator[Any]:
        await SystemClock().sleep(1.0)  # the link's opening, as the caller speaks
        async with real(*args) as recorder:
            yield recorder

    monkeypatch.setattr(served, "call_recording", slow_set_up)
    await recorded_call(recording_agent(tmp_path), lookup_tools())
    [path] = recordings(tmp_path)
    recording = load_recording(path)
    assert recording.of("event") and min(r["t"] for r in recording.records) >= 0.0
