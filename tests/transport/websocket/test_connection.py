"""run_call over a scripted WsPeer (no sockets): start, admission, refusals, liveness, limits."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable

from brisvox.core.clock import SimClock
from brisvox.core.tasks import TaskScope
from brisvox.transport.events import CallInfo, Started
from brisvox.transport.link import CallLink
from brisvox.transport.session import TransportSession
from brisvox.transport.websocket import PeerClosed, ServerConfig, ServerStats, run_call


class ScriptedPeer:
    """A WsPeer: the test feeds ``incoming``; what the server sends lands in ``sent``."""

    def __init__(self, *, answer_pings: bool = True) -> None:
        self.incoming: asyncio.Queue[bytes | str | PeerClosed] = asyncio.Queue()
        self.sent: list[bytes | str] = []
        self.closed_with: int | None = None
        self.aborted = False
        self.answer_pings = answer_pings
        self.pings = 0
        self.fail_sends = False

    @property
    def remote(self) -> str:
        return "10.0.0.1:5"

    async def recv(self) -> bytes | str:
        item = await self.incoming.get()
        if isinstance(item, PeerClosed):
            raise item
        return item

    async def send(self, data: bytes | str) -> None:
        if self.fail_sends or self.closed_with is not None:
            raise PeerClosed(by_peer=False)
        self.sent.append(data)

    async def ping(self) -> Awaitable[object]:
        self.pings += 1
        fut: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        if self.answer_pings:
            fut.set_result(None)
        return fut

    async def close(self, code: int, reason: str) -> None:
        self.closed_with = code
        self.incoming.put_nowait(PeerClosed(by_peer=True))

    def abort(self) -> None:
        self.aborted = True
        self.incoming.put_nowait(PeerClosed(by_peer=False))

    def texts(self) -> list[dict[str, object]]:
        return [json.loads(m) for m in self.sent if isinstance(m, str)]


async def serve_one(peer: ScriptedPeer, config: ServerConfig, *, accept: bool = True
                    ) -> tuple[ServerStats, list[CallLink], asyncio.Task[None], SimClock]:
    clock = SimClock()
    stats = ServerStats()
    links: list[CallLink] = []

    async def deliver(link: CallLink) -> bool:
        links.append(link)
        return accept

    task = asyncio.ensure_future(run_call(peer, clock=clock, config=config, deliver=deliver,
                                          shutdown=asyncio.Event(), stats=stats))
    return stats, links, task, clock


async def test_the_call_info_keeps_client_metadata_but_the_servers_keys_win() -> None:
    peer = ScriptedPeer()
    peer.incoming.put_nowait(json.dumps({"type": "start", "sample_rate": 8000, "encoding": "mulaw", "call_id": "mine",
                                         "metadata": {"tenant": "t1", "transport": "spoofed", "sample_rate": "16000",
                                                      "peer_addr": "1.2.3.4", "output_sample_rate": "16000"}}))
    stats, links, task, clock = await serve_one(peer, ServerConfig())
    await clock.sleep(0.1)
    assert len(links) == 1
    info = links[0].info
    assert info.metadata == {"tenant": "t1", "transport": "websocket", CallInfo.SAMPLE_RATE_KEY: "8000",
                             "output_sample_rate": "8000", "encoding": "mulaw", "client_call_id": "mine",
                             "peer_addr": "10.0.0.1:5"}
    session = await TransportSession.open(clock, links[0])
    assert isinstance(await session.recv(), Started)
    assert peer.texts()[0]["type"] == "started" and stats.calls_started == 1
    peer.incoming.put_nowait(json.dumps({"type": "stop"}))
    await asyncio.wait_for(task, 30)
    await session.close()
    assert peer.texts()[-1] == {"type": "stop", "reason": "ended"} and peer.closed_with == 1000


async def test_a_call_the_engine_does_not_take_is_refused_with_server_busy_and_1013() -> None:
    peer = ScriptedPeer()
    peer.incoming.put_nowait('{"type":"start"}')
    stats, _links, task, _clock = await serve_one(peer, ServerConfig(), accept=False)
    await asyncio.wait_for(task, 30)
    assert peer.texts()[0]["code"] == "server_busy" and peer.closed_with == 1013
    assert stats.refused_busy == 1 and stats.calls_started == 0


async def test_no_start_within_the_start_timeout_is_start_timeout_and_1008_on_the_clock() -> None:
    peer = ScriptedPeer()
    stats, links, task, clock = await serve_one(peer, ServerConfig(start_timeout=3.0))
    t0 = clock.now()
    await asyncio.wait_for(task, 30)
    assert 3.0 <= clock.now() - t0 < 3.1
    assert peer.texts()[0]["code"] == "start_timeout" and peer.closed_with == 1008
    assert links == [] and stats.refused_start == 1


async def test_a_refusal_the_client_cannot_receive_aborts_the_connection() -> None:
    peer = ScriptedPeer()
    peer.fail_sends = True
    peer.incoming.put_nowait(b"\x00\x01")
    stats, _links, task, _clock = await serve_one(peer, ServerConfig())
    await asyncio.wait_for(task, 30)
    assert peer.aborted and stats.refused_start == 1


async def test_unanswered_pings_end_the_call_with_ping_timeout_and_answered_ones_keep_it() -> None:
    cfg = ServerConfig(ping_interval=1.0, ping_timeout=3.0, idle_timeout=100.0)
    alive = ScriptedPeer(answer_pings=True)
    alive.incoming.put_nowait('{"type":"start"}')
    _stats, links, alive_task, clock = await serve_one(alive, cfg)
    await clock.sleep(10.0)
    assert not alive_task.done() and alive.pings >= 8
    session = await TransportSession.open(clock, links[0])
    alive.incoming.put_nowait('{"type":"stop"}')
    await asyncio.wait_for(alive_task, 30)
    await session.close()

    silent = ScriptedPeer(answer_pings=False)
    silent.incoming.put_nowait('{"type":"start"}')
    stats, _links, silent_task, clock = await serve_one(silent, cfg)
    await asyncio.wait_for(silent_task, 30)
    assert [t["code"] for t in silent.texts() if t["type"] == "error"] == ["ping_timeout"]
    assert silent.closed_with == 1008 and stats.ping_timeouts == 1


async def test_the_idle_timer_counts_only_audio() -> None:
    cfg = ServerConfig(idle_timeout=5.0)
    peer = ScriptedPeer()
    peer.incoming.put_nowait('{"type":"start"}')
    stats, _links, task, clock = await serve_one(peer, cfg)
    async with TaskScope("feeder") as scope:
        async def feed() -> None:
            for _i in range(8):  # audio every second for 8 s, then only DTMF
                peer.incoming.put_nowait(bytes(640))
                await clock.sleep(1.0)
            while True:
                peer.incoming.put_nowait('{"type":"dtmf","digit":"1"}')
                await clock.sleep(1.0)

        scope.spawn(feed(), name="feed")
        t0 = clock.now()
        await asyncio.wait_for(task, 60)
        scope.cancel()
    assert 12.0 <= clock.now() - t0 < 14.0  # 5 s after the last audio at 7 s
    assert [t["code"] for t in peer.texts() if t["type"] == "error"] == ["idle_timeout"]
    assert stats.idle_timeouts == 1


async def test_a_start_nested_too_deep_is_refused_and_counted_as_too_deep() -> None:
    peer = ScriptedPeer()
    peer.incoming.put_nowait("[" * 4000)
    stats, links, task, _clock = await serve_one(peer, ServerConfig())
    await asyncio.wait_for(task, 30)
    assert peer.texts()[0]["code"] == "invalid_start" and peer.closed_with == 1008
    assert links == [] and stats.refused_start == 1 and stats.json_too_deep == 1


async def test_a_start_that_is_not_json_is_refused_but_not_counted_as_too_deep() -> None:
    peer = ScriptedPeer()
    peer.incoming.put_nowait("{not json")
    stats, _links, task, _clock = await serve_one(peer, ServerConfig())
    await asyncio.wait_for(task, 30)
    assert stats.refused_start == 1 and stats.json_too_deep == 0
