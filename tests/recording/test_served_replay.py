"""A call through ``brisvox serve`` over the WebSocket is recorded, and its recording replays."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from brisvox.core.clock import SystemClock
from brisvox.recording import load_recording
from brisvox.transport.websocket.client import ClientOptions, run
from tests._speech import espeak_wav
from tests.recording._calls import recordings
from tests.server._nodes import AGENT, ROOT, Node
from tests.server.test_agent_brain_e2e import BRAIN
from tests.server.test_agent_link_e2e import AGENT as LINKED
from tests.server.test_agent_link_e2e import ENV, Proc, calling, free_port, serving


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
    assert "TurnEnded epoch=0" in _replays(path)


@pytest.mark.realtime
@pytest.mark.slow
async def test_a_served_brain_mode_call_is_recorded_and_replays(tmp_path: Path) -> None:
    """``brisvox serve`` linked to an SDK brain that answers the turns (each a process on 127.0.0.1)."""
    clock = SystemClock()
    speech = espeak_wav("a table for two on friday at seven", tmp_path, speed=200, lead=0.1, trail=0.0).pcm
    port, calls = free_port(), tmp_path / "calls"
    (tmp_path / "brain.py").write_text(BRAIN)
    agent = tmp_path / "host.toml"
    agent.write_text(LINKED.format(port=port) + f'\n[record]\nenabled = true\ndir = "{calls}"\n')
    brain = Proc([sys.executable, str(tmp_path / "brain.py"), str(port)],
                 env={**ENV, "PYTHONPATH": f"{ROOT / 'src'}:{ROOT}"})
    server = Proc([sys.executable, "-m", "brisvox", "serve", str(agent), "--workers", "1"])
    try:
        await brain.wait_for("serving", clock)
        async with calling(await serving(server, clock), clock, speech) as caller:
            assert "noon" in await caller.bot_says(caller.say(), lambda t: "noon" in t)
    finally:
        for proc in (brain, server):
            proc.stop()
    [path] = recordings(calls)
    recording = load_recording(path)
    assert recording.header.brain and recording.header.clock == "real"
    assert "noon" in "".join(event.get("text", "") for r in recording.of("llm") for _dt, event in r["events"])
    await asyncio.to_thread(_replays, path)


def _replays(path: Path) -> str:
    """``brisvox replay`` of ``path`` (a served call: a 1.5 s tolerance) in a process; its output, once it matched."""
    replay = subprocess.run([sys.executable, "-m", "brisvox", "replay", str(path), "--tolerance", "1.5"],
                            capture_output=True, text=True,
                            timeout=300, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    assert replay.returncode == 0, replay.stdout + replay.stderr
    assert "the replay matches" in replay.stdout
    return replay.stdout
