"""The in-memory transport: a LoopbackClient plays the caller inside the same process.

``await transport.connect()`` creates a call (``WireStarted`` queued first) and returns
its :class:`LoopbackClient`; ``await transport.accept()`` hands the engine side's
:class:`CallLink`.  For each call the transport runs an adapter that delivers what the
core writes to the client after ``latency`` (the simulated network and playout buffer),
except a clear, which drops the buffered audio and marks and reaches the client at once.
Every delivery is stamped with the time the client heard it.

Every send (client to core, adapter to client) is bounded by ``send_timeout``; past it
the call ends as a lost peer.  ``client.disconnect()`` is a vanished client
(``PEER_DISCONNECTED``), ``client.hangup()`` a hang-up (``PEER_HANGUP``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from types import TracebackType

from brisvox.core.channel import WAKE, Channel
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import ChannelClosed, ConfigError, DeadlineExceeded
from brisvox.core.frames import ReplyMode
from brisvox.core.tasks import TaskScope
from brisvox.transport.events import (
    CallInfo,
    WireAudio,
    WireClear,
    WireDtmf,
    WireEvent,
    WireFault,
    WireHangup,
    WireHangupOut,
    WireLead,
    WireMarkEcho,
    WireNote,
    WireOut,
    WireStarted,
    WireText,
)
from brisvox.transport.link import CallEnds, CallLink, call_pair

__all__ = ["Heard", "LoopbackClient", "LoopbackConfig", "LoopbackTransport"]


@dataclass(frozen=True, slots=True, kw_only=True)
class LoopbackConfig:
    latency: float = 0.03
    send_timeout: float = 5.0
    heard_capacity: int = 1024
    accept_queue: int = 16

    def validate(self) -> None:
        if self.latency < 0:
            raise ConfigError(f"LoopbackConfig.latency must be >= 0, got {self.latency}")
        if not self.send_timeout > 0:
            raise ConfigError(f"LoopbackConfig.send_timeout must be positive, got {self.send_timeout}")
        if self.heard_capacity < 1 or self.accept_queue < 1:
            raise ConfigError("LoopbackConfig: heard_capacity and accept_queue must be at least 1")


@dataclass(frozen=True, slots=True)
class Heard:
    """Something the client received (audio, clear, mark or hang-up) and when."""

    item: WireOut
    at: float


class LoopbackClient:
    """The caller's side of one loopback call."""

    def __init__(self, clock: Clock, ends: CallEnds, heard: Channel[Heard], config: LoopbackConfig) -> None:
        self._clock = clock
        self._ends = ends
        self._heard = heard
        self._config = config
        self._seq = itertools.count()

    @property
    def info(self) -> CallInfo:
        return self._ends.info

    async def _send(self, ev: WireEvent) -> None:
        try:
            await bounded(self._clock, self._config.send_timeout, self._ends.events.send(ev), "loopback send")
        except DeadlineExceeded:
            self.disconnect()
            raise

    async def send_audio(self, pcm: bytes, sample_rate: int = 16000) -> None:
        await self._send(WireAudio(pcm, sample_rate, next(self._seq), self._clock.now()))

    async def send_dtmf(self, digit: str) -> None:
        await self._send(WireDtmf(digit, self._clock.now()))

    async def send_text(self, text: str, reply: ReplyMode = ReplyMode.SPOKEN) -> None:
        """A message typed instead of spoken (a turn of its own; an interruption while the bot
        speaks); ``reply`` TEXT: the answer is shown, not spoken."""
        await self._send(WireText(text, self._clock.now(), reply))

    async def send_note(self, text: str) -> None:
        """A note for the model's context that opens no turn (what an app event from a screen becomes)."""
        await self._send(WireNote(text, self._clock.now()))

    async def echo_mark(self, mark_id: str) -> None:
        await self._send(WireMarkEcho(mark_id))

    async def report_lead(self, seconds: float) -> None:
        """Audio received and not played yet, as a carrier's mark echoes tell it (``WireLead``)."""
        await self._send(WireLead(seconds))

    async def fault(self, kind: str, message: str, *, fatal: bool = False) -> None:
        await self._send(WireFault(kind, message, fatal))

    async def hangup(self) -> None:
        await self._send(WireHangup())
        self._ends.events.close()

    def disconnect(self) -> None:
        """The client vanishes without a word."""
        self._ends.events.close()
        self._ends.out.close()

    async def recv(self) -> Heard:
        """The next thing heard; raises ChannelClosed once the call is over and all was read."""
        return await self._heard.recv()

    def try_recv(self) -> Heard | None:
        return self._heard.try_recv()

    async def read_until_hangup(self, within: float) -> list[Heard]:
        """Everything heard until the hang-up (or the end of the call), bounded by ``within`` seconds."""
        got: list[Heard] = []

        async def _read() -> None:
            while True:
                h = await self._heard.recv()
                got.append(h)
                if isinstance(h.item, WireHangupOut):
                    return

        with contextlib.suppress(ChannelClosed):
            await bounded(self._clock, within, _read(), "loopback read")
        return got


class LoopbackTransport:
    """An in-memory Transport; an async context manager that owns the adapters' tasks."""

    def __init__(self, clock: Clock, config: LoopbackConfig | None = None) -> None:
        self._config = config or LoopbackConfig()
        self._config.validate()
        self._clock = clock
        self._accept: Channel[CallLink] = Channel(self._config.accept_queue, name="loopback accept")
        self._scope = TaskScope("loopback")
        self._ids = itertools.count(1)

    async def __aenter__(self) -> LoopbackTransport:
        return self

    async def __aexit__(self, et: type[BaseException] | None, e: BaseException | None,
                        tb: TracebackType | None) -> None:
        await self.aclose()

    async def connect(self, call_id: str | None = None, metadata: Mapping[str, str] | None = None) -> LoopbackClient:
        info = CallInfo(call_id=call_id or f"loopback-{next(self._ids)}", transport="loopback",
                        metadata=dict(metadata or {}))
        link, ends = call_pair(info)
        ends.events.try_send(WireStarted(info))
        heard: Channel[Heard] = Channel(self._config.heard_capacity, name="loopback heard")
        client = LoopbackClient(self._clock, ends, heard, self._config)
        self._scope.spawn(self._adapt(ends, heard), name=info.call_id)
        await bounded(self._clock, self._config.send_timeout, self._accept.send(link), "loopback accept")
        return client

    async def accept(self) -> CallLink:
        return await self._accept.recv()

    async def aclose(self) -> None:
        self._accept.close()
        await self._scope.aclose()

    async def _adapt(self, ends: CallEnds, heard: Channel[Heard]) -> None:
        """Deliver the core's output to the client after the configured latency."""
        clock, cfg = self._clock, self._config
        line: Channel[tuple[float, int, WireOut]] = Channel(1 << 16, name="loopback delay line")
        gen = 0

        async def deliver(item: WireOut) -> None:
            await bounded(clock, cfg.send_timeout, heard.send(Heard(item, clock.now())), "loopback delivery")

        async def reader() -> None:
            nonlocal gen
            try:
                while True:
                    got = await ends.out.recv_or_wake()  # the core wakes it when the call ends
                    if got is WAKE:
                        # The wake can overtake the last items (the hang-up): deliver those first.
                        if ends.ended.is_set() and not ends.out:
                            return
                        continue
                    if isinstance(got, WireClear):
                        gen += 1
                        line.purge(lambda _: True)
                        await deliver(got)
                    elif cfg.latency == 0 and not line:  # no delay to model: skip the line's task hop
                        await deliver(got)
                        if isinstance(got, WireHangupOut):
                            return
                    else:
                        line.try_send((clock.now() + cfg.latency, gen, got))
                        if isinstance(got, WireHangupOut):
                            return
            finally:
                line.close()

        async def deliverer() -> None:
            while True:
                due, g, item = await line.recv()
                await clock.sleep_until(due)
                if g == gen:
                    await deliver(item)
                if isinstance(item, WireHangupOut):
                    return

        try:
            async with asyncio.TaskGroup() as group:
                group.create_task(reader(), name="loopback reader")
                group.create_task(deliverer(), name="loopback deliverer")
        except* (ChannelClosed, DeadlineExceeded):
            pass
        finally:
            ends.events.close()
            ends.out.close()
            heard.close()

