"""The WebSocket transport mounted in the app: a real call through uvicorn with an echo session runner."""

from __future__ import annotations

import asyncio
import io
import math
import struct
import urllib.error
import urllib.request
from typing import Any

import pytest
from starlette.websockets import WebSocket

from brisvox.audio.wav import WavAudio
from brisvox.core.clock import SystemClock
from brisvox.server.host import ServerParts, serve
from brisvox.server.lifecycle import StopRequests
from brisvox.server.session import SessionSlot
from brisvox.server.settings import Settings
from brisvox.server.ws_endpoint import TransportEndpoint, _server_transport
from brisvox.transport.websocket import ServerConfig
from brisvox.transport.websocket.client import ClientOptions, run
from tests.server._echo import echo_runner


def tone(seconds: float, rate: int = 16000) -> bytes:
    n = int(seconds * rate)
    return b"".join(struct.pack("<h", int(8000 * math.sin(2 * math.pi * 440 * i / rate))) for i in range(n))


def get(url: str) -> str:
    with urllib.request.urlopen(url, timeout=5) as r:
        return str(r.read().decode())


class Probe(TransportEndpoint):
    """Records the asyncio transport abort() would reach under the real uvicorn stack."""

    transport: object = None

    async def __call__(self, websocket: WebSocket, slot: SessionSlot[Any], /) -> None:
        self.transport = _server_transport(getattr(websocket, "_send", None))
        await super().__call__(websocket, slot)


@pytest.mark.realtime
async def test_a_websocket_call_runs_through_the_session_manager_and_the_server_drains_after_it() -> None:
    clock = SystemClock()
    endpoint = Probe(clock, ServerConfig(path="/ws"))
    parts = ServerParts(runner=echo_runner(clock), call_endpoint=endpoint, description="echo",
                        on_stop_calls=endpoint.close)
    stops = StopRequests()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    out = io.StringIO()
    server = asyncio.ensure_future(serve(Settings(port=0, max_calls=2), parts, clock=clock, stops=stops,
                                         out=out, on_ready=ready.set_result))
    try:
        port = await asyncio.wait_for(ready, 20)
        base = f"http://127.0.0.1:{port}"
        audio = WavAudio(tone(0.6), 16000)
        result = await run(ClientOptions(url=f"ws://127.0.0.1:{port}/ws", audio=audio, realtime=False,
                                         linger=0.5), clock)
        assert result.ok, result.failure
        assert result.call_id is not None and len(result.recording) > len(audio.pcm) // 2
        loop = asyncio.get_running_loop()
        for _ in range(100):
            metrics = await loop.run_in_executor(None, get, f"{base}/metrics")
            if 'brisvox_calls_ended_total{outcome="ok"} 1.0' in metrics:
                break
            await clock.sleep(0.05)
        assert 'brisvox_calls_ended_total{outcome="ok"} 1.0' in metrics
        assert "brisvox_active_calls 0.0" in metrics
        assert callable(getattr(endpoint.transport, "abort", None))  # abort() can reach uvicorn's socket
    finally:
        stops.request("test stop")
        code = await asyncio.wait_for(server, 30)
    assert code == 0
    assert "stopped (drained, exit status 0)" in out.getvalue()


@pytest.mark.realtime
async def test_a_call_still_running_after_the_drain_timeout_is_cancelled_and_the_exit_status_is_3() -> None:
    clock = SystemClock()
    endpoint = TransportEndpoint(clock, ServerConfig(path="/ws"))
    parts = ServerParts(runner=echo_runner(clock), call_endpoint=endpoint, description="echo",
                        on_stop_calls=endpoint.close)
    stops = StopRequests()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    out = io.StringIO()
    settings = Settings(port=0, max_calls=1, drain_timeout=0.3, cancel_timeout=3.0)
    server = asyncio.ensure_future(serve(settings, parts, clock=clock, stops=stops, out=out,
                                         on_ready=ready.set_result))
    try:
        port = await asyncio.wait_for(ready, 20)
        base = f"http://127.0.0.1:{port}"
        client = asyncio.ensure_future(run(ClientOptions(url=f"ws://127.0.0.1:{port}/ws",
                                                         audio=WavAudio(tone(10.0), 16000), linger=0.2), clock))
        loop = asyncio.get_running_loop()
        for _ in range(200):
            ready_body = await loop.run_in_executor(None, lambda: _status(f"{base}/readyz"))
            if '"active":1' in ready_body:
                break
            await clock.sleep(0.05)
        assert '"active":1' in ready_body and ready_body.startswith("503")  # full at max_calls=1
        stops.request("test stop")
        result = await asyncio.wait_for(client, 20)
    finally:
        stops.request("test stop")
        code = await asyncio.wait_for(server, 30)
    assert code == 3
    assert "stopped (cancelled, exit status 3)" in out.getvalue()
    assert result.call_id is not None
    assert (result.stop_reason, result.close_code) == ("shutdown", 1001), result


def _status(url: str) -> str:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return f"{r.status} {r.read().decode()}"
    except urllib.error.HTTPError as exc:
        return f"{exc.code} {exc.read().decode()}"


def test_abort_reaches_the_transport_behind_wrapped_asgi_sends() -> None:
    class Transport:
        aborted = False

        def abort(self) -> None:
            self.aborted = True

    class Protocol:
        def __init__(self) -> None:
            self.transport = Transport()

        async def send(self, message: object) -> None:
            return None

    protocol = Protocol()
    inner = protocol.send

    async def sender(message: object) -> None:  # what a middleware does to send
        await inner(message)

    assert _server_transport(protocol.send) is protocol.transport
    assert _server_transport(sender) is protocol.transport
    assert _server_transport(lambda m: None) is None
