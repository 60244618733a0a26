from __future__ import annotations

import asyncio
import json
import math
import os
import struct
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from websockets.asyncio.server import ServerConnection, serve

from brisvox.audio.codec import AudioEncoding
from brisvox.audio.g711 import ulaw_decode, ulaw_encode
from brisvox.audio.wav import WavAudio, read_wav, write_wav
from brisvox.core.clock import SimClock, SystemClock
from brisvox.core.tasks import TaskScope
from brisvox.transport.echo import EchoOptions, run_echo
from brisvox.transport.websocket import ServerConfig, WebSocketServer
from brisvox.transport.websocket.client import ClientOptions, _options, _parser, main, run
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


async def test_a_clear_before_any_bot_audio_cuts_nothing_and_is_not_sent_to_the_client() -> None:
    audio = tone(1.0)
    async with ws_server() as (clock, server, _scope):
        # '*' makes the echo engine clear (a new epoch) right after the call starts.
        result = await run(ClientOptions(url=server.url, audio=audio, dtmf="*", linger=0.5), clock)
    assert result.ok, result.failure
    assert result.clears == 0
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


@asynccontextmanager
async def scripted(script: Callable[[ServerConnection], Awaitable[None]]) -> AsyncIterator[str]:
    async def handler(ws: ServerConnection) -> None:
        start = json.loads(await ws.recv())
        await ws.send(json.dumps({"type": "started", "call_id": "s-1", "encoding": start["encoding"],
                                  "sample_rate": start["sample_rate"]}))
        await script(ws)

    async with serve(handler, "127.0.0.1", 0, compression=None, ping_interval=None) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/ws"


async def test_a_connection_that_vanishes_mid_stream_fails_the_call_and_keeps_the_recording() -> None:
    async def script(ws: ServerConnection) -> None:
        for i in range(5):
            await ws.send(bytes([i]) * 640)
        await SimClock().sleep(0.2)
        ws.transport.abort()

    async with scripted(script) as url:
        result = await run(ClientOptions(url=url, audio=tone(2.0)), SimClock())
    assert not result.ok and "1006" in (result.failure or "")
    assert bytes(result.recording) == b"".join(bytes([i]) * 640 for i in range(5))


async def test_a_fatal_error_mid_stream_fails_the_call() -> None:
    async def script(ws: ServerConnection) -> None:
        await ws.send(json.dumps({"type": "error", "code": "too_many_faults", "message": "x", "fatal": True}))
        await ws.send(json.dumps({"type": "stop", "reason": "error"}))
        await ws.close(1008)

    async with scripted(script) as url:
        result = await run(ClientOptions(url=url, audio=tone(1.0)), SimClock())
    assert not result.ok and "too_many_faults" in (result.failure or "")


async def test_a_mark_is_echoed_once_the_audio_before_it_has_played() -> None:
    clock = SimClock()
    echoed: list[float] = []

    async def script(ws: ServerConnection) -> None:
        for i in range(10):  # 200 ms of audio at once
            await ws.send(bytes([i]) * 640)
        await ws.send(json.dumps({"type": "mark", "id": "end"}))
        sent_at = clock.now()
        async for m in ws:
            if isinstance(m, str) and json.loads(m).get("type") == "mark":
                echoed.append(clock.now() - sent_at)
                await ws.close()

    async with scripted(script) as url:
        result = await run(ClientOptions(url=url, audio=tone(1.0)), clock)
    assert result.marks_echoed == ["end"]
    assert 0.18 <= echoed[0] <= 0.25


async def test_a_clear_drops_the_audio_that_has_not_played_from_the_recording() -> None:
    clock = SimClock()

    async def script(ws: ServerConnection) -> None:
        for i in range(50):  # one second of audio at once, then a mark and a clear 100 ms later
            await ws.send(bytes([i]) * 640)
        await ws.send(json.dumps({"type": "mark", "id": "cut"}))
        await clock.sleep(0.1)
        await ws.send(json.dumps({"type": "clear", "epoch": 1}))
        await clock.sleep(0.5)
        await ws.close()

    async with scripted(script) as url:
        result = await run(ClientOptions(url=url, audio=tone(2.0)), clock)
    assert result.clears == 1 and result.marks_echoed == [] and result.marks_dropped == 1
    assert abs(len(result.recording) - 0.1 * 16000 * 2) <= 640  # only the 100 ms that played


def test_the_token_comes_from_the_option_or_brisvox_token_and_never_shows_in_the_options(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    wav = _wav(tmp_path, tone(0.1))
    base = ["ws://127.0.0.1:9/ws", "--input", wav, "--output", str(tmp_path / "o.wav")]
    monkeypatch.delenv("BRISVOX_TOKEN", raising=False)
    assert _options(_parser().parse_args(base)).token is None
    opts = _options(_parser().parse_args([*base, "--token", "tok-from-option"]))
    assert opts.token == "tok-from-option" and "tok-from-option" not in repr(opts)
    monkeypatch.setenv("BRISVOX_TOKEN", "tok-from-env")
    assert _options(_parser().parse_args(base)).token == "tok-from-env"
