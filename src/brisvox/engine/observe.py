"""What happens in a call, as events for a watcher (a demo page, a test, a dashboard).

:class:`CallObserver` is a bounded queue of :class:`CallEvent` with a drop-oldest policy:
the engine never waits on a watcher, and a watcher that falls behind loses the oldest
events (``dropped`` counts them).  ``run_call(..., observer=...)`` feeds it through two
pass-through :class:`ObserverTap` stages, one after the listen stage (the caller's
transcripts, live) and one after the LLM runner (the bot's text as it streams, the tool
calls and their results as they reach the context, barge-ins, what the caller heard of
a reply that was cut short, and the latency of each
turn once its first audio reached the caller).  Without an observer the pipeline is
unchanged.

Events carry the caller's words, the bot's words and tool arguments and results: they
are for the call's own client and are never logged.  Text fields are cut to
:data:`MAX_TEXT` characters.
"""

from __future__ import annotations

import asyncio
import enum
import json
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from brisvox.agent.context import AssistantMessage, Context, ToolMessage, UserMessage
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.core.frames import (
    BotAudioStarted,
    BotHeardFrame,
    BotResponseDone,
    BusyStage,
    Direction,
    Frame,
    InterruptFrame,
    LlmResponseEnded,
    LlmResponseStarted,
    LlmTextFrame,
    ModelBusyFrame,
    StopFrame,
    TranscriptFrame,
    UserTurnEnded,
    VadStoppedFrame,
)
from brisvox.core.processor import EpochPolicy, Processor, ProcessorContext
from brisvox.core.timeline import TimelineRecorder, TurnEvent

__all__ = [
    "DEFAULT_OBSERVER_CAPACITY", "MAX_TEXT", "CallEvent", "CallEventKind", "CallObserver", "EventListener", "ObserverTap",
]

DEFAULT_OBSERVER_CAPACITY = 256
MAX_TEXT = 500
_KEPT_EPOCHS = 8  # turn marks older than this many epochs are dropped (bounded state)


class CallEventKind(enum.Enum):
    USER_TRANSCRIPT = "user_transcript"  # interim or final words of the caller (live)
    USER_TURN = "user_turn"  # the caller's whole turn, as the model gets it
    BOT_TEXT = "bot_text"  # a piece of the bot's reply as it streams
    BOT_DONE = "bot_done"  # the reply of the epoch is complete
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    INTERRUPTED = "interrupted"  # a barge-in: a new epoch began
    BOT_HEARD = "bot_heard"  # a reply cut short: the part the caller heard (what the context keeps)
    LATENCY = "latency"  # the turn's first audio reached the caller
    ERROR = "error"  # a failure the caller should know of (an embedded model refused work: the machine is busy)


@dataclass(frozen=True, slots=True, kw_only=True)
class CallEvent:
    kind: CallEventKind
    epoch: int
    at: float
    data: Mapping[str, Any] = field(default_factory=dict)

    def to_json(self) -> str:
        """The event as one JSON object: ``{"type": "event", "kind", "epoch", "at", ...data}``."""
        body: dict[str, Any] = {"type": "event", "kind": self.kind.value, "epoch": self.epoch,
                                "at": round(self.at, 3)}
        body.update(self.data)
        return json.dumps(body, separators=(",", ":"))

    def __repr__(self) -> str:  # the data holds caller text: never in a log
        return f"CallEvent(kind={self.kind.value}, epoch={self.epoch}, fields={sorted(self.data)})"


EventListener = Callable[[CallEvent], None]


class CallObserver:
    """A bounded, drop-oldest queue of call events (see the module docs).

    ``listener`` (optional) sees every event as it is emitted, before the queue: it is
    for counters that must not lose events to a slow reader (the server's metrics).  It
    runs on the engine's path, so it must be quick and must not raise.
    """

    def __init__(self, capacity: int = DEFAULT_OBSERVER_CAPACITY, listener: EventListener | None = None) -> None:
        if capacity < 1:
            raise ConfigError(f"CallObserver capacity must be >= 1, got {capacity}")
        self._events: deque[CallEvent] = deque(maxlen=capacity)
        self._ready = asyncio.Event()
        self._closed = False
        self._listener = listener
        self.dropped = 0

    def emit(self, event: CallEvent) -> None:
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

    def try_get(self) -> CallEvent | None:
        return self._events.popleft() if self._events else None

    async def get(self) -> CallEvent:
        while not self._events:
            if self._closed:
                raise ChannelClosed("the call observer is closed")
            self._ready.clear()
            await self._ready.wait()
        return self._events.popleft()


def _cut(text: str) -> str:
    return text if len(text) <= MAX_TEXT else text[: MAX_TEXT - 1] + "…"


class _CallState:
    """What both taps of one call share: the speech end of each turn and the context cursor."""

    def __init__(self, observer: CallObserver, context: Context, timeline: TimelineRecorder) -> None:
        self.observer = observer
        self.context = context
        self.timeline = timeline
        self.seen = len(context)
        self.speech_ended: float | None = None
        self.turn_speech_end: dict[int, float] = {}
        self.turn_end: dict[int, UserTurnEnded] = {}
        self.tool_names: dict[str, str] = {}
        self.reported: set[int] = set()
        self.epoch = 0

    def emit(self, kind: CallEventKind, epoch: int, at: float, **data: Any) -> None:
        self.observer.emit(CallEvent(kind=kind, epoch=epoch, at=at, data=data))

    def scan_context(self, epoch: int, at: float) -> None:
        """New context messages since the last scan: the user turn, tool calls, tool results."""
        messages = self.context.messages
        self.seen = min(self.seen, len(messages))
        for message in messages[self.seen:]:
            if isinstance(message, UserMessage):
                self.emit(CallEventKind.USER_TURN, epoch, at, text=_cut(message.text))
            elif isinstance(message, AssistantMessage):
                for call in message.tool_calls:
                    self.tool_names[call.id] = call.name
                    self.emit(CallEventKind.TOOL_CALL, epoch, at, id=call.id, name=call.name,
                              arguments=_cut(json.dumps(call.arguments, separators=(",", ":"))))
            elif isinstance(message, ToolMessage):
                self.emit(CallEventKind.TOOL_RESULT, epoch, at, id=message.call_id,
                          name=self.tool_names.get(message.call_id, ""), outcome=_outcome(message),
                          content=_cut(message.content))
        self.seen = len(messages)

    def forget_before(self, epoch: int) -> None:
        """Drop the turn marks of epochs that never reached audio (cut before the bot spoke)."""
        for marks in (self.turn_end, self.turn_speech_end):
            for old in [e for e in marks if e < epoch]:
                del marks[old]
        self.reported = {e for e in self.reported if e >= epoch}

    def latency(self, epoch: int, at: float) -> None:
        # Only a reply to a turn has a latency (a greeting opens the call unasked).
        if epoch in self.reported or epoch not in self.turn_end:
            return
        self.reported.add(epoch)
        record = self.timeline.get(epoch)
        data: dict[str, float | str] = {}
        speech_end = self.turn_speech_end.pop(epoch, None)
        turn_end = self.turn_end.pop(epoch, None)
        if speech_end is not None:
            data["speech_end_to_audio_ms"] = round((at - speech_end) * 1000.0, 1)
            if turn_end is not None:
                data["speech_end_to_turn_end_ms"] = round((turn_end.at - speech_end) * 1000.0, 1)
        if turn_end is not None:
            data["turn_end_reason"] = turn_end.reason.value
        if record is not None:
            ended, token = record.at(TurnEvent.USER_TURN_ENDED), record.at(TurnEvent.LLM_FIRST_TOKEN)
            if ended is not None:
                data["turn_end_to_audio_ms"] = round((at - ended) * 1000.0, 1)
                if token is not None:
                    data["turn_end_to_first_token_ms"] = round((token - ended) * 1000.0, 1)
        self.emit(CallEventKind.LATENCY, epoch, at, **data)


def _outcome(message: ToolMessage) -> str:
    """``ok``, ``error`` or the status a tool engine answer names (``confirmation_required``, ...)."""
    try:
        body = json.loads(message.content)
    except ValueError:
        body = None
    if isinstance(body, dict):
        for key in ("status", "error"):
            value = body.get(key)
            if isinstance(value, str) and len(value) <= 64:
                return value
    return "error" if message.is_error else "ok"


class ObserverTap(Processor):
    """A pass-through stage that reports what it sees to the call's observer."""

    epoch_policy: ClassVar[EpochPolicy] = EpochPolicy.KEEP_ALL

    def __init__(self, state: _CallState, where: str) -> None:
        self._state = state
        self._where = where

    @classmethod
    def pair(cls, observer: CallObserver, context: Context, timeline: TimelineRecorder) -> tuple[ObserverTap, ObserverTap]:
        """The two taps of one call: after the listen stage, after the LLM runner."""
        state = _CallState(observer, context, timeline)
        return cls(state, "listen"), cls(state, "runner")

    @property
    def name(self) -> str:
        return f"observer-after-{self._where}"

    async def process(self, frame: Frame, direction: Direction, ctx: ProcessorContext) -> None:
        self._observe(frame, ctx.clock.now())
        await ctx.push(frame, direction)

    def _observe(self, frame: Frame, now: float) -> None:
        s = self._state
        epoch = getattr(frame, "epoch", None)
        if isinstance(epoch, int):
            s.epoch = max(s.epoch, epoch)
        if isinstance(frame, TranscriptFrame):
            if frame.text.strip():
                s.emit(CallEventKind.USER_TRANSCRIPT, frame.epoch, now, text=_cut(frame.text), final=frame.is_final)
        elif isinstance(frame, VadStoppedFrame):
            s.speech_ended = frame.at
        elif isinstance(frame, UserTurnEnded):
            s.forget_before(frame.epoch - _KEPT_EPOCHS)
            s.turn_end[frame.epoch] = frame
            if s.speech_ended is not None:
                s.turn_speech_end[frame.epoch] = s.speech_ended
        elif isinstance(frame, LlmTextFrame):
            s.emit(CallEventKind.BOT_TEXT, frame.epoch, now, text=_cut(frame.text), round=frame.round)
        elif isinstance(frame, LlmResponseStarted | LlmResponseEnded):
            s.scan_context(frame.epoch, now)
        elif isinstance(frame, BotResponseDone):
            s.scan_context(frame.epoch, now)
            s.emit(CallEventKind.BOT_DONE, frame.epoch, now)
        elif isinstance(frame, BotAudioStarted):
            s.latency(frame.epoch, frame.at)
        elif isinstance(frame, InterruptFrame):
            s.emit(CallEventKind.INTERRUPTED, frame.new_epoch, now)
        elif isinstance(frame, BotHeardFrame):
            s.emit(CallEventKind.BOT_HEARD, frame.epoch, now, text=_cut(frame.text), round=frame.round)
        elif isinstance(frame, ModelBusyFrame):
            what = "your words could not be transcribed" if frame.stage is BusyStage.STT else "the reply cannot be spoken"
            s.emit(CallEventKind.ERROR, s.epoch, now, code=f"{frame.stage.value}_busy",
                   message=f"{frame.provider} is at capacity: {what}")
        elif isinstance(frame, StopFrame):
            s.scan_context(s.epoch, now)
