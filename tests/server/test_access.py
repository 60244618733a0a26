"""The access checks in the app: Host, Origin and tokens before routing and admission."""

from __future__ import annotations

import asyncio
import dataclasses
import io
import logging
import urllib.error
import urllib.request
from collections.abc import Iterator, MutableMapping
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocket
from websockets.asyncio.client import connect
from websockets.typing import Origin, Subprotocol

from brisvox.audio.wav import WavAudio
from brisvox.core.clock import SimClock, SystemClock
from brisvox.core.secret import Secret
from brisvox.server.access import AccessPolicy, exposure_problem, exposure_warnings
from brisvox.server.app import build_app
from brisvox.server.auth import AuthMode, issue_call_token
from brisvox.server.host import ServerParts, serve
from brisvox.server.lifecycle import StopRequests
from brisvox.server.metrics import ServerMetrics
from brisvox.server.session import SessionCancel, SessionManager, SessionSlot
from brisvox.server.settings import Settings
from brisvox.server.ws_endpoint import TransportEndpoint, _server_transport
from brisvox.transport.websocket import ServerConfig
from brisvox.transport.websocket.client import ClientOptions, run
from tests.server._echo import echo_runner

KEY = "s" * 40
STATIC = "static-token-0123456789"
NOW = 1_800_000_000.0
LOCAL = {"host": "127.0.0.1:8765"}  # TestClient writes into the headers it is given: pass copies


class Server:
    """The app over an endpoint that records what reached it and closes each call at once."""

    def __init__(self, settings: Settings, *, agent: str | None = "lokanta",
                 query_token: frozenset[str] = frozenset()) -> None:
        self.metrics = ServerMetrics()
        self.entered: list[MutableMapping[str, Any]] = []

        async def runner(item: object, cancel: SessionCancel) -> None:
            return None

        self.manager: SessionManager[object] = SessionManager(runner, max_sessions=4, clock=SimClock())

        async def endpoint(websocket: WebSocket, slot: SessionSlot[object]) -> None:
            self.entered.append(websocket.scope)
            await websocket.accept()
            await websocket.close(code=1000)

        async def agent_json(request: Any) -> Response:
            return JSONResponse({"agent": "lokanta"})

        policy = dataclasses.replace(AccessPolicy.from_settings(settings, agent=agent, wall=lambda: NOW),
                                     query_token=query_token)
        self.app = build_app(self.manager, self.metrics, call_endpoint=endpoint, access=policy,
                             extra_routes=[Route("/agent.json", agent_json)])

    def refused(self, reason: str) -> float:
        for line in self.metrics.render().decode().splitlines():
            if line.startswith(f'brisvox_auth_refused_total{{reason="{reason}"}}'):
                return float(line.rsplit(" ", 1)[1])
        raise AssertionError(reason)


@pytest.fixture
def local() -> Iterator[tuple[Server, TestClient]]:
    server = Server(Settings())
    with TestClient(server.app, base_url="http://127.0.0.1:8765") as tc:
        yield server, tc


def call(tc: TestClient, **kwargs: Any) -> int:
    """Open a call; the status of the denial, or 101 when it was upgraded."""
    try:
        with tc.websocket_connect("/ws", **kwargs):
            return 101
    except WebSocketDenialResponse as denial:
        return denial.status_code


def test_a_cross_origin_page_cannot_start_a_call(local: tuple[Server, TestClient],
                                                  caplog: pytest.LogCaptureFixture) -> None:
    server, tc = local
    with pytest.raises(WebSocketDenialResponse) as denied, \
            tc.websocket_connect("/ws", headers={**LOCAL, "origin": "https://evil.example"}):
        pass
    assert denied.value.status_code == 403
    assert denied.value.content.decode().startswith("origin_not_allowed: Origin 'https://evil.example'")
    assert server.entered == [] and server.refused("origin_not_allowed") == 1
    assert (server.manager.active, server.manager.reserved) == (0, 0)  # refused before admission
    assert [r.levelno for r in caplog.records if "origin_not_allowed" in r.getMessage()] == [logging.WARNING]


def test_the_servers_own_page_and_a_non_browser_client_start_calls_on_loopback_without_a_token(
        local: tuple[Server, TestClient]) -> None:
    server, tc = local
    assert call(tc, headers={**LOCAL, "origin": "http://127.0.0.1:8765"}) == 101
    assert call(tc, headers={**LOCAL}) == 101
    assert len(server.entered) == 2


def test_an_allowed_origin_may_start_a_call() -> None:
    server = Server(Settings(allowed_origins=frozenset({"https://app.example.com"})))
    with TestClient(server.app) as tc:
        assert call(tc, headers={**LOCAL, "origin": "https://app.example.com"}) == 101


@pytest.mark.parametrize("path", ["/metrics", "/agent.json", "/", "/ws"])
def test_a_foreign_host_is_refused(local: tuple[Server, TestClient], path: str) -> None:
    server, tc = local
    rebound = {"host": "rebind.attacker.example:8765"}
    if path == "/ws":
        assert call(tc, headers=rebound) == 403
    else:
        r = tc.get(path, headers=rebound)
        assert r.status_code == 403 and r.text.startswith("host_not_allowed: Host 'rebind.attacker.example:8765'")
        assert "brisvox_" not in r.text and "lokanta" not in r.text
    assert server.refused("host_not_allowed") == 1


def test_health_and_readiness_are_open_to_any_host_and_without_a_token() -> None:
    server = Server(Settings(auth=AuthMode.BEARER, auth_tokens=(Secret(STATIC),)))
    with TestClient(server.app) as tc:
        for path in ("/healthz", "/readyz"):
            assert tc.get(path, headers={"host": "10.1.2.3:8765"}).status_code == 200


def test_metrics_and_agent_json_need_a_token_when_the_server_requires_one() -> None:
    server = Server(Settings(auth=AuthMode.BEARER, auth_tokens=(Secret(STATIC),)))
    with TestClient(server.app) as tc:
        for path in ("/metrics", "/agent.json"):
            r = tc.get(path, headers={**LOCAL})
            assert r.status_code == 401 and r.headers["www-authenticate"].startswith("Bearer")
            assert r.text.startswith("missing_token: ")
            assert tc.get(path, headers={**LOCAL, "authorization": f"Bearer {STATIC}"}).status_code == 200
        assert tc.get("/", headers={**LOCAL}).status_code == 404  # other paths: the Host check only


def test_the_calls_data_and_control_under_api_need_a_token_when_the_server_requires_one() -> None:
    server = Server(Settings(auth=AuthMode.BEARER, auth_tokens=(Secret(STATIC),)))
    with TestClient(server.app) as tc:
        assert tc.get("/api/calls", headers={**LOCAL}).status_code == 401
        assert tc.post("/api/calls/ws-1/hangup", headers={**LOCAL}).status_code == 401
        # past the check, the app answers (no such route in this app: 404, not the data)
        assert tc.get("/api/calls", headers={**LOCAL, "authorization": f"Bearer {STATIC}"}).status_code == 404


def test_a_static_bearer_token_starts_a_call_and_never_reaches_the_endpoint(caplog: pytest.LogCaptureFixture) -> None:
    server = Server(Settings(auth=AuthMode.BEARER, auth_tokens=(Secret(STATIC),)))
    caplog.set_level(logging.DEBUG)
    with TestClient(server.app) as tc:
        assert call(tc, headers={**LOCAL}) == 401
        assert call(tc, headers={**LOCAL, "authorization": "Bearer not-the-token-00000"}) == 401
        assert call(tc, headers={**LOCAL, "authorization": f"Bearer {STATIC}"}) == 101
    assert server.refused("missing_token") == 1 and server.refused("invalid_token") == 1
    (scope,) = server.entered
    assert all(name != b"authorization" for name, _ in scope["headers"])
    assert "not-the-token" not in caplog.text and STATIC not in caplog.text


def signed_server() -> Server:
    return Server(Settings(auth=AuthMode.SIGNED, auth_secret=Secret(KEY)), agent="lokanta")


@pytest.mark.parametrize(("token", "status", "reason"), [
    (issue_call_token(KEY, now=NOW - 3600, ttl=600, agent="lokanta"), 401, "expired_token"),
    (issue_call_token(KEY, now=NOW, agent="lokanta")[:-3] + "AAA", 401, "invalid_token"),
    (issue_call_token("t" * 40, now=NOW, agent="lokanta"), 401, "invalid_token"),
    (issue_call_token(KEY, now=NOW, agent="another-agent"), 403, "wrong_agent"),
    ("not.a-token", 401, "malformed_token"),
])
def test_an_expired_tampered_or_wrong_agent_call_token_is_refused(token: str, status: int, reason: str) -> None:
    server = signed_server()
    with TestClient(server.app) as tc:
        assert call(tc, headers={**LOCAL, "authorization": f"Bearer {token}"}) == status
        assert call(tc, headers={**LOCAL}, subprotocols=["brisvox", f"brisvox.token.{token}"]) == status
    assert server.refused(reason) == 2 and server.entered == []


def test_a_browser_passes_a_call_token_as_a_subprotocol_and_the_server_answers_brisvox() -> None:
    server = signed_server()
    token = issue_call_token(KEY, now=NOW - 30, ttl=600, agent="lokanta")
    with TestClient(server.app) as tc, tc.websocket_connect(
            "/ws", headers={**LOCAL, "origin": "http://127.0.0.1:8765"},
            subprotocols=["brisvox", f"brisvox.token.{token}"]) as ws:
        assert ws.accepted_subprotocol == "brisvox"
    (scope,) = server.entered
    assert scope["subprotocols"] == ["brisvox"]  # the token is not passed on


def test_a_token_in_the_query_opens_a_call_only_on_a_query_token_path_and_never_reaches_the_endpoint() -> None:
    token = issue_call_token(KEY, now=NOW - 30, ttl=600, agent="lokanta")
    plain = Server(Settings(auth=AuthMode.SIGNED, auth_secret=Secret(KEY)))
    with TestClient(plain.app) as tc:  # /ws reads no query: a URL ends up in proxies' logs
        assert call(tc, headers={**LOCAL}) == 401
    rtvi = Server(Settings(auth=AuthMode.SIGNED, auth_secret=Secret(KEY)), query_token=frozenset({"/ws"}))
    with TestClient(rtvi.app) as tc:
        with tc.websocket_connect(f"/ws?x=1&token={token}", headers={**LOCAL}):
            pass
        try:
            with tc.websocket_connect("/ws?token=", headers={**LOCAL}):
                raise AssertionError("an empty token opened a call")
        except WebSocketDenialResponse as denial:
            assert denial.status_code == 401
    (scope,) = rtvi.entered
    assert scope["query_string"] == b"x=1"  # the token is not passed on
    assert rtvi.refused("malformed_token") == 1


def test_no_auth_on_an_address_that_is_not_loopback_refuses_to_start_without_insecure() -> None:
    exposed = Settings(host="0.0.0.0")
    problem = exposure_problem(exposed, insecure=False)
    assert problem is not None and "BRISVOX_AUTH=none" in problem and "--insecure" in problem
    assert exposure_problem(exposed, insecure=True) is None
    assert any("--insecure" in w for w in exposure_warnings(exposed, insecure=True))
    assert exposure_problem(Settings(host="127.0.0.1"), insecure=False) is None
    assert exposure_problem(Settings(host="::1"), insecure=False) is None
    assert exposure_problem(Settings(host="10.0.0.5", auth=AuthMode.BEARER, auth_tokens=(Secret(STATIC),)),
                            insecure=False) is None


def test_a_wildcard_listener_answers_loopback_names_until_allowed_hosts_are_set() -> None:
    wide = Settings(host="0.0.0.0", auth=AuthMode.BEARER, auth_tokens=(Secret(STATIC),))
    assert wide.host_names == frozenset({"localhost", "127.0.0.1", "::1"})
    assert any("BRISVOX_ALLOWED_HOSTS" in w for w in exposure_warnings(wide, insecure=False))
    assert Settings(host="10.0.0.5").host_names == frozenset({"localhost", "127.0.0.1", "::1", "10.0.0.5"})
    named = Settings(host="0.0.0.0", allowed_hosts=frozenset({"voice.example.com"}))
    assert named.host_names == frozenset({"voice.example.com"}) and not exposure_warnings(named, insecure=False)


def test_without_an_access_policy_the_app_checks_nothing() -> None:
    async def runner(item: object, cancel: SessionCancel) -> None:
        return None

    async def endpoint(websocket: WebSocket, slot: SessionSlot[object]) -> None:
        await websocket.close()

    m: SessionManager[object] = SessionManager(runner, max_sessions=1, clock=SimClock())
    with TestClient(build_app(m, ServerMetrics(), call_endpoint=endpoint)) as tc:
        assert tc.get("/metrics", headers={"host": "anything.example"}).status_code == 200



class Probe(TransportEndpoint):
    """Counts the calls whose socket abort() can reach through the guard's ``send`` wrapper."""

    transports = 0
    reached = 0

    async def __call__(self, websocket: WebSocket, slot: SessionSlot[Any], /) -> None:
        self.transports += 1
        if callable(getattr(_server_transport(getattr(websocket, "_send", None)), "abort", None)):
            self.reached += 1
        await super().__call__(websocket, slot)


def fetch(url: str, host: str) -> tuple[int, str]:
    request = urllib.request.Request(url, headers={"Host": host})
    try:
        with urllib.request.urlopen(request, timeout=5) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode()


@pytest.mark.realtime
async def test_under_uvicorn_tokens_pass_as_bearer_or_subprotocol_and_refusals_come_before_the_upgrade() -> None:
    clock = SystemClock()
    endpoint = Probe(clock, ServerConfig(path="/ws"))
    parts = ServerParts(runner=echo_runner(clock), call_endpoint=endpoint, description="echo",
                        on_stop_calls=endpoint.close, agent="lokanta")
    settings = Settings(port=0, auth=AuthMode.SIGNED, auth_secret=Secret(KEY), auth_tokens=(Secret(STATIC),))
    stops = StopRequests()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(serve(settings, parts, clock=clock, stops=stops, out=io.StringIO(),
                                         on_ready=ready.set_result))
    try:
        port = await asyncio.wait_for(ready, 20)
        url = f"ws://127.0.0.1:{port}/ws"
        audio = WavAudio(b"\x00\x00" * 3200, 16000)
        wall = clock.wall().timestamp()
        refused = await run(ClientOptions(url=url, audio=audio, realtime=False, linger=0.1), clock)
        assert refused.failure is not None and "HTTP 401 (missing_token: this server needs a token" in refused.failure
        token = issue_call_token(KEY, now=wall, agent="lokanta")
        for credential in (token, STATIC):
            result = await run(ClientOptions(url=url, audio=audio, realtime=False, linger=0.1, token=credential), clock)
            assert result.ok, result.failure
        async with connect(url, subprotocols=[Subprotocol("brisvox"), Subprotocol(f"brisvox.token.{token}")],
                           origin=Origin(f"http://127.0.0.1:{port}")) as ws:
            assert ws.subprotocol == "brisvox"
            for _ in range(100):
                if endpoint.transports == 3:
                    break
                await clock.sleep(0.02)
        assert endpoint.transports == 3 and endpoint.reached == 3  # abort() reaches the socket behind the guard
        loop = asyncio.get_running_loop()
        status, body = await loop.run_in_executor(None, fetch, f"http://127.0.0.1:{port}/metrics", "evil.example")
        assert (status, body.split(":")[0]) == (403, "host_not_allowed")
        status, body = await loop.run_in_executor(None, fetch, f"http://127.0.0.1:{port}/healthz", "evil.example")
        assert status == 200
    finally:
        stops.request("test stop")
        await asyncio.wait_for(server, 30)


def test_the_policy_describes_itself_for_the_start_up_log_without_credentials() -> None:
    settings = Settings(auth=AuthMode.BEARER, auth_tokens=(Secret(STATIC),),
                        allowed_origins=frozenset({"https://app.example.com"}))
    text = AccessPolicy.from_settings(settings, agent="lokanta", wall=lambda: NOW).describe()
    assert text == ("auth bearer; hosts 127.0.0.1, ::1, localhost; origins: the server's own, "
                    "https://app.example.com; /agent.json, /metrics, /api/* need a token")
    assert STATIC not in text


def test_mounted_under_a_prefix_the_private_paths_still_need_a_token_and_the_probes_stay_open() -> None:
    server = Server(Settings(auth=AuthMode.BEARER, auth_tokens=(Secret(STATIC),)))
    outer = Starlette(routes=[Mount("/voice", app=server.app)])
    with TestClient(outer) as tc:
        assert tc.get("/voice/metrics", headers={**LOCAL}).status_code == 401
        assert tc.get("/voice/metrics", headers={**LOCAL, "authorization": f"Bearer {STATIC}"}).status_code == 200
        assert tc.get("/voice/healthz", headers={"host": "10.1.2.3"}).status_code == 200


def test_a_client_repeating_refused_requests_gets_one_log_line_not_one_per_refusal(
        local: tuple[Server, TestClient], caplog: pytest.LogCaptureFixture) -> None:
    server, tc = local
    for _ in range(50):
        assert tc.get("/metrics", headers={"host": "evil.example"}).status_code == 403
    assert server.refused("host_not_allowed") == 50  # every refusal still counted
    lines = [r for r in caplog.records if "host_not_allowed" in r.getMessage()]
    assert len(lines) == 1 and lines[0].levelno == logging.WARNING
