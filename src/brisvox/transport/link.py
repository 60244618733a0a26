"""The two ends of one call between a protocol adapter and the transport core.

``call_pair(info)`` builds a :class:`CallLink` (the core's end, handed to
``TransportSession.open``) and the matching :class:`CallEnds` (the adapter's end).
They share three things:

* ``events``: WireEvents from the adapter to the core (``WIRE_EVENTS_CAPACITY``; caller
  audio drop-oldest, the rest backpressure).  The adapter closes it when its client
  vanished.
* ``out``: WireOuts from the core to the adapter (``WIRE_OUT_CAPACITY``, backpressure).
  The adapter closes it when it can no longer write (the core then treats the wire as
  closed).
* ``ended``: set by the core when the call is over; an adapter blocked on its client must
  stop waiting and return.
* ``audio``: the adapter sends caller audio through it (:meth:`AudioRoute.send`).  While the
  core has a handler on it (``TransportSession`` has from its start to its end) and nothing else
  waits in ``events``, a frame goes to the handler in the adapter's own task: at 50 frames a
  second per call, a hop through the channel and a wake-up of the core's input task per frame
  is most of what the frame costs the transport.  Otherwise it is queued in ``events`` as before
  (so the core sees the adapter's events in order).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from brisvox.core.channel import Channel, ItemPolicy, Overflow
from brisvox.core.clock import Clock, bounded
from brisvox.core.errors import ChannelClosed, DeadlineExceeded
from brisvox.transport.events import CallInfo, WireAudio, WireEvent, WireOut

__all__ = [
    "WIRE_EVENTS_CAPACITY", "WIRE_OUT_CAPACITY", "AudioRoute", "CallEnds", "CallLink", "Transport", "call_pair", "hand_off",
]

WIRE_EVENTS_CAPACITY = 64
WIRE_OUT_CAPACITY = 8

_AUDIO = ItemPolicy(Overflow.DROP_OLDEST, "audio")
_LOSSLESS = ItemPolicy(Overflow.BACKPRESSURE)


def wire_event_policy(item: WireEvent) -> ItemPolicy:
    return _AUDIO if isinstance(item, WireAudio) else _LOSSLESS


class AudioRoute:
    """Caller audio from the adapter to the core (see the module docs)."""

    __slots__ = ("_events", "handler")

    def __init__(self, events: Channel[WireEvent]) -> None:
        self._events = events
        # the core's: takes one frame in the adapter's task; must not block (None: queue the frames)
        self.handler: Callable[[WireAudio], None] | None = None

    def send(self, audio: WireAudio) -> bool:
        """Hand ``audio`` to the core's handler, or queue it (drop-oldest); False when the
        channel is closed."""
        handler = self.handler
        if handler is not None and not self._events:
            handler(audio)
            return True
        return self._events.try_send(audio)


@dataclass(frozen=True, slots=True, eq=False)
class CallLink:
    """The core's end of a call."""

    info: CallInfo
    events: Channel[WireEvent]
    out: Channel[WireOut]
    ended: asyncio.Event
    audio: AudioRoute


@dataclass(frozen=True, slots=True, eq=False)
class CallEnds:
    """The adapter's end of a call."""

    info: CallInfo
    events: Channel[WireEvent]
    out: Channel[WireOut]
    ended: asyncio.Event
    audio: AudioRoute


def call_pair(info: CallInfo) -> tuple[CallLink, CallEnds]:
    events: Channel[WireEvent] = Channel(WIRE_EVENTS_CAPACITY, name="wire events", policy=wire_event_policy)
    out: Channel[WireOut] = Channel(WIRE_OUT_CAPACITY, name="wire out")
    ended = asyncio.Event()
    audio = AudioRoute(events)
    return CallLink(info, events, out, ended, audio), CallEnds(info, events, out, ended, audio)


class Transport(Protocol):
    """A source of calls (loopback, WebSocket server, ...)."""

    async def accept(self) -> CallLink:
        """The next call whose client is connected and started; raises ChannelClosed when the
        transport shut down."""
        ...


async def hand_off(events: Channel[WireEvent], event: WireEvent, clock: Clock, timeout: float) -> bool:
    """Queue a lossless event for the core: at once when there is room, else waiting up to
    ``timeout``.  False when the core did not take it in time (the adapter then ends the call
    as overloaded); True when it was queued, or when the channel is closed (the call is over:
    nobody is left to tell)."""
    if events.closed:
        return True
    try:
        if not events.try_send(event):
            await bounded(clock, timeout, events.send(event), "event hand-off")
    except DeadlineExceeded:
        return False
    except ChannelClosed:
        pass
    return True
