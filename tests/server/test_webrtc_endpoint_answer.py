"""The WHIP endpoint's wait for its answer, on virtual time (in memory: httpx's ASGI transport)."""

from __future__ import annotations

import httpx
import pytest
from starlette.websockets import WebSocket

from brisvox.core.clock import SimClock
from brisvox.server.app import build_app
from brisvox.server.metrics import ServerMetrics
from brisvox.server.session import SessionCancel, SessionManager, SessionSlot, ShutdownPolicy
from brisvox.server.webrtc_endpoint import WebRtcEndpoint, WhipConfig
from brisvox.transport.webrtc import WebRtcCall, WebRtcConfig
from tests.server.test_webrtc_endpoint import SDP
from tests.transport.webrtc._client import BrowserPeer


async def _never_runs(item: object, cancel: SessionCancel) -> None:
    raise AssertionError("a refused offer never reaches the engine")


async def _no_websocket(websocket: WebSocket, slot: SessionSlot[object]) -> None:
    slot.release()
    await websocket.close()


async def test_an_answer_not_ready_within_the_gather_timeout_is_a_503_naming_it_and_counted(
        monkeypatch: pytest.MonkeyPatch) -> None:
    clock = SimClock()

    async def stuck_gathering(self: WebRtcCall, offer_sdp: str) -> None:
        await clock.sleep(3600)  # ICE gathering that never finishes

    monkeypatch.setattr(WebRtcCall, "_negotiate", stuck_gathering)
    manager: SessionManager[object] = SessionManager(_never_runs, max_sessions=2, clock=clock)
    metrics = ServerMetrics()
    endpoint = WebRtcEndpoint(clock, WhipConfig(webrtc=WebRtcConfig(gather_timeout=2.5)))
    app = build_app(manager, metrics, call_endpoint=_no_websocket, http_call_endpoints=(endpoint,))
    browser = BrowserPeer(clock)
    try:
        offer = await browser.offer()
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as http:
            started = clock.now()
            answered = await http.post("/whip", content=offer, headers=SDP)
            waited = clock.now() - started
            assert answered.status_code == 503 and answered.headers["retry-after"]
            assert answered.text == "answer_timeout: the answer was not ready within 2.5 s (ICE gathering)\n"
            assert waited == pytest.approx(2.5, abs=0.1), "refused at the gather timeout, on the injected clock"
            metrics_text = (await http.get("/metrics")).text
            assert 'brisvox_signaling_refused_total{reason="answer_timeout"} 1.0' in metrics_text
            ready = (await http.get("/readyz")).json()
            assert ready["active"] == 0 and ready["reserved"] == 0, "the slot was given back"
            assert endpoint.pending_calls == 0
    finally:
        await browser.close()
        await manager.shutdown(ShutdownPolicy())
