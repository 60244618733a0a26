"""The HTTP surface: health, readiness, metrics and the call endpoint's admission."""

from __future__ import annotations

import asyncio
import threading

import httpx
import pytest
from starlette.testclient import TestClient, WebSocketDenialResponse
from starlette.websockets import WebSocket

from brisvox.core.clock import SimClock
from brisvox.inference.pool import InferencePool, PoolConfig
from brisvox.server.app import build_app
from brisvox.server.metrics import ServerMetrics
from brisvox.server.session import SessionCancel, SessionManager, SessionSlot, ShutdownPolicy


async def idle_runner(item: asyncio.Event, cancel: SessionCancel) -> None:
    await item.wait()


async def release_slot(websocket: WebSocket, slot: SessionSlot[asyncio.Event]) -> None:
    """A call endpoint for tests that never open a call: gives the slot back."""
    slot.release()
    await websocket.close()


def client(manager: SessionManager[asyncio.Event], metrics: ServerMetrics | None = None,
           pools: tuple[InferencePool, ...] = ()) -> httpx.AsyncClient:
    app = build_app(manager, metrics or ServerMetrics(), call_endpoint=release_slot, pools=lambda: pools)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


async def test_healthz_answers_200_while_alive_even_when_draining() -> None:
    m = SessionManager(idle_runner, max_sessions=1, clock=SimClock())
    async with client(m) as c:
        assert (await c.get("/healthz")).status_code == 200
        m.begin_drain()
        r = await c.get("/healthz")
        assert (r.status_code, r.text) == (200, "ok\n")
    await m.shutdown(ShutdownPolicy())


async def test_readyz_is_200_with_room_and_503_when_full_or_draining() -> None:
    m = SessionManager(idle_runner, max_sessions=2, clock=SimClock())
    done = asyncio.Event()
    async with client(m) as c:
        r = await c.get("/readyz")
        assert r.status_code == 200
        assert r.json() == {"ready": True, "draining": False, "active": 0, "reserved": 0, "max": 2,
                            "saturated": []}
        slot = m.try_admit()
        assert isinstance(slot, SessionSlot)
        slot.spawn(done)
        reserved = m.try_admit()
        assert isinstance(reserved, SessionSlot)
        r = await c.get("/readyz")
        assert r.status_code == 503
        assert r.json() == {"ready": False, "draining": False, "active": 1, "reserved": 1, "max": 2,
                            "saturated": []}
        reserved.release()
        m.begin_drain()
        r = await c.get("/readyz")
        assert r.status_code == 503 and r.json()["draining"] is True
    done.set()
    await m.shutdown(ShutdownPolicy())


async def test_metrics_are_in_the_prometheus_text_format_and_fed_by_the_engine_hooks() -> None:
    m = SessionManager(idle_runner, max_sessions=3, clock=SimClock())
    metrics = ServerMetrics(tool_names=("get_time", "save_note"))
    metrics.record_turn({"voice_to_voice": 0.45, "llm_first_token": 0.2, "stt": None})
    metrics.record_tool("get_time", "ok")
    metrics.record_tool("save_note", "timed_out_running")
    metrics.record_refusal("at_capacity")
    async with client(m, metrics) as c:
        r = await c.get("/metrics")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/plain")
    text = r.text
    for line in (
        "brisvox_active_calls 0.0",
        "brisvox_max_calls 3.0",
        'brisvox_admissions_refused_total{reason="at_capacity"} 1.0',
        'brisvox_admissions_refused_total{reason="shutting_down"} 0.0',
        "brisvox_turns_total 1.0",
        'brisvox_turn_latency_seconds_bucket{le="0.5",stage="voice_to_voice"} 1.0',
        'brisvox_turn_latency_seconds_count{stage="llm_first_token"} 1.0',
        'brisvox_tool_calls_total{outcome="ok",tool="get_time"} 1.0',
        'brisvox_tool_calls_total{outcome="timed_out_running",tool="save_note"} 1.0',
        'brisvox_calls_ended_total{outcome="crashed"} 0.0',
    ):
        assert line in text, line
    assert 'stage="stt"' not in text
    await m.shutdown(ShutdownPolicy())


def test_a_call_past_the_limit_is_denied_before_the_upgrade_and_counted() -> None:
    async def runner(item: asyncio.Event, cancel: SessionCancel) -> None:
        await item.wait()

    entered: list[str] = []

    async def endpoint(websocket: WebSocket, slot: SessionSlot[asyncio.Event]) -> None:
        await websocket.accept()
        entered.append("call")
        await websocket.receive_text()  # hold the reservation until the client speaks

    m: SessionManager[asyncio.Event] = SessionManager(runner, max_sessions=1, clock=SimClock())
    metrics = ServerMetrics()
    app = build_app(m, metrics, call_endpoint=endpoint)
    with TestClient(app) as tc, tc.websocket_connect("/ws") as first:
        assert m.reserved == 1
        with pytest.raises(WebSocketDenialResponse) as denied, tc.websocket_connect("/ws"):
            pass
        assert denied.value.status_code == 503 and denied.value.headers["retry-after"] == "5"
        first.send_text("bye")
    assert entered == ["call"]
    assert 'brisvox_admissions_refused_total{reason="at_capacity"} 1.0' in metrics.render().decode()
    assert (m.active, m.reserved) == (0, 0)  # the endpoint neither spawned nor released: the app released


async def test_readyz_is_503_naming_the_pool_while_an_embedded_models_pool_is_saturated() -> None:
    m = SessionManager(idle_runner, max_sessions=2, clock=SimClock())
    started, gate = threading.Event(), threading.Event()

    def hold() -> None:
        started.set()
        gate.wait(10)

    async with InferencePool(PoolConfig(name="brisvox-hibari", threads=1, jobs_per_thread=1)) as pool:
        running = pool.submit(hold)
        assert started.wait(5)  # the thread took it: the lane is empty again
        async with client(m, pools=(pool,)) as c:
            assert (await c.get("/readyz")).status_code == 200
            queued = pool.submit(hold)  # the lane (1 job) is full now
            r = await c.get("/readyz")
            assert r.status_code == 503 and r.json()["saturated"] == ["brisvox-hibari"]
            assert r.json()["ready"] is False and m.ready  # the call limit alone would admit
            gate.set()
            await asyncio.gather(running, queued)
            assert (await c.get("/readyz")).status_code == 200
    await m.shutdown(ShutdownPolicy())
