"""A call through ``brisvox serve`` over the WebSocket is recorded, and its recording replays."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from brisvox.recording import load_recording
from brisvox.transport.websocket.client import ClientOptions, run
from tests._speech import espeak_wav
from tests.recording._calls import recordings
from tests.server._nodes import AGENT, ROOT, Node


@pytest.mark.realtime
def test_a_websocket_call_through_serve_is_recorded_and_replays(tmp_path: Path) -> None:
    speech = espeak_wav("what time do you open on friday", tmp_path, lead=0.8, trail=3.0)
    agent = tmp_path / "agent.toml"
    agent.write_text(AGENT + f'[record]\nenabled = true\ndir = "{tmp_path / "calls"}"\nkeep = 5\n')
    node = Node(agent)
    try:
        result = asyncio.run(run(ClientOptions(url=node.url.replace("http://", "ws://") + "/ws", audio=speech,
                                               linger=0.5, connect_timeout=10.0)))
        assert result.ok, node.log()
    finally:
        assert node.stop() == 0, node.log()
    [path] = recordings(tmp_path / "calls")
    recording = load_recording(path)
    assert recording.header.clock == "real" and recording.header.agent == "node"
    assert recording.of("audio") and recording.of("llm") and recording.of("tts")
    assert any(r["e"] == "TurnEnded" for r in recording.of("event"))
    # The served call's models (VAD, Smart Turn, Whisper) took real time on a machine shared with
    # other tests, which the replay on virtual time does not spend: a wide tolerance.
    replay = subprocess.run([sys.executable, "-m", "brisvox", "replay", str(path), "--tolerance", "1.5"],
                            capture_output=True, text=True,
                            timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "the replay matches" in replay.stdout and "TurnEnded epoch=0" in replay.stdout
