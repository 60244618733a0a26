"""``brisvox loadtest``: the simulated player, the wire, the arguments, and a small run on 127.0.0.1."""

from __future__ import annotations

import itertools
import json
import os
import re
import sys
import wave
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brisvox.__main__ import main
from brisvox.loadtest import LoadtestError, _Player, bot_audio, format_row, read_speech
from brisvox.transport.rtvi.wire import encode_audio, encode_message
from tests._process import Watched

ROOT = Path(__file__).resolve().parents[1]


def test_a_player_without_a_buffer_counts_every_late_chunk_and_a_buffer_absorbs_them() -> None:
    bare, buffered = _Player(0.0), _Player(0.04)
    for player in (bare, buffered):
        player.arrived(10.0, 0.02, first=True)
        player.arrived(10.025, 0.02, first=False)  # 5 ms after the first chunk ran out
        player.arrived(10.04, 0.02, first=False)
    assert bare.underrun_s == pytest.approx(0.005)
    assert buffered.underrun_s == 0.0
    buffered.arrived(10.2, 0.02, first=False)  # a gap longer than the buffer's lead
    assert buffered.underrun_s == pytest.approx(10.2 - (10.04 + 0.06))


def test_bot_audio_reads_the_pcm_and_rate_of_an_audio_frame_and_skips_messages() -> None:
    assert bot_audio(encode_audio(b"\x01\x02" * 480, 24000)) == (b"\x01\x02" * 480, 24000)
    assert bot_audio(encode_message({"type": "bot-ready"})) is None


def test_bot_audio_refuses_bytes_that_are_not_a_frame_and_half_samples() -> None:
    with pytest.raises(LoadtestError, match="not a pipecat Frame"):
        bot_audio(b"\xff\xff\xff")
    with pytest.raises(LoadtestError, match="half a sample"):
        bot_audio(encode_audio(b"\x01\x02\x03", 16000))


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_any_server_bytes_give_audio_nothing_or_a_loadtest_error(data: bytes) -> None:
    try:
        got = bot_audio(data)
    except LoadtestError:
        return
    assert got is None or (isinstance(got[0], bytes) and len(got[0]) % 2 == 0 and got[1] > 0)


def _wav(path: Path, rate: int = 16000, channels: int = 1, frames: int = 1600) -> Path:
    with wave.open(str(path), "wb") as w:
        w.setframerate(rate)
        w.setnchannels(channels)
        w.setsampwidth(2)
        w.writeframes(bytes(2 * channels * frames))
    return path


def test_the_speech_is_cut_into_20_ms_frames_and_a_wrong_format_is_named(tmp_path: Path) -> None:
    frames = read_speech(_wav(tmp_path / "ok.wav", frames=1000))
    assert [len(f) for f in frames] == [640, 640, 640, 640]  # 1000 samples: the last frame padded
    with pytest.raises(LoadtestError, match="16 kHz mono PCM16, got 8000 Hz, 2 channel"):
        read_speech(_wav(tmp_path / "stereo8k.wav", rate=8000, channels=2))
    (tmp_path / "junk.wav").write_bytes(b"not a wav")
    with pytest.raises(LoadtestError, match="not a readable WAV file"):
        read_speech(tmp_path / "junk.wav")


def test_bad_arguments_are_named_and_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["loadtest", "-n", "0"]) == 2
    assert "--calls and --turns must be at least 1" in capsys.readouterr().err
    assert main(["loadtest", "http://127.0.0.1:1/rtvi"]) == 2
    assert "must start with ws:// or wss://" in capsys.readouterr().err
    assert main(["loadtest", "--jitter-buffer-ms", "-1"]) == 2
    assert "--jitter-buffer-ms must not be negative" in capsys.readouterr().err


def test_a_row_shows_dashes_where_the_server_was_not_measured() -> None:
    summary = {"n": 2, "replies": 4, "turns": 4, "ovh_p50_ms": 1.25, "ovh_p95_ms": 3.0, "underrun_turns": 0,
               "n_errors": 0}
    assert format_row(summary) == "| 2 | 4/4 | 1.2 / 3.0 | 0 | - | - | - | - | 0 |"


SHORT_AGENT = """\
[agent]
name = "loadtest"
prompt = "You answer the phone."

[vad]
min_silence = 0.192

[turn]
final_grace = 0.0
punctuated_grace = 0.0
min_pause = 0.0

[window]
enabled = false

[stt]
provider = "mock"

[llm]
provider = "mock"
options = { reply = "Sure." }

[tts]
provider = "mock"
"""


class _Server(Watched):
    """``brisvox serve`` with a mock agent on a free port of 127.0.0.1."""

    def __init__(self, agent: Path) -> None:
        env = {**os.environ, "BRISVOX_PORT": "0", "BRISVOX_HOST": "127.0.0.1", "PYTHONPATH": str(ROOT / "src"),
               "BRISVOX_SMART_TURN_PATH": str(agent.parent / "no-smart-turn.onnx")}
        env.pop("BRISVOX_AGENT_FILE", None)
        super().__init__([sys.executable, "-m", "brisvox", "serve", "--workers", "1", str(agent)], env=env, cwd=ROOT,
                         marker="listening on")

    def port(self) -> int:
        m = re.search(r"listening on http://127\.0\.0\.1:(\d+)", self.output_once_ready(60))
        assert m is not None, "".join(self.lines)
        return int(m.group(1))

    def stop(self, timeout: float = 40) -> None:
        super().stop(timeout)


@pytest.mark.realtime
@pytest.mark.slow
def test_loadtest_drives_two_callers_against_a_mock_agent_and_prints_their_row(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from tests._speech import espeak_wav

    speech = espeak_wav("check the status of my order", tmp_path, lead=0.0, trail=0.0, speed=180)
    wav = tmp_path / "speech.wav"
    with wave.open(str(wav), "wb") as w:
        w.setframerate(16000)
        w.setnchannels(1)
        w.setsampwidth(2)
        w.writeframes(speech.pcm)
    agent = tmp_path / "agent.toml"
    agent.write_text(SHORT_AGENT)
    server = _Server(agent)
    try:
        port = server.port()
        out = tmp_path / "run.json"
        code = main(["loadtest", f"ws://127.0.0.1:{port}/rtvi", "-n", "2", "--turns", "1", "--stagger", "0.5",
                     "--spread", "0.5", "--wav", str(wav), "--server-pid", str(server.proc.pid), "--setup-probe",
                     "1", "--out", str(out)])
    finally:
        server.stop()
    printed = capsys.readouterr().out
    assert code == 0, printed + "".join(server.lines)
    assert printed.splitlines()[0].startswith("| calls | replies |") and "\n| 2 | 2/2 |" in printed
    result = json.loads(out.read_text())
    summary = result["summary"]
    assert summary["n_errors"] == 0 and summary["replies"] == 2
    # each reply waited at least for the mocks (STT 150 + LLM 300 + TTS 100 ms) and the VAD's stop
    assert all(0.55 < t["v2v"] < 3.0 and t["bot_audio_s"] > 0.2 for t in result["turns"])
    assert summary["cpu_steady_pct"] > 0 and summary["rss_max_mb"] >= summary["rss_idle_mb"] > 10
    assert summary["setup_cpu_ms"] is not None and summary["cpu_ms_per_call_s"] > 0



async def test_a_caller_streams_real_time_frames_turns_on_160_ms_boundaries_and_times_each_reply(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import asyncio

    import brisvox.loadtest as lt
    from brisvox.loadtest_conn import OnBinary

    loop = asyncio.get_running_loop()
    pcm = [bytes((i + 1, 0)) * 320 for i in range(5)]
    silence, speech = lt._audio_frame(bytes(640)), [lt._audio_frame(p) for p in pcm]
    loud = encode_audio(b"\x00\x10" * 640, 16000)  # 40 ms of audio at peak 4096
    sent: list[tuple[float, bytes]] = []

    class FakeCall:
        def __init__(self, on_binary: OnBinary) -> None:
            self.on_binary = on_binary

        def send(self, frame: bytes) -> None:
            sent.append((loop.time(), frame))
            if frame == speech[-1]:  # the bot answers 0.76 s after the turn's last frame, 0.4 s of audio
                for i in range(10):
                    loop.call_later(0.76 + 0.04 * i, lambda: self.on_binary(loop.time(), memoryview(loud)))

        async def close(self) -> None:
            return None

    async def fake_open(url: str, timeout: float, on_binary: OnBinary) -> FakeCall:
        return FakeCall(on_binary)

    monkeypatch.setattr(lt, "open_call", fake_open)
    plan = lt.Plan(url="ws://x/rtvi", n=1, turns=2, stagger=0.0, spread=0.0, reply_timeout=6.0, jitter_buffer=0.04)
    result = await lt.run_load(plan, pcm, server_pid=None, ideal_ms=760.0)
    assert result.summary["n_errors"] == 0 and result.summary["replies"] == 2
    assert [round(t["v2v"], 3) for t in result.turns] == [0.76, 0.76]
    assert all(t["bot_audio_s"] == 0.4 and t["underrun_s"] == 0 for t in result.turns)
    times = [t for t, _ in sent]
    assert all(abs(b - a - 0.02) < 1e-6 for a, b in itertools.pairwise(times))  # real time, no gap
    starts = [k for k, (_, f) in enumerate(sent) if f == speech[0]]
    assert len(starts) == 2 and all(k % 8 == 0 for k in starts) and times[starts[0]] >= times[0] + 2.0
    # after a turn's speech: at least 100 frames (2 s) of silence, and the reply's playout + 0.5 s
    assert starts[1] - (starts[0] + 5) >= 100
    assert sent[-1][1] == silence and result.summary["client_send_lag_max_ms"] == 0.0
