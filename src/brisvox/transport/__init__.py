"""brisvox.transport: the boundary between a caller and a session.

The core (no socket code): :class:`TransportSession` over a :class:`CallLink`, the
epoch :class:`~brisvox.transport.ledger.Ledger`, bounded :class:`~brisvox.core.channel.Channel` queues.
Adapters: :class:`LoopbackTransport` (in memory) and ``brisvox.transport.websocket``.
"""

from brisvox.transport.events import (
    CallerAudio,
    CallFailure,
    CallInfo,
    CallRates,
    Clear,
    Dtmf,
    FailureKind,
    Mark,
    MarkCleared,
    MarkPlayed,
    PlaybackLead,
    PlaybackPosition,
    SendAudio,
    Started,
    Stop,
    Stopped,
    StopReason,
    TransportCommand,
    TransportError,
    TransportEvent,
)
from brisvox.transport.link import CallEnds, CallLink, Transport, call_pair
from brisvox.transport.loopback import Heard, LoopbackClient, LoopbackConfig, LoopbackTransport
from brisvox.transport.session import CommandSender, SessionConfig, TransportSession

__all__ = [
    "CallEnds",
    "CallFailure",
    "CallInfo",
    "CallLink",
    "CallRates",
    "CallerAudio",
    "Clear",
    "CommandSender",
    "Dtmf",
    "FailureKind",
    "Heard",
    "LoopbackClient",
    "LoopbackConfig",
    "LoopbackTransport",
    "Mark",
    "MarkCleared",
    "MarkPlayed",
    "PlaybackLead",
    "PlaybackPosition",
    "SendAudio",
    "SessionConfig",
    "Started",
    "Stop",
    "StopReason",
    "Stopped",
    "Transport",
    "TransportCommand",
    "TransportError",
    "TransportEvent",
    "TransportSession",
    "call_pair",
]
