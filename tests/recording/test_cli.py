from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

import brisvox.recording
import brisvox.testing
from brisvox.__main__ import main
from brisvox.core.clock import run_virtual
from brisvox.server.replay import EXIT_DIFFERS, EXIT_UNREADABLE
from tests.recording._calls import lookup_tools, recorded_call, recording_agent, recordings


def _recorded(directory: Path) -> Path:
    run_virtual(lambda: recorded_call(recording_agent(directory), lookup_tools()))
    [path] = recordings(directory)
    return path


def test_replay_prints_both_event_streams_and_exits_0_when_they_match(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _recorded(tmp_path)
    assert main(["replay", str(path)], tools=lookup_tools()) == 0
    out = capsys.readouterr().out
    assert "recorded" in out and "| replay" in out and "the replay matches" in out and "tolerance 1 ms" in out
    assert "ToolCallStarted epoch=0 name='lookup'" in out


def test_replay_with_a_shorter_silence_exits_1_marking_the_turn_ends_that_moved(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _recorded(tmp_path)
    assert main(["replay", str(path), "--silence", "0.3"], tools=lookup_tools()) == EXIT_DIFFERS
    out = capsys.readouterr().out
    assert any(line.startswith("!") and "TurnEnded" in line for line in out.splitlines())
    assert "difference(s)" in out


def test_replay_of_an_unreadable_recording_exits_2_saying_what_is_wrong(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"format": "brisvox-recording", "version": 99}\n')
    assert main(["replay", str(bad)]) == EXIT_UNREADABLE
    assert "version 99 is not readable" in capsys.readouterr().err
    assert main(["replay", str(tmp_path / "missing.jsonl.gz")]) == EXIT_UNREADABLE
    assert "cannot read the recording" in capsys.readouterr().err


def test_the_recording_package_and_the_test_kit_export_these_names() -> None:
    assert sorted(brisvox.recording.__all__) == sorted(["VERSION", "Recording", "RecordingError", "load_recording",
                                                        "parse_recording"])
    assert "Replay" in brisvox.testing.__all__


def _as_version(path: Path, version: int, out: Path) -> Path:
    """``path`` rewritten as a recording of format ``version`` (its header says so; no link field)."""
    lines = gzip.decompress(path.read_bytes()).decode().splitlines()
    header = json.loads(lines[0])
    header["version"] = version
    header.pop("agent_link")
    out.write_text("\n".join([json.dumps(header), *lines[1:]]) + "\n")
    return out


def test_a_version_1_recording_still_replays_and_a_newer_one_is_refused_naming_both_versions(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _recorded(tmp_path)
    assert main(["replay", str(_as_version(path, 1, tmp_path / "v1.jsonl"))], tools=lookup_tools()) == 0
    assert "the replay matches" in capsys.readouterr().out
    newer = _as_version(path, brisvox.recording.VERSION + 1, tmp_path / "v3.jsonl")
    assert main(["replay", str(newer)], tools=lookup_tools()) == EXIT_UNREADABLE
    assert (f"recording format version {brisvox.recording.VERSION + 1} is not readable by this brisvox "
            "(it reads versions 1, 2)") in capsys.readouterr().err
