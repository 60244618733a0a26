from __future__ import annotations

import asyncio
import math
import os
import struct
import sys
from pathlib import Path

import pytest

from brisvox.audio.codec import AudioEncoding
from brisvox.audio.g711 import ulaw_decode, ulaw_encode
from brisvox.audio.wav import WavAudio, read_wav, write_wav
from brisvox.core.clock import SystemClock
from brisvox.core.tasks import TaskScope
from brisvox.transport.echo import EchoOptions, run_echo
from brisvox.transport.websocket import ServerConfig, WebSocketServer
from brisvox.transport.websocket.client import ClientOptions, main, run
from tests.transport.websocket._helpers import ws_server

SRC = str(Path(__file__).resolve().parents[3] / "src")


def tone(seconds: float, rate: int = 16000) -> WavAudio:
    n = int(seconds * rate)
    pcm = b"".join(struct.pack("<h", int(9000 * math.sin(2 * math.pi * 440 * i / rate))) for i in range(n))
    return WavAudio(pcm=pcm, sample_rate=rate)


async def test_the_reference_client_records_the_echo_byte_exact() -> None:
    audio = tone(1.0)
    async with ws_server(options=EchoOptions(mark_every=10)) as (clock, server, _scope):
        result = await run(ClientOptions(url=server.url, audio=audio, linger=0.5), clock)
    assert result.ok, result.failure
    assert bytes(result.recording) == audio.pcm
    assert result.stop_reason == "ended" and result.close_code == 1000
    assert result.marks_echoed == [f"m{i}" for i in range(0, 50, 10)]


async def test_the_reference_client_speaks_mulaw() -> None:
    audio = tone(0.5, rate=8000)
    async with ws_server() as (clock, server, _scope):
        result = await run(ClientOptions(url=server.url, audio=audio, encoding=AudioEncoding.MULAW, linger=0.5),
                           clock)
    assert result.ok, result.failure
    assert bytes(result.recording) == ulaw_decode(ulaw_encode(audio.pcm))


async def test_a_clear_cuts_the_unplayed_audio_from_the_recording() -> None:
    audio = tone(1.0)
    async with ws_server() as (clock, server, _scope):
        # '*' makes the echo engine clear (a new epoch) right after the call starts.
        result = await run(ClientOptions(url=server.url, audio=audio, dtmf="*", linger=0.5), clock)
    assert result.ok, result.failure
    assert result.clears == 1
    assert len(result.recording) <= len(audio.pcm)


async def test_a_bot_hang_up_is_a_clean_end_of_the_call() -> None:
    async with ws_server() as (clock, server, _scope):
        result = await run(ClientOptions(url=server.url, audio=tone(1.0), dtmf="#"), clock)
    assert result.ok and result.stop_reason == "ended"


async def test_a_refused_start_fails_the_call() -> None:
    async with ws_server() as (clock, server, _scope):
        result = await run(ClientOptions(url=server.url, audio=tone(0.1, rate=11025)), clock)
    assert not result.ok and "invalid_start" in (result.failure or "")


async def test_the_client_reads_while_it_sends_as_fast_as_it_can() -> None:
    async with ws_server() as (clock, server, _scope):
        result = await run(ClientOptions(url=server.url, audio=tone(5.0), realtime=False, linger=1.0), clock)
    assert result.ok, result.failure
    assert 0 < len(result.recording) <= len(tone(5.0).pcm)


async def test_a_server_shutdown_mid_call_fails_the_call() -> None:
    async with ws_server() as (clock, server, scope):
        task = scope.spawn(run(ClientOptions(url=server.url, audio=tone(3.0)), clock), name="client")
        await clock.sleep(1.0)
        await server.shutdown()
        result = await task
    assert not result.ok and "shut down" in (result.failure or "")
    assert len(result.recording) > 0


async def test_the_maximum_duration_fails_the_call() -> None:
    async with ws_server() as (clock, server, _scope):
        result = await run(ClientOptions(url=server.url, audio=tone(3.0), max_duration=1.0), clock)
    assert not result.ok and "max-duration" in (result.failure or "")


def _wav(tmp_path: Path, audio: WavAudio) -> str:
    path = tmp_path / "in.wav"
    write_wav(path, audio.pcm, audio.sample_rate)
    return str(path)


@pytest.mark.parametrize(
    "extra",
    [["--bogus"], ["--meta", "novalue"], ["--linger-ms", "-5"], ["--dtmf", "xyz"], ["--encoding", "opus"]],
)
def test_usage_errors_exit_with_2(tmp_path: Path, extra: list[str]) -> None:
    wav = _wav(tmp_path, tone(0.1))
    assert main(["ws://127.0.0.1:9/ws", "--input", wav, "--output", str(tmp_path / "o.wav"), *extra]) == 2


def test_a_missing_or_invalid_input_or_an_unwritable_output_exits_with_2(tmp_path: Path) -> None:
    out = str(tmp_path / "o.wav")
    assert main(["ws://127.0.0.1:9/ws", "--input", str(tmp_path / "none.wav"), "--output", out]) == 2
    bad = tmp_path / "bad.wav"
    bad.write_bytes(b"not a wav")
    assert main(["ws://127.0.0.1:9/ws", "--input", str(bad), "--output", out]) == 2
    wav = _wav(tmp_path, tone(0.1))
    assert main(["ws://127.0.0.1:9/ws", "--input", wav, "--output", str(tmp_path / "no" / "dir.wav")]) == 2


def test_a_failed_call_exits_with_1_and_still_writes_the_recording(tmp_path: Path) -> None:
    wav = _wav(tmp_path, tone(0.1))
    out = tmp_path / "o.wav"
    assert main(["ws://127.0.0.1:9/ws", "--input", wav, "--output", str(out)]) == 1
    assert read_wav(out).pcm == b""


@pytest.mark.realtime
async def test_the_ws_client_command_records_the_echo_byte_exact(tmp_path: Path) -> None:
    clock = SystemClock()
    audio = tone(0.6, rate=8000)
    wav = _wav(tmp_path, audio)
    out = tmp_path / "heard.wav"
    async with TaskScope("engine") as scope, WebSocketServer(clock, ServerConfig()) as server:
        scope.spawn(run_echo(clock, server, scope), name="echo")
        env = {**os.environ, "PYTHONPATH": SRC}
        t0 = clock.now()
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "brisvox.transport.websocket.client", server.url, "--input", wav,
            "--output", str(out), "--encoding", "mulaw", "--meta", "k=v", "--linger-ms", "400", env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _stdout, stderr = await proc.communicate()
        elapsed = clock.now() - t0
        await server.shutdown()
    assert proc.returncode == 0, stderr.decode()
    heard = read_wav(out)
    assert heard.sample_rate == 8000
    assert heard.pcm == ulaw_decode(ulaw_encode(audio.pcm))
    assert elapsed >= 1.0  # 0.6 s of input in real time plus the 0.4 s linger
