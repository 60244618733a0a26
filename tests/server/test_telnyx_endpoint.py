"""The Telnyx route of the server: the upgrade token, the access exemption, the settings."""

from __future__ import annotations

import asyncio
import io
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

from brisvox.core.clock import SystemClock
from brisvox.core.errors import ConfigError
from brisvox.core.secret import Secret
from brisvox.server.auth import AuthMode
from brisvox.server.host import ServerParts, serve
from brisvox.server.lifecycle import StopRequests
from brisvox.server.settings import Settings
from brisvox.server.telnyx_endpoint import TelnyxEndpoint, check_token
from brisvox.transport.echo import EchoOptions
from brisvox.transport.telephony import UpgradeRefusal
from brisvox.transport.telnyx import AUTH_HEADER, TelnyxConfig
from brisvox.transport.websocket import ServerConfig
from tests.server._echo import echo_runner
from tests.transport.telnyx import sim

TOKEN = "stream-token-" + "x" * 20


@asynccontextmanager
async def telnyx_server(telnyx: TelnyxConfig, settings: Settings | None = None) -> AsyncIterator[tuple[int, TelnyxEndpoint]]:
    clock = SystemClock()
    endpoint = TelnyxEndpoint(clock, ServerConfig(), telnyx)
    parts = ServerParts(runner=echo_runner(clock, EchoOptions(mark_every=10)), call_endpoint=endpoint, description="echo",
                        on_stop_calls=endpoint.close, call_routes=((telnyx.path, endpoint),),
                        self_authenticating=frozenset({telnyx.path}) if endpoint.self_authenticating else frozenset())
    stops = StopRequests()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(serve(settings or Settings(port=0, max_calls=2), parts, clock=clock, stops=stops,
                                         out=io.StringIO(), on_ready=ready.set_result))
    try:
        yield await asyncio.wait_for(ready, 20), endpoint
    finally:
        stops.request("test stop")
        assert await asyncio.wait_for(server, 30) == 0


async def _stream(url: str, headers: dict[str, str], token: str | None = None,
                  call_control_id: str = sim.CALL_CONTROL_ID) -> int | None:
    """Start a stream and hang up; the close code the server answered with."""
    async with connect(url, additional_headers=headers, open_timeout=5, close_timeout=2) as ws:
        try:
            await ws.send(sim.connected(token))
            await ws.send(sim.start(call_control_id))
            await asyncio.sleep(0.1)
            await ws.send(sim.stop(3, call_control_id))
            async for _ in ws:
                pass
        except ConnectionClosed:
            pass  # the server refused the stream: its close code tells why
        return ws.protocol.close_rcvd.code if ws.protocol.close_rcvd else None


def test_the_upgrade_token_is_refused_when_wrong_and_proves_the_stream_when_right() -> None:
    config = TelnyxConfig(auth_token=Secret(TOKEN))
    refusal = check_token(config, {AUTH_HEADER: "nope"})
    assert isinstance(refusal, UpgradeRefusal) and refusal.status == 401 and TOKEN not in refusal.body()
    assert check_token(config, {AUTH_HEADER: TOKEN}) is True
    assert check_token(config, {}) is False  # deferred to connected
    assert check_token(TelnyxConfig(), {AUTH_HEADER: "anything"}) is False


@pytest.mark.realtime
async def test_with_bearer_auth_the_telnyx_route_needs_its_stream_token_but_no_brisvox_token() -> None:
    settings = Settings(port=0, auth=AuthMode.BEARER, auth_tokens=(Secret("t" * 32),))
    async with telnyx_server(TelnyxConfig(auth_token=Secret(TOKEN)), settings) as (port, endpoint):
        url = f"ws://127.0.0.1:{port}/telnyx"
        with pytest.raises(InvalidStatus) as refused:
            await _stream(url, {AUTH_HEADER: "wrong"})
        assert refused.value.response.status_code == 401
        assert await _stream(url, {}) == 1008  # no proof in connected either
        assert await _stream(url, {AUTH_HEADER: TOKEN}, call_control_id="v3:a") == 1000
        assert await _stream(url, {}, token=TOKEN, call_control_id="v3:b") == 1000
        assert await _stream(url, {AUTH_HEADER: TOKEN}, call_control_id="v3:b") == 1008  # one stream per call
        assert endpoint.stats.calls_started == 2 and endpoint.stats.refused_auth == 2
        assert endpoint.stats.duplicate_calls_refused == 1
    async with telnyx_server(TelnyxConfig(), settings) as (port, _):  # no stream token: no exemption
        with pytest.raises(InvalidStatus) as refused:
            await _stream(f"ws://127.0.0.1:{port}/telnyx", {})
        assert refused.value.response.status_code == 401


def test_telnyx_settings_are_read_and_checked() -> None:
    settings = Settings.from_env({"BRISVOX_TELNYX_PATH": "/tx", "BRISVOX_TELNYX_AUTH_TOKEN": TOKEN,
                                  "BRISVOX_TELNYX_CODEC": "pcma"})
    assert settings.telnyx_path == "/tx" and settings.telnyx_codec == "PCMA"
    assert settings.telnyx_auth_token is not None and settings.telnyx_auth_token.reveal() == TOKEN
    with pytest.raises(ConfigError, match="BRISVOX_TELNYX_CODEC"):
        Settings.from_env({"BRISVOX_TELNYX_CODEC": "OPUS"})
    with pytest.raises(ConfigError, match="BRISVOX_TELNYX_PATH must differ"):
        Settings.from_env({"BRISVOX_TELNYX_PATH": "/twilio"})
