"""End to end (slow, real time): ``brisvox serve`` with the demo agent, called by the reference client.

Real local VAD (Silero), STT (faster-whisper) and TTS (hibari); the scripted restaurant
host as the LLM (the environment's LLM settings are removed).  The caller is an espeak-ng
recording of a request; the test checks the bot answered with speech, the events name
the tool call and its result, and SIGTERM drains the server to exit status 0.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from brisvox.audio import read_wav, write_wav
from brisvox.inference.models import SILERO_VAD, model_path
from tests._speech import espeak_wav

ROOT = Path(__file__).resolve().parents[2]
REQUEST = "Hello, I would like a table for four people tomorrow at seven."
LLM_VARIABLES = ("BRISVOX_LLM_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "BRISVOX_AGENT_FILE")

pytestmark = [pytest.mark.realtime, pytest.mark.slow]


def _need_models() -> None:
    pytest.importorskip("faster_whisper", reason="the local extra is not installed")
    pytest.importorskip("hibari", reason="the local extra is not installed")
    if not model_path(SILERO_VAD).exists():
        pytest.skip("models not fetched (brisvox models fetch)")


def start_demo_server() -> tuple[subprocess.Popen[str], str]:
    """``brisvox serve`` (no agent file: the demo) on a free port of 127.0.0.1; returns it and its URL."""
    env = {**os.environ, "BRISVOX_PORT": "0", "BRISVOX_HOST": "127.0.0.1", "PYTHONPATH": str(ROOT / "src")}
    for name in LLM_VARIABLES:
        env.pop(name, None)
    proc = subprocess.Popen([sys.executable, "-m", "brisvox", "serve"], env=env, cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
    if m is None:
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"the server did not start: {line}{err}")
    assert "scripted restaurant host" in line
    return proc, m.group(1)


def stop_server(proc: subprocess.Popen[str]) -> tuple[str, str]:
    proc.send_signal(signal.SIGTERM)
    try:
        return proc.communicate(timeout=40)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


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
    _need_models()
    request = espeak_wav(REQUEST, tmp_path, speed=150, trail=6.0)
    wav = tmp_path / "request.wav"
    write_wav(wav, request.pcm, request.sample_rate)
    heard, events_path = tmp_path / "heard.wav", tmp_path / "events.jsonl"
    proc, url = start_demo_server()
    try:
        client = subprocess.run(
            [sys.executable, "-m", "brisvox.transport.websocket.client", url.replace("http", "ws") + "/ws",
             "--input", str(wav), "--output", str(heard), "--events", str(events_path), "--linger-ms", "8000",
             "--max-duration", "60"],
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, cwd=ROOT, capture_output=True, text=True, timeout=90,
        )
    finally:
        out, err = stop_server(proc)
    assert client.returncode == 0, client.stderr + err
    events = [json.loads(line) for line in events_path.read_text().splitlines()]
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "call_info" and "scripted" in events[0]["llm"]
    turn = next(e for e in events if e["kind"] == "user_turn")
    assert "table" in turn["text"].lower(), turn
    calls = [e for e in events if e["kind"] == "tool_call"]
    assert [c["name"] for c in calls][:1] == ["check_availability"], kinds
    assert json.loads(calls[0]["arguments"])["party_size"] == 4
    result = next(e for e in events if e["kind"] == "tool_result")
    assert result["id"] == calls[0]["id"] and result["outcome"] == "ok"
    assert any(e["kind"] == "latency" for e in events)
    reply = "".join(e["text"] for e in events if e["kind"] == "bot_text")
    assert "free" in reply or "taken" in reply, reply
    recording = read_wav(heard)
    assert voiced_seconds(recording.pcm, recording.sample_rate) > 1.0
    assert proc.returncode == 0, err
    assert "stopped (drained, exit status 0)" in out
    assert "SIGTERM: draining" in err
