"""End to end (slow, real time): ``brisvox serve`` with the demo agent, called by the reference client.

Real local VAD (Silero), STT (faster-whisper) and TTS (hibari); the scripted restaurant
host as the LLM (the environment's LLM settings are removed).  The caller is an espeak-ng
recording of a request; the test checks the bot answered with speech, the events name
the tool call and its result, and SIGTERM drains the server to exit status 0.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from brisvox.audio import read_wav, write_wav
from tests._speech import espeak_wav
from tests.server._demo_server import DemoServer, need_models

ROOT = Path(__file__).resolve().parents[2]
REQUEST = "I would like a table for four people tomorrow at seven."
# Said again after a pause: on a loaded machine the first turn can end before whisper's
# final arrives (its words then join the next turn), and the test must not depend on that.
AGAIN = "A table for four people tomorrow at seven please."

pytestmark = [pytest.mark.realtime, pytest.mark.slow]


def voiced_seconds(pcm: bytes, rate: int) -> float:
    """Seconds of 20 ms windows louder than -40 dBFS."""
    samples = np.frombuffer(pcm, dtype=np.int16).astype(np.float64)
    n = rate // 50
    windows = samples[: len(samples) // n * n].reshape(-1, n)
    rms = np.sqrt(np.mean(windows**2, axis=1)) if len(windows) else np.zeros(0)
    return float(np.sum(rms > 32768 * 0.01)) * 0.02


def test_a_spoken_request_to_the_demo_server_is_answered_with_a_tool_call_and_speech_then_sigterm_drains(
    tmp_path: Path,
) -> None:
    need_models()
    request = espeak_wav(REQUEST, tmp_path, speed=150, trail=7.0)
    again = espeak_wav(AGAIN, tmp_path, speed=150, lead=0.0, trail=4.0)
    wav = tmp_path / "request.wav"
    write_wav(wav, request.pcm + again.pcm, request.sample_rate)
    heard, events_path = tmp_path / "heard.wav", tmp_path / "events.jsonl"
    server = DemoServer()
    try:
        url = server.url()
        client = subprocess.run(
            [sys.executable, "-m", "brisvox.transport.websocket.client", url.replace("http", "ws") + "/ws",
             "--input", str(wav), "--output", str(heard), "--events", str(events_path), "--linger-ms", "8000",
             "--max-duration", "60"],
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, cwd=ROOT, capture_output=True, text=True, timeout=90,
        )
    finally:
        code = server.stop()
    log = server.log()
    assert client.returncode == 0, client.stderr + log
    events = [json.loads(line) for line in events_path.read_text().splitlines()]
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "call_info" and "scripted" in events[0]["llm"]
    turns = [e["text"] for e in events if e["kind"] == "user_turn"]
    assert "table" in " ".join(turns).lower(), (events, log)
    calls = [e for e in events if e["kind"] == "tool_call"]
    assert [c["name"] for c in calls][:1] == ["check_availability"], turns
    assert json.loads(calls[0]["arguments"])["party_size"] == 4
    result = next(e for e in events if e["kind"] == "tool_result")
    assert result["id"] == calls[0]["id"] and result["outcome"] == "ok"
    assert any(e["kind"] == "latency" for e in events)
    reply = "".join(e["text"] for e in events if e["kind"] == "bot_text")
    assert "free" in reply or "taken" in reply, reply
    recording = read_wav(heard)
    assert voiced_seconds(recording.pcm, recording.sample_rate) > 1.0
    assert code == 0, log
    assert "stopped (drained, exit status 0)" in log
    assert "SIGTERM: draining" in log
