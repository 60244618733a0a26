"""The vocabulary of the transport: call info, engine events and commands, wire items.

Two boundaries:

* engine <-> session: :data:`TransportEvent` (what the engine reads) and
  :data:`TransportCommand` (what it sends);
* session <-> protocol adapter: :data:`WireEvent` (what the adapter hands in) and
  :data:`WireOut` (what the adapter must put on its wire).

All are frozen slotted dataclasses; reprs never print audio or caller text.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from brisvox.core.errors import InvalidInput
from brisvox.core.frames import InputAudioFrame, OutputAudioFrame, ReplyMode

__all__ = [
    "CallFailure",
    "CallInfo",
    "CallRates",
    "CallerAudio",
    "Clear",
    "ContextNote",
    "Dtmf",
    "FailureKind",
    "Mark",
    "MarkCleared",
    "MarkPlayed",
    "PlaybackLead",
    "PlaybackPosition",
    "SendAudio",
    "Started",
    "Stop",
    "StopReason",
    "Stopped",
    "TransportCommand",
    "TransportError",
    "TransportEvent",
    "TypedText",
    "WireAudio",
    "WireAudioOut",
    "WireClear",
    "WireDtmf",
    "WireEvent",
    "WireFault",
    "WireHangup",
    "WireHangupOut",
    "WireLead",
    "WireMark",
    "WireMarkEcho",
    "WireNote",
    "WireOut",
    "WireStarted",
    "WireText",
]

SUPPORTED_RATES = frozenset({8000, 16000, 24000, 44100, 48000})


class StopReason(enum.Enum):
    REQUESTED = "requested"  # the engine sent Stop
    PEER_HANGUP = "peer_hangup"  # the client ended the call
    PEER_DISCONNECTED = "peer_disconnected"  # the client vanished
    TIMEOUT = "timeout"  # a bounded wait ran out (wire write, close)


@dataclass(frozen=True, slots=True)
class CallRates:
    input: int
    output: int

    @classmethod
    def symmetric(cls, rate: int) -> CallRates:
        return cls(rate, rate)


@dataclass(frozen=True, slots=True, kw_only=True)
class CallInfo:
    """What an adapter knows about a call.  ``metadata`` values are strings."""

    SAMPLE_RATE_KEY: ClassVar[str] = "sample_rate"
    OUTPUT_SAMPLE_RATE_KEY: ClassVar[str] = "output_sample_rate"

    call_id: str
    transport: str = "loopback"
    metadata: Mapping[str, str] = field(default_factory=dict)

    def sample_rate(self) -> CallRates | None:
        """The call's rates from metadata; None when the adapter reports none.
        Raises InvalidInput for a malformed or unsupported value."""
        raw = self.metadata.get(self.SAMPLE_RATE_KEY)
        if raw is None:
            return None
        rate_in = _parse_rate(self.SAMPLE_RATE_KEY, raw)
        raw_out = self.metadata.get(self.OUTPUT_SAMPLE_RATE_KEY)
        rate_out = rate_in if raw_out is None else _parse_rate(self.OUTPUT_SAMPLE_RATE_KEY, raw_out)
        return CallRates(rate_in, rate_out)

    def __repr__(self) -> str:
        return f"CallInfo(call_id={self.call_id!r}, transport={self.transport!r}, metadata=<{len(self.metadata)} keys>)"


def _parse_rate(key: str, raw: str) -> int:
    try:
        rate = int(raw)
    except ValueError:
        raise InvalidInput(f"call metadata {key}={raw!r} is not an integer") from None
    if rate not in SUPPORTED_RATES:
        raise InvalidInput(f"call metadata {key}={rate} is not a supported rate {sorted(SUPPORTED_RATES)}")
    return rate


# --- engine events -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Started:
    info: CallInfo


@dataclass(frozen=True, slots=True)
class CallerAudio:
    """Caller audio re-tagged with the session's current epoch; ``at`` is the adapter's arrival time."""

    frame: InputAudioFrame
    at: float


@dataclass(frozen=True, slots=True)
class Dtmf:
    digit: str
    at: float


@dataclass(frozen=True, slots=True, repr=False)
class TypedText:
    """A message the caller typed instead of speaking (RTVI ``send-text``); ``at``: its arrival;
    ``reply``: TEXT when the caller wants the answer shown, not spoken."""

    text: str
    at: float
    reply: ReplyMode = ReplyMode.SPOKEN

    def __repr__(self) -> str:
        return f"TypedText(<{len(self.text)} chars>, at={self.at:.3f}, reply={self.reply.value})"


@dataclass(frozen=True, slots=True, repr=False)
class ContextNote:
    """A fact for the model's context that opens no turn and is never spoken (an app event from
    the caller's screen); ``at``: its arrival."""

    text: str
    at: float

    def __repr__(self) -> str:
        return f"ContextNote(<{len(self.text)} chars>, at={self.at:.3f})"


@dataclass(frozen=True, slots=True)
class MarkPlayed:
    id: str


@dataclass(frozen=True, slots=True)
class MarkCleared:
    id: str


@dataclass(frozen=True, slots=True)
class PlaybackPosition:
    """Audio released to the wire for one (epoch, utterance), in samples at ``sample_rate``."""

    epoch: int
    utterance: int
    samples: int
    sample_rate: int

    @property
    def played(self) -> float:
        return self.samples / self.sample_rate if self.sample_rate else 0.0


@dataclass(frozen=True, slots=True)
class PlaybackLead:
    """Seconds of audio sent to the client and not played yet, as the client's own echoes prove
    (a carrier's mark echoes).  Unrouted, every measurement is an event (latest wins).  Routed
    (``TransportSession.route_playout``), the playout sink gets one at each clear that flushed
    the client: ``lead`` is then what the client held of epoch ``epoch``'s audio and never
    played, so the caller heard its released audio minus ``lead``."""

    lead: float
    epoch: int = 0


@dataclass(frozen=True, slots=True)
class TransportError:
    kind: str
    message: str
    fatal: bool = False


@dataclass(frozen=True, slots=True)
class Stopped:
    reason: StopReason


TransportEvent = (
    Started | CallerAudio | Dtmf | TypedText | ContextNote | MarkPlayed | MarkCleared | PlaybackPosition | PlaybackLead
    | TransportError | Stopped
)


# --- engine commands -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SendAudio:
    frame: OutputAudioFrame


@dataclass(frozen=True, slots=True)
class Mark:
    id: str


@dataclass(frozen=True, slots=True)
class Clear:
    epoch: int


@dataclass(frozen=True, slots=True)
class Stop:
    pass


TransportCommand = SendAudio | Mark | Clear | Stop


# --- adapter side --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class WireStarted:
    info: CallInfo


@dataclass(frozen=True, slots=True, repr=False)
class WireAudio:
    pcm: bytes
    sample_rate: int
    seq: int
    at: float

    def __repr__(self) -> str:
        return f"WireAudio(<{len(self.pcm)} bytes>, rate={self.sample_rate}, seq={self.seq}, at={self.at:.3f})"


@dataclass(frozen=True, slots=True)
class WireDtmf:
    digit: str
    at: float


@dataclass(frozen=True, slots=True, repr=False)
class WireText:
    """A typed message (see :class:`TypedText`)."""

    text: str
    at: float
    reply: ReplyMode = ReplyMode.SPOKEN

    def __repr__(self) -> str:
        return f"WireText(<{len(self.text)} chars>, at={self.at:.3f}, reply={self.reply.value})"


@dataclass(frozen=True, slots=True, repr=False)
class WireNote:
    """A note for the model's context (see :class:`ContextNote`)."""

    text: str
    at: float

    def __repr__(self) -> str:
        return f"WireNote(<{len(self.text)} chars>, at={self.at:.3f})"


@dataclass(frozen=True, slots=True)
class WireMarkEcho:
    id: str


@dataclass(frozen=True, slots=True)
class WireFault:
    kind: str
    message: str
    fatal: bool = False


@dataclass(frozen=True, slots=True)
class WireHangup:
    pass


@dataclass(frozen=True, slots=True)
class WireLead:
    """The client's playout lead (a carrier's mark echo): audio sent to it and not played yet,
    which a ``WireClear`` flushes unplayed."""

    lead: float


WireEvent = WireStarted | WireAudio | WireDtmf | WireText | WireNote | WireMarkEcho | WireFault | WireHangup | WireLead


@dataclass(frozen=True, slots=True)
class WireAudioOut:
    frame: OutputAudioFrame


@dataclass(frozen=True, slots=True)
class WireClear:
    epoch: int


@dataclass(frozen=True, slots=True)
class WireMark:
    id: str


class FailureKind(enum.Enum):
    """Why the engine ended a call it could not serve (the WebSocket protocol's error codes)."""

    CALL_FAILED = "call_failed"  # a provider unreachable or failing, a setting this call cannot run
    INTERNAL_ERROR = "internal_error"  # a bug in the server (logged with its traceback)


@dataclass(frozen=True, slots=True)
class CallFailure:
    """The engine's failure as the caller is told it: a kind and a short message (no secrets)."""

    kind: FailureKind
    message: str


@dataclass(frozen=True, slots=True)
class WireHangupOut:
    """The call is over; ``failure`` when the engine ended it because it failed."""

    failure: CallFailure | None = None


WireOut = WireAudioOut | WireClear | WireMark | WireHangupOut
