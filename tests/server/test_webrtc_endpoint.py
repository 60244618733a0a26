"""WHIP signaling on the server's port, with an aiortc client peer playing the browser
(real sockets on 127.0.0.1, real time) and the transport's echo engine."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
from collections.abc import Callable

import httpx
import pytest

from brisvox.core.clock import SystemClock, bounded
from brisvox.core.secret import Secret
from brisvox.server.auth import AuthMode
from brisvox.server.settings import Settings
from brisvox.server.webrtc_endpoint import TurnConfig, WhipConfig
from brisvox.transport.webrtc import WebRtcConfig, peer
from tests.server._webrtc import whip_server
from tests.transport.webrtc._client import BrowserPeer, rms, tone

pytestmark = pytest.mark.realtime

TOKEN = "t" * 32
SDP = {"Content-Type": "application/sdp"}
CRLF = "\r\n"



async def test_an_offer_gets_an_answer_and_the_call_reaches_the_engine_and_delete_hangs_up() -> None:
    clock = SystemClock()
    async with whip_server() as (base, endpoint), httpx.AsyncClient(timeout=10) as http:
        browser = BrowserPeer(clock)
        try:
            answered = await http.post(f"{base}/whip", content=await browser.offer(), headers=SDP)
            assert answered.status_code == 201, answered.text
            assert answered.headers["content-type"].startswith("application/sdp")
            location = answered.headers["location"]
            assert location.startswith("/whip/")
            await browser.accept(answered.text)
            browser.mic.play(tone(48000, 1.5))
            end = clock.now() + 5
            while clock.now() < end and rms(browser.heard_pcm()[-9600:]) < 500:
                await clock.sleep(0.1)
            assert rms(browser.heard_pcm()[-9600:]) > 500, "the echo engine's audio came back"
            assert endpoint.stats.calls_started == 1
            assert (await http.delete(f"{base}{location}")).status_code == 200
            await bounded(clock, 5, _until(lambda: endpoint.pending_calls == 0), "call end")
            assert endpoint.stats.closes == {"hangup": 1}
            assert (await http.delete(f"{base}{location}")).status_code == 404
        finally:
            await browser.close()


async def refused(http: httpx.AsyncClient, base: str, token: str | None = None) -> dict[str, float]:
    """``brisvox_signaling_refused_total`` by reason, from the server's /metrics."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    text = (await http.get(f"{base}/metrics", headers=headers)).text
    prefix = 'brisvox_signaling_refused_total{reason="'
    return {line[len(prefix):].split('"', 1)[0]: float(line.rsplit(" ", 1)[1])
            for line in text.splitlines() if line.startswith(prefix)}


async def _until(cond: Callable[[], bool]) -> None:
    clock = SystemClock()
    while not cond():
        await clock.sleep(0.02)


async def test_an_offer_that_never_connects_is_abandoned_without_a_session() -> None:
    clock = SystemClock()
    config = WhipConfig(webrtc=WebRtcConfig(connect_timeout=0.5))
    async with whip_server(config) as (base, endpoint), httpx.AsyncClient(timeout=10) as http:
        browser = BrowserPeer(clock)
        try:
            answered = await http.post(f"{base}/whip", content=await browser.offer(), headers=SDP)
            assert answered.status_code == 201
            await bounded(clock, 5, _until(lambda: endpoint.pending_calls == 0), "abandon")
            assert endpoint.stats.abandoned == 1 and endpoint.stats.calls_started == 0
            assert await refused(http, base) == {"connect_timeout": 1}
            ready = (await http.get(f"{base}/readyz")).json()
            assert ready["active"] == 0 and ready["reserved"] == 0, "the slot was given back"
        finally:
            await browser.close()


async def _slow_offer(base: str) -> str:
    """POST an offer whose body never finishes arriving; the status line's code and the body's reason."""
    host, port = base.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(f"POST /whip HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/sdp\r\n"
                     "Content-Length: 1000\r\n\r\nv=0\r\n".encode())
        await writer.drain()
        answer = (await asyncio.wait_for(reader.read(4096), 10)).decode()
    finally:
        writer.close()
    status = answer.split(" ", 2)[1]
    return f"{status} {answer.split(CRLF * 2, 1)[1].split(':')[0]}"


async def test_signaling_refusals_name_what_was_wrong() -> None:
    async with whip_server(WhipConfig(max_body=4096, offer_burst=20, body_timeout=0.3)) as (base, _), \
            httpx.AsyncClient(timeout=10) as http:
        offer = await BrowserPeer(SystemClock()).offer()
        wrong_type = await http.post(f"{base}/whip", content=offer, headers={"Content-Type": "text/plain"})
        assert (wrong_type.status_code, wrong_type.text.split(":")[0]) == (415, "unsupported_media_type")
        big = await http.post(f"{base}/whip", content="v=0\r\n" + "a=x\r\n" * 2000, headers=SDP)
        assert (big.status_code, big.text.split(":")[0]) == (413, "offer_too_large")
        video = offer.replace("m=audio", "m=video")
        assert (await http.post(f"{base}/whip", content=video, headers=SDP)).status_code == 400
        preflight = await http.options(f"{base}/whip", headers={"Origin": "https://evil.example"})
        assert preflight.status_code == 403
        own = await http.options(f"{base}/whip", headers={"Origin": base, "Access-Control-Request-Method": "POST"})
        assert own.status_code == 204 and own.headers["access-control-allow-origin"] == base
        assert "Location" in own.headers["access-control-expose-headers"]
        cross = await http.post(f"{base}/whip", content=offer, headers={**SDP, "Origin": "https://evil.example"})
        assert cross.status_code == 403
        padded = await http.post(f"{base}/whip", content=offer, headers={**SDP, "X-Pad": "p" * 9000})
        assert (padded.status_code, padded.text.split(":")[0]) == (431, "headers_too_large")
        assert await _slow_offer(base) == "408 body_timeout"
        # counted by reason: the preflight's refusal (the endpoint's) and the POST's (the access checks')
        assert await refused(http, base) == {"unsupported_media_type": 1, "offer_too_large": 1, "bad_offer": 1,
                                             "origin_not_allowed": 2, "headers_too_large": 1, "body_timeout": 1}


async def test_offers_are_rate_limited_and_capped_per_address() -> None:
    async with whip_server(WhipConfig(offer_burst=2, offers_per_second=0.1)) as (base, _), \
            httpx.AsyncClient(timeout=10) as http:
        statuses = [(await http.post(f"{base}/whip", content="v=0\r\n", headers=SDP)).status_code for _ in range(3)]
        assert statuses == [400, 400, 429]
        assert await refused(http, base) == {"bad_offer": 2, "offer_rate": 1}
    config = WhipConfig(calls_per_address=1, webrtc=WebRtcConfig(connect_timeout=3))
    async with whip_server(config) as (base, _), httpx.AsyncClient(timeout=10) as http:
        first, second = BrowserPeer(SystemClock()), BrowserPeer(SystemClock())
        try:
            assert (await http.post(f"{base}/whip", content=await first.offer(), headers=SDP)).status_code == 201
            capped = await http.post(f"{base}/whip", content=await second.offer(), headers=SDP)
            assert (capped.status_code, capped.text.split(":")[0]) == (429, "address_calls")
            assert await refused(http, base) == {"address_calls": 1}
        finally:
            await first.close()
            await second.close()


async def test_bearer_auth_guards_the_offer_but_not_the_preflight() -> None:
    settings = Settings(port=0, auth=AuthMode.BEARER, auth_tokens=(Secret(TOKEN),))
    async with whip_server(settings=settings) as (base, _), httpx.AsyncClient(timeout=10) as http:
        assert (await http.post(f"{base}/whip", content="v=0\r\n", headers=SDP)).status_code == 401
        assert (await http.get(f"{base}/whip/ice")).status_code == 401
        authed = await http.post(f"{base}/whip", content="v=0\r\n", headers={**SDP, "Authorization": f"Bearer {TOKEN}"})
        assert authed.status_code == 400, "past the guard: the offer itself is refused"
        preflight = await http.options(f"{base}/whip", headers={"Origin": base})
        assert preflight.status_code == 204
        assert await refused(http, base, TOKEN) == {"missing_token": 2, "bad_offer": 1}


async def test_turn_credentials_come_as_link_headers_and_from_the_ice_endpoint() -> None:
    secret = "s3cret-s3cret"
    turn = TurnConfig(urls=("turn:127.0.0.1:3478?transport=udp", "turn:127.0.0.1:3478?transport=tcp"),
                      secret=Secret(secret), ttl=600)
    async with whip_server(WhipConfig(turn=turn)) as (base, _), httpx.AsyncClient(timeout=10) as http:
        ice = await http.get(f"{base}/whip/ice")
        assert ice.headers["cache-control"] == "no-store"
        (server,) = ice.json()["iceServers"]
        assert server["urls"] == list(turn.urls)
        expiry, _, user = server["username"].partition(":")
        assert user == "page" and int(expiry) > SystemClock().wall().timestamp() + 590
        expected = base64.b64encode(hmac.new(secret.encode(), server["username"].encode(), hashlib.sha1).digest())
        assert server["credential"] == expected.decode()
        browser = BrowserPeer(SystemClock())
        try:
            answered = await http.post(f"{base}/whip", content=await browser.offer(), headers=SDP)
            links = answered.headers.get_list("link")
            assert len(links) == 2 and all('rel="ice-server"' in v and 'credential-type="password"' in v for v in links)
            assert links[0].startswith("<turn:127.0.0.1:3478?transport=udp>")
        finally:
            await browser.close()


async def test_a_full_server_answers_503_and_counts_the_refusal() -> None:
    config = WhipConfig(webrtc=WebRtcConfig(connect_timeout=3))
    async with whip_server(config, Settings(port=0, max_calls=1)) as (base, _), \
            httpx.AsyncClient(timeout=10) as http:
        first, second = BrowserPeer(SystemClock()), BrowserPeer(SystemClock())
        try:
            assert (await http.post(f"{base}/whip", content=await first.offer(), headers=SDP)).status_code == 201
            full = await http.post(f"{base}/whip", content=await second.offer(), headers=SDP)
            assert full.status_code == 503 and full.headers["retry-after"]
            metrics = (await http.get(f"{base}/metrics")).text
            assert 'brisvox_admissions_refused_total{reason="at_capacity"} 1.0' in metrics
            assert await refused(http, base) == {"at_capacity": 1}
        finally:
            await first.close()
            await second.close()


async def test_a_drain_abandons_offers_that_have_not_connected_instead_of_waiting_for_them() -> None:
    clock = SystemClock()
    config = WhipConfig(webrtc=WebRtcConfig(connect_timeout=60))
    browser = BrowserPeer(clock)
    try:
        async with whip_server(config) as (base, endpoint), httpx.AsyncClient(timeout=10) as http:
            assert (await http.post(f"{base}/whip", content=await browser.offer(), headers=SDP)).status_code == 201
            stopping = clock.now()
        assert clock.now() - stopping < 10, "the stop did not wait for the 60 s connect deadline"
        assert endpoint.stats.closes == {"shutdown": 1} and endpoint.stats.calls_started == 0
    finally:
        await browser.close()


async def test_a_call_whose_opus_encoder_fails_ends_and_is_counted(monkeypatch: pytest.MonkeyPatch) -> None:
    class Broken:
        def encode(self, pcm: bytes) -> bytes:
            raise ValueError("libopus is gone")

    monkeypatch.setattr(peer, "OpusEncoder", Broken)
    clock = SystemClock()
    async with whip_server() as (base, endpoint), httpx.AsyncClient(timeout=10) as http:
        browser = BrowserPeer(clock)
        try:
            answered = await http.post(f"{base}/whip", content=await browser.offer(), headers=SDP)
            assert answered.status_code == 201
            await browser.accept(answered.text)
            await bounded(clock, 5, _until(lambda: endpoint.pending_calls == 0), "call end")
            assert endpoint.stats.encoder_failures == 1 and endpoint.stats.closes == {"encoder": 1}
            metrics = (await http.get(f"{base}/metrics")).text
            assert 'brisvox_engine_failures_total{fatal="true",stage="webrtc_encoder"} 1.0' in metrics
        finally:
            await browser.close()
