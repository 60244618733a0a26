"""The engine's event stream: typed facts about one call, emitted where they arise.

Every event is a frozen, slotted dataclass with the call's ``epoch`` (the turn it belongs
to) and ``at`` (the engine clock's seconds).  The stages emit them as the facts happen:

* the turn driver: :class:`TurnStarted` (``barge_in`` when it cut the bot),
  :class:`TurnEnded` (with the end of the caller's speech) and each
  :class:`UserTranscript`, tagged with the turn it went to, and :class:`ModelBusy` when the
  speech-to-text refused the caller's words (its pool is full);
* the LLM runner: :class:`UserTurn` (the words the model gets, when they enter the
  context), :class:`ToolCallStarted` and :class:`ToolCallSettled` (the tool engine's own
  :class:`~brisvox.agent.tools.Outcome`), :class:`BotHeard` (what the caller heard of a
  reply that was cut), :class:`LlmRound` (each model request: model, times, tokens),
  :class:`FillerStarted`, :class:`FlowEntered` (a flow's transition, with the node's tools),
  :class:`EngineFailure` (a turn that failed and got the fallback line);
* the speak stage: :class:`BotText` (each piece of the reply as it goes to speech) and
  :class:`BotDone` (no more text will come for the epoch), :class:`TtsFirstAudio` (the epoch's
  first synthesized audio), and :class:`ModelBusy` when the text-to-speech refused a reply;
* TransportOut: :class:`BotAudible`, when the first audible sample of the turn's reply
  was released to the caller (leading silence does not count);
* ``run_call``: :class:`EngineFailure` for a failure that ends the call, and
  :class:`CallerInput` for each message the caller typed, each key (DTMF) they pressed and
  each note their screen sent (an app event), as it arrives from the transport (``at``: its
  arrival; ``epoch``: the turn then running).

:class:`CallEvents` is what the stages hold: it hands each event to the call's
:class:`CallObserver` (nothing when there is none) and derives :class:`TurnLatency` once a
turn's reply became audible.  :class:`CallObserver` is a bounded queue with a drop-oldest
policy: the engine never waits on a watcher; a watcher that falls behind loses the oldest
events (``dropped`` counts them).  Its ``listener`` sees every event before the queue, for
counters that must not lose any (the server's metrics).

Events carry the caller's words, the bot's words and tool arguments and results: their
``repr`` names no text, and they are never logged.
"""

from __future__ import annotations

import asyncio
import enum
import logging
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from typing import Any, Final, TypeAlias

from brisvox.agent.tools import Outcome, ToolKind
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.frames import BusyStage, ReplyMode, TurnEndReason
from brisvox.core.timeline import TimelineRecorder, TurnEvent

__all__ = [
    "DEFAULT_OBSERVER_CAPACITY",
    "BotAudible",
    "BotDone",
    "BotHeard",
    "BotText",
    "CallEvents",
    "CallObserver",
    "CallerInput",
    "CallerInputKind",
    "EngineEvent",
    "EngineFailure",
    "EventListener",
    "FillerStarted",
    "FlowEntered",
    "LlmRound",
    "ModelBusy",
    "ToolCallSettled",
    "ToolCallStarted",
    "TtsFirstAudio",
    "TurnEnded",
    "TurnLatency",
    "TurnStarted",
    "UserTranscript",
    "UserTurn",
]

log = logging.getLogger(__name__)

DEFAULT_OBSERVER_CAPACITY: Final = 256
_KEPT_TURNS: Final = 8  # turn ends waiting for their audio; older ones never got any


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class _Event:
    epoch: int
    at: float

    def __repr__(self) -> str:  # the fields hold caller and bot text: names only
        return f"{type(self).__name__}(epoch={self.epoch}, fields={[f.name for f in fields(self)]})"


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class TurnStarted(_Event):
    """A user turn began; ``barge_in``: it interrupted the bot (older epochs stop)."""

    barge_in: bool = False


class CallerInputKind(enum.Enum):
    TEXT = "text"  # a message typed instead of spoken
    KEY = "key"  # a key pressed on the phone (DTMF)
    NOTE = "note"  # an app event from the caller's screen: a note for the context, no turn


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class CallerInput(_Event):
    """The caller typed ``text``, pressed a key (``kind`` KEY: ``text`` is the key, 0-9 * # A-D)
    or their screen sent an app event (``kind`` NOTE: ``text`` is the note it became).
    ``reply``: how typed text asked to be answered (spoken, or shown as text); None for the others."""

    kind: CallerInputKind
    text: str
    reply: ReplyMode | None = None


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class TurnEnded(_Event):
    """The turn ended (handed to the model); ``speech_ended``: the caller's last VAD stop in it."""

    reason: TurnEndReason
    speech_ended: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class UserTranscript(_Event):
    """Interim or final words of the caller; ``epoch`` is the turn they went to."""

    text: str
    final: bool


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class UserTurn(_Event):
    """The caller's whole turn, as it entered the context."""

    text: str


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class BotText(_Event):
    """A piece of the reply's round ``round`` as it goes to speech, or, with ``reply`` TEXT, as it
    goes to the caller's screen only (a text-only reply: never synthesized)."""

    round: int
    text: str
    reply: ReplyMode = ReplyMode.SPOKEN


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class BotDone(_Event):
    """No more reply text will come for the epoch."""


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class BotHeard(_Event):
    """A round of the epoch was cut short; ``text`` is what the caller heard (all the context keeps)
    and ``played`` the seconds of the round's audio it covers: released to the client, less what a
    carrier still held unplayed when the clear flushed it (its mark echoes prove the rest played)."""

    round: int
    text: str
    played: float


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class ToolCallStarted(_Event):
    """The model's call, handed to the tool engine; ``arguments`` as the model sent them (JSON text)."""

    call_id: str
    name: str
    arguments: str
    kind: ToolKind | None = None  # None: a tool the registry does not know
    parsed: Mapping[str, Any] | None = None  # the arguments as a mapping (None: they were not valid JSON)


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class ToolCallSettled(_Event):
    """A call's result reached the context; ``outcome`` is the tool engine's."""

    call_id: str
    name: str
    outcome: Outcome
    content: str
    is_error: bool


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class LlmRound(_Event):
    """One model request of the epoch ended at ``at``: sent at ``requested``, its first token
    (text or tool call) at ``first_token`` (None: none came); tokens as the provider reported
    them (None: it did not); ``failed``: it gave no usable answer (the fallback line was spoken)."""

    round: int
    model: str
    requested: float
    first_token: float | None
    input_tokens: int | None
    output_tokens: int | None
    failed: bool


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class TtsFirstAudio(_Event):
    """The text-to-speech (or a filler clip) gave the epoch's first audio at ``at``."""


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class FillerStarted(_Event):
    """A filler round began while a tool ran (``tool`` the call it covers) or, ``tool`` empty,
    while the model had not sent its first token (a slow model round)."""

    round: int
    tool: str


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class FlowEntered(_Event):
    """A conversation flow entered ``node`` (from ``previous``) in the epoch; ``tools``: the
    tools the node offers the model, in name order."""

    node: str
    previous: str | None
    tools: tuple[str, ...]


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class BotAudible(_Event):
    """The first audible audio of the epoch's reply was released to the caller at ``at``."""


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class TurnLatency(_Event):
    """A turn's latencies in seconds (None: not measured), at its first audible audio."""

    speech_end_to_audio: float | None
    speech_end_to_turn_end: float | None
    turn_end_to_audio: float | None
    turn_end_to_first_token: float | None
    turn_end_reason: TurnEndReason | None


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class EngineFailure(_Event):
    """A stage or provider failed (logged with its traceback); ``fatal``: it ended the call."""

    stage: str
    error: str  # the exception's type name: its text may hold caller data
    fatal: bool


@dataclass(frozen=True, slots=True, kw_only=True, repr=False)
class ModelBusy(_Event):
    """An embedded model refused work because its inference pool is full (the machine is at
    capacity): the caller's words were lost (``BusyStage.STT``, or ``BusyStage.VAD`` at the
    start of a run of refused frames; the turn gets the fallback line) or a reply cannot be
    spoken (``BusyStage.TTS``)."""

    stage: BusyStage
    provider: str


EngineEvent: TypeAlias = (
    TurnStarted | TurnEnded | UserTranscript | UserTurn | BotText | BotDone | BotHeard | ToolCallStarted
    | ToolCallSettled | BotAudible | TurnLatency | EngineFailure | ModelBusy | LlmRound | TtsFirstAudio
    | FillerStarted | FlowEntered | CallerInput
)
EventListener = Callable[[EngineEvent], None]


class CallObserver:
    """A bounded, drop-oldest queue of one call's events (see the module docs).

    ``listener`` (optional) sees every event as it is emitted, before the queue.  It runs
    on the engine's path, so it must be quick and must not raise.
    """

    def __init__(self, capacity: int = DEFAULT_OBSERVER_CAPACITY, listener: EventListener | None = None) -> None:
        if capacity < 1:
            raise ConfigError(f"CallObserver capacity must be >= 1, got {capacity}")
        self._events: deque[EngineEvent] = deque(maxlen=capacity)
        self._ready = asyncio.Event()
        self._closed = False
        self._listener = listener
        self.dropped = 0

    def add_listener(self, listener: EventListener) -> None:
        """One more listener (the call's recorder), after the one given at construction."""
        current = self._listener
        if current is None:
            self._listener = listener
            return

        def both(event: EngineEvent) -> None:
            current(event)
            listener(event)

        self._listener = both

    def emit(self, event: EngineEvent) -> None:
        """Queue ``event`` at once (never waits); the oldest event goes when full."""
        if self._closed:
            return
        if self._listener is not None:
            self._listener(event)
        if len(self._events) == self._events.maxlen:
            self.dropped += 1
        self._events.append(event)
        self._ready.set()

    def close(self) -> None:
        """No more events: ``get`` drains what is queued, then raises ChannelClosed."""
        self._closed = True
        self._ready.set()

    @property
    def closed(self) -> bool:
        return self._closed

    def __len__(self) -> int:
        return len(self._events)

    def try_get(self) -> EngineEvent | None:
        return self._events.popleft() if self._events else None

    async def get(self) -> EngineEvent:
        while not self._events:
            if self._closed:
                raise ChannelClosed("the call observer is closed")
            self._ready.clear()
            await self._ready.wait()
        return self._events.popleft()


class CallEvents:
    """The stages' handle on the event stream of one call (see the module docs).

    Without an observer every ``emit`` returns at once; the latency of a turn is still
    marked in the timeline by the stages themselves.
    """

    __slots__ = ("_ended", "_observer", "_timeline", "call_id", "failures")

    def __init__(self, call_id: str, observer: CallObserver | None = None,
                 timeline: TimelineRecorder | None = None) -> None:
        self.call_id = call_id
        self._observer = observer
        self._timeline = timeline or TimelineRecorder()
        self._ended: dict[int, TurnEnded] = {}
        self.failures = 0

    def emit(self, event: EngineEvent) -> None:
        observer = self._observer
        if observer is None:
            return
        observer.emit(event)
        if isinstance(event, TurnEnded):
            self._ended[event.epoch] = event
            for old in [e for e in self._ended if e <= event.epoch - _KEPT_TURNS]:
                del self._ended[old]
        elif isinstance(event, BotAudible):
            ended = self._ended.pop(event.epoch, None)
            if ended is not None:  # a greeting has no turn end: it opens the call unasked
                observer.emit(self._latency(ended, event))

    def failed(self, stage: str, exc: BaseException, *, epoch: int, at: float, fatal: bool) -> EngineFailure:
        """A failure: one log line with its traceback and the call's id, and an :class:`EngineFailure`."""
        self.failures += 1
        what = "ends the call" if fatal else "the turn gets the fallback line"
        log.error("call %s: %s failed (%s): %s", self.call_id, stage, type(exc).__name__, what, exc_info=exc)
        failure = EngineFailure(epoch=epoch, at=at, stage=stage, error=type(exc).__name__, fatal=fatal)
        self.emit(failure)
        return failure

    def _latency(self, ended: TurnEnded, audible: BotAudible) -> TurnLatency:
        record = self._timeline.get(ended.epoch)
        token = record.at(TurnEvent.LLM_FIRST_TOKEN) if record is not None else None
        speech = ended.speech_ended
        return TurnLatency(
            epoch=ended.epoch,
            at=audible.at,
            speech_end_to_audio=None if speech is None else audible.at - speech,
            speech_end_to_turn_end=None if speech is None else ended.at - speech,
            turn_end_to_audio=audible.at - ended.at,
            turn_end_to_first_token=None if token is None else token - ended.at,
            turn_end_reason=ended.reason,
        )
