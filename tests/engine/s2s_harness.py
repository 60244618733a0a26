"""A simulated S2S call: run_s2s_call over the loopback transport with a scripted S2S session.

``FakeS2s`` is the provider and its one session: a test pushes vendor events with ``emit``
and reads what the stage sent (``sent``: results, requests, notes, user messages, cancels, truncations).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed
from brisvox.core.tasks import TaskScope, live_tasks, wait_for_task_baseline
from brisvox.engine import CallObserver, CallReport
from brisvox.engine.events import EngineEvent
from brisvox.engine.s2s import run_s2s_call
from brisvox.inference.vad import VoiceActivityDetector
from brisvox.providers.s2s import S2sConfig, S2sEvent, S2sProvider, S2sToolResult
from brisvox.transport import Heard, LoopbackClient, LoopbackTransport, TransportSession
from brisvox.transport.events import WireAudioOut

RATE = 16000


class FakeS2s:
    """A scripted S2S provider and session (the test plays the vendor)."""

    name = "fake-s2s"

    def __init__(self) -> None:
        self._events: asyncio.Queue[S2sEvent] = asyncio.Queue(maxsize=256)
        self.sent: list[tuple[str, Any]] = []
        self.audio_in = 0  # bytes of caller audio received
        self.config: S2sConfig | None = None
        self.closed = False

    async def connect(self, config: S2sConfig) -> FakeS2s:
        self.config = config
        return self

    async def emit(self, *events: S2sEvent) -> None:
        for event in events:
            await self._events.put(event)
        await asyncio.sleep(0)

    def __aiter__(self) -> FakeS2s:
        return self

    async def __anext__(self) -> S2sEvent:
        return await self._events.get()

    async def send_audio(self, pcm: bytes) -> None:
        self.audio_in += len(pcm)

    async def send_tool_results(self, results: Sequence[S2sToolResult]) -> None:
        self.sent.append(("results", list(results)))

    async def request_response(self) -> None:
        self.sent.append(("request", None))

    async def cancel_response(self) -> None:
        self.sent.append(("cancel", None))

    async def add_note(self, text: str) -> None:
        self.sent.append(("note", text))

    async def add_user_text(self, text: str) -> None:
        self.sent.append(("user", text))

    async def truncate(self, item_id: str | None, heard_ms: int) -> None:
        self.sent.append(("truncate", (item_id, heard_ms)))

    async def aclose(self) -> None:
        self.closed = True

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.sent]

    def of(self, kind: str) -> list[Any]:
        return [value for k, value in self.sent if k == kind]


@dataclass
class S2sResult:
    report: CallReport
    heard: list[Heard] = field(default_factory=list)
    events: list[EngineEvent] = field(default_factory=list)


Script = Callable[[Any], Awaitable[None]]


async def until(clock: SimClock, ready: Callable[[], bool], limit: float = 10.0) -> None:
    """Let virtual time pass until ``ready()`` (fails the test past ``limit`` seconds)."""
    end = clock.now() + limit
    while not ready():
        assert clock.now() < end, "the condition never came true"
        await clock.sleep(0.01)


async def s2s_call(
    clock: SimClock,
    provider: S2sProvider,
    script: Callable[[], Awaitable[None]],
    *,
    config: S2sConfig | None = None,
    tools: Any = None,
    vad: VoiceActivityDetector | None = None,
    speech: Callable[[float], bytes] | None = None,
    linger: float = 0.5,
    lead: float = 0.0,
    caller: Callable[[LoopbackClient], Awaitable[None]] | None = None,
) -> S2sResult:
    """Run ``script`` (the vendor's side) while the caller sends 20 ms frames (``speech(t)``,
    else silence), listens and runs ``caller`` (typed text, keys); hang up ``linger`` s after
    the script ends.  ``lead``: the caller reports holding that much audio unplayed with every
    frame it gets (a carrier)."""
    result_events: list[EngineEvent] = []
    heard: list[Heard] = []
    observer = CallObserver(listener=result_events.append)
    baseline = live_tasks()
    async with LoopbackTransport(clock) as transport, TaskScope("sim") as scope:
        client = await transport.connect(metadata={"sample_rate": str(RATE)})
        link = await transport.accept()
        session = await TransportSession.open(clock, link)
        call = scope.spawn(run_s2s_call(session, config or S2sConfig(), provider, clock, tools=tools,
                                        observer=observer, vad=vad), name="call")

        async def listen() -> None:
            with contextlib.suppress(ChannelClosed):
                while True:
                    heard.append(got := await client.recv())
                    if lead and isinstance(got.item, WireAudioOut):
                        await client.report_lead(lead)

        async def talk() -> None:
            start = clock.now()
            i = 0
            with contextlib.suppress(ChannelClosed):
                while True:
                    await clock.sleep_until(start + i * 0.02)
                    t = i * 0.02
                    await client.send_audio(speech(t) if speech is not None else bytes(640), RATE)
                    i += 1

        listener = scope.spawn(listen(), name="listener")
        talker = scope.spawn(talk(), name="talker")
        typist = scope.spawn(caller(client), name="caller") if caller is not None else None
        await script()
        await clock.sleep(linger)
        talker.cancel()
        if typist is not None:
            typist.cancel()
        with contextlib.suppress(ChannelClosed):
            await client.hangup()
        report = await call
        await asyncio.sleep(0)
        listener.cancel()
    await wait_for_task_baseline(clock, baseline)
    return S2sResult(report, heard, result_events)
