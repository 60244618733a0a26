"""The Twilio route of the server: admission, the signature check, the access exemption, and a
real Media Streams client (streamdouble) against an echo engine."""

from __future__ import annotations

import asyncio
import io
import json
import math
import shutil
import struct
import sys
import wave
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from twilio.request_validator import RequestValidator
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosedError, InvalidStatus

from brisvox.core.clock import SystemClock
from brisvox.core.secret import Secret
from brisvox.server.access import AccessGuard, AccessPolicy
from brisvox.server.auth import Authenticator, AuthMode, issue_call_token
from brisvox.server.host import ServerParts, serve
from brisvox.server.lifecycle import StopRequests
from brisvox.server.settings import Settings
from brisvox.server.twilio_endpoint import TwilioEndpoint, check_signature
from brisvox.server.webhooks import stream_token_check
from brisvox.transport.echo import EchoOptions
from brisvox.transport.twilio import TwilioConfig
from brisvox.transport.twilio.protocol import StreamStart
from brisvox.transport.websocket import ServerConfig
from tests.server._echo import echo_runner
from tests.transport.conformance._drivers import start_message

TOKEN = "f" * 32
PUBLIC = "wss://voice.example.com/twilio"


@asynccontextmanager
async def twilio_server(twilio: TwilioConfig, settings: Settings | None = None,
                        admit: Callable[[StreamStart], str | None] | None = None,
                        ) -> AsyncIterator[tuple[int, TwilioEndpoint]]:
    clock = SystemClock()
    endpoint = TwilioEndpoint(clock, ServerConfig(), twilio, admit=admit)
    parts = ServerParts(runner=echo_runner(clock, EchoOptions(mark_every=10)), call_endpoint=endpoint, description="echo",
                        on_stop_calls=endpoint.close, call_routes=((twilio.path, endpoint),),
                        self_authenticating=frozenset({twilio.path}) if endpoint.self_authenticating else frozenset())
    stops = StopRequests()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(serve(settings or Settings(port=0, max_calls=2), parts, clock=clock, stops=stops,
                                         out=io.StringIO(), on_ready=ready.set_result))
    try:
        yield await asyncio.wait_for(ready, 20), endpoint
    finally:
        stops.request("test stop")
        assert await asyncio.wait_for(server, 30) == 0


async def _stream(url: str, headers: dict[str, str], params: dict[str, str] | None = None) -> int | None:
    """Start a stream and hang up; the close code the server answered with."""
    async with connect(url, additional_headers=headers, open_timeout=5, close_timeout=2) as ws:
        await ws.send(json.dumps(start_message("MZ1", params)))
        await ws.send(json.dumps({"event": "stop", "streamSid": "MZ1", "stop": {}}))
        async for _ in ws:
            pass
        return ws.protocol.close_rcvd.code if ws.protocol.close_rcvd else None


@pytest.mark.realtime
async def test_the_signature_is_checked_on_the_upgrade_against_the_public_url() -> None:
    twilio = TwilioConfig(public_url=PUBLIC, auth_token=Secret(TOKEN))
    async with twilio_server(twilio) as (port, endpoint):
        url = f"ws://127.0.0.1:{port}/twilio"
        for headers in ({}, {"X-Twilio-Signature": "bm90IGl0"},
                        {"X-Twilio-Signature": RequestValidator(TOKEN).compute_signature(url, {})}):
            with pytest.raises(InvalidStatus) as refused:
                await _stream(url, headers)
            assert refused.value.response.status_code == 403
        assert endpoint.stats.refused_signature == 3
        good = RequestValidator(TOKEN).compute_signature(PUBLIC, {})
        assert await _stream(url, {"X-Twilio-Signature": good}) == 1000
        assert endpoint.stats.calls_started == 1


@pytest.mark.realtime
async def test_with_webhook_tokens_a_stream_needs_its_calls_token_in_its_parameters() -> None:
    key = "s" * 40
    twilio = TwilioConfig(public_url=PUBLIC, auth_token=Secret(TOKEN))
    admit = stream_token_check(Secret(key), "demo", lambda: SystemClock().wall().timestamp())
    good = {"X-Twilio-Signature": RequestValidator(TOKEN).compute_signature(PUBLIC, {})}
    token = issue_call_token(key, now=SystemClock().wall().timestamp(), agent="demo", subject="CA1")
    async with twilio_server(twilio, admit=admit) as (port, endpoint):
        url = f"ws://127.0.0.1:{port}/twilio"
        with pytest.raises(ConnectionClosedError) as closed:  # a replayed signature alone is not enough
            await _stream(url, good)
        assert closed.value.rcvd is not None and closed.value.rcvd.code == 1008
        assert await _stream(url, good, {"token": token, "agent": "demo"}) == 1000
        assert endpoint.stats.refused_start == 1 and endpoint.stats.calls_started == 1


def test_the_signed_url_carries_the_query_string() -> None:
    twilio = TwilioConfig(public_url=PUBLIC, auth_token=Secret(TOKEN))
    signed = RequestValidator(TOKEN).compute_signature(f"{PUBLIC}?agent=demo", {})
    assert check_signature(twilio, {"x-twilio-signature": signed}, "agent=demo") is None
    refusal = check_signature(twilio, {"x-twilio-signature": signed}, "agent=other")
    assert refusal is not None and refusal.reason == "bad_signature" and TOKEN not in refusal.body()
    assert check_signature(TwilioConfig(), {}, "") is None  # no token configured: no check


@pytest.mark.realtime
async def test_with_bearer_auth_the_twilio_route_needs_the_signature_but_no_brisvox_token() -> None:
    settings = Settings(port=0, auth=AuthMode.BEARER, auth_tokens=(Secret("t" * 32),))
    twilio = TwilioConfig(public_url=PUBLIC, auth_token=Secret(TOKEN))
    good = {"X-Twilio-Signature": RequestValidator(TOKEN).compute_signature(PUBLIC, {})}
    async with twilio_server(twilio, settings) as (port, _):
        assert await _stream(f"ws://127.0.0.1:{port}/twilio", good) == 1000
        with pytest.raises(InvalidStatus) as refused:  # the other call route still needs the token
            await _stream(f"ws://127.0.0.1:{port}/ws", good)
        assert refused.value.response.status_code == 401
    async with twilio_server(TwilioConfig(), settings) as (port, _):  # no Twilio token: no exemption
        with pytest.raises(InvalidStatus) as refused:
            await _stream(f"ws://127.0.0.1:{port}/twilio", good)
        assert refused.value.response.status_code == 401


async def test_the_guard_exempts_only_the_self_authenticating_websocket_path() -> None:
    seen: list[str] = []

    async def app(scope: Any, receive: Any, send: Any) -> None:
        seen.append(scope["path"])

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def receive() -> dict[str, Any]:
        return {"type": "websocket.connect"}

    policy = AccessPolicy(auth=Authenticator(AuthMode.BEARER, tokens=(Secret("t" * 32),)),
                          allowed_hosts=frozenset({"localhost"}), allowed_origins=frozenset(), wall=lambda: 0.0,
                          self_authenticating=frozenset({"/twilio"}))

    class Metrics:
        def record_auth_refusal(self, reason: str) -> None:
            sent.append({"refused": reason})

    guard = AccessGuard(app, policy, Metrics())
    for path, host in (("/twilio", "localhost"), ("/ws", "localhost"), ("/twilio", "evil.example")):
        scope = {"type": "websocket", "path": path, "headers": [(b"host", host.encode())], "subprotocols": []}
        await guard(scope, receive, send)
    assert seen == ["/twilio"]
    assert [m["refused"] for m in sent if "refused" in m] == ["missing_token", "host_not_allowed"]


def _speechlike_wav(path: Path, seconds: float = 2.0, rate: int = 8000) -> None:
    frames = b"".join(struct.pack("<h", int(6000 * math.sin(2 * math.pi * 300 * i / rate) *
                                            (0.5 + 0.5 * math.sin(2 * math.pi * 3 * i / rate))))
                      for i in range(int(seconds * rate)))
    with wave.open(str(path), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(frames)


@pytest.mark.realtime
async def test_streamdouble_hears_its_audio_back_and_echoes_the_marks(tmp_path: Path) -> None:
    exe = shutil.which("streamdouble", path=str(Path(sys.executable).parent)) or shutil.which("streamdouble")
    if exe is None:
        pytest.skip("streamdouble is not installed (the test extra)")
    _speechlike_wav(tmp_path / "in.wav")
    async with twilio_server(TwilioConfig()) as (port, endpoint):
        proc = await asyncio.create_subprocess_exec(
            exe, "call", f"ws://127.0.0.1:{port}/twilio", "--audio", str(tmp_path / "in.wav"), "--out",
            str(tmp_path / "reply.wav"), "--param", "agent=demo", "--quiet-period", "0.6", "--json",
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    report = json.loads(out)
    assert report["violations"] == [] and report["unknown_events"] == [], report
    assert report["media_frames_received"] >= 80, report  # ~2 s echoed in 20 ms pieces
    assert report["marks_received"] >= 5 and report["marks_echoed"] == report["marks_received"]
    with wave.open(str(tmp_path / "reply.wav")) as w:
        reply = w.readframes(w.getnframes())
    assert max(abs(v) for (v,) in struct.iter_unpack("<h", reply)) > 3000, "the reply is not silent"
    assert endpoint.stats.marks_echoed >= 5 and endpoint.stats.media_in >= 90
