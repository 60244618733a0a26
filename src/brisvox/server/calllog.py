"""The calls a server process is serving and has served, turn by turn: what ``/calls`` shows.

A :class:`CallTimeline` is built from one call's typed engine events (``brisvox.engine.events``),
as they are emitted: each turn's start, the end of the caller's speech, the turn's end and why,
the LLM rounds (request and first token), the first audible audio, whether the reply was cut
and what the caller heard of each cut round (the ``BotHeard`` text the context keeps and the
seconds of audio it covers), the tool calls (name, kind, start, end, outcome: never arguments
or results) and fillers.  What the bot says before the caller's first turn (epoch 0: the
greeting, or an agent's first line) is a row of its own, opened by its first text
(``BotText``), as no ``TurnStarted`` opens it: a caller who talks over the greeting cuts that
row.  Times
are seconds since the call started, on the engine's clock.  :class:`CallLog` keeps the live
calls and the newest ended ones (:data:`KEEP_ENDED`), bounded, and gives them as JSON-ready
dicts: a summary per call (``/calls``, ``brisvox tail``) and one call's turns (``/calls/<id>``).
Pure: no clock, no I/O; the caller passes the times.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from brisvox.engine import events as ev

__all__ = ["KEEP_ENDED", "LATENCY_BUDGET", "MAX_TOOL_BARS", "MAX_TURNS", "CallLog", "CallTimeline", "TurnRow"]

KEEP_ENDED = 50
"""Ended calls kept for ``/calls``, newest first."""
MAX_TURNS = 500
"""Turns kept per call (the newest)."""
MAX_TOOL_BARS = 32
"""Tool calls kept per turn."""
_MAX_HEARD = 32  # cut rounds kept per turn (a turn has a handful of rounds)

LATENCY_BUDGET: dict[str, float] = {"turn_detection": 0.5, "llm_first_token": 0.6, "first_audio": 0.3}
"""Seconds per stage of a turn that brisvox aims at (1.4 s from the end of speech to the first
audible reply): the timeline marks a stage over its budget."""


@dataclass(slots=True)
class _Tool:
    call_id: str
    name: str
    kind: str | None
    started: float
    settled: float | None = None
    outcome: str | None = None
    is_error: bool = False


@dataclass(slots=True)
class _Round:
    requested: float
    first_token: float | None
    ended: float
    model: str
    failed: bool


@dataclass(frozen=True, slots=True)
class _Heard:
    round: int
    text: str
    played: float


@dataclass(slots=True)
class TurnRow:
    """One turn of a call (times in seconds since the call started)."""

    epoch: int
    started: float
    barge_in: bool = False
    greeting: bool = False  # epoch 0: the bot spoke before the caller's first turn
    speech_ended: float | None = None
    ended: float | None = None
    reason: str | None = None
    rounds: list[_Round] = field(default_factory=list)
    first_audio: float | None = None
    cut: float | None = None  # when the caller cut the reply (the heard position's report)
    heard: list[_Heard] = field(default_factory=list)  # what the context keeps of each cut round
    tools: list[_Tool] = field(default_factory=list)
    fillers: list[float] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)

    def stages(self) -> dict[str, float | None]:
        """Each stage's duration (seconds; None: not reached)."""
        first_token = next((r.first_token for r in self.rounds if r.first_token is not None), None)
        return {
            "turn_detection": _span(self.speech_ended, self.ended),
            "llm_first_token": _span(self.ended, first_token),
            "first_audio": _span(first_token, self.first_audio),
            "turn_end_to_audio": _span(self.ended, self.first_audio),
            "voice_to_voice": _span(self.speech_ended, self.first_audio),
        }

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch, "started": _ms(self.started), "barge_in": self.barge_in, "greeting": self.greeting,
            "speech_ended": _ms(self.speech_ended), "ended": _ms(self.ended), "reason": self.reason,
            "rounds": [{"requested": _ms(r.requested), "first_token": _ms(r.first_token), "ended": _ms(r.ended),
                        "model": r.model, "failed": r.failed} for r in self.rounds],
            "first_audio": _ms(self.first_audio), "cut": _ms(self.cut),
            "heard": [{"round": h.round, "text": h.text, "played": _ms(h.played)} for h in self.heard],
            "tools": [{"name": t.name, "kind": t.kind, "started": _ms(t.started), "settled": _ms(t.settled),
                       "outcome": t.outcome, "error": t.is_error} for t in self.tools],
            "fillers": [_ms(f) for f in self.fillers], "failures": list(self.failures),
            "stages": {k: _ms(v) for k, v in self.stages().items()},
        }


def _span(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None else max(0.0, b - a)


def _ms(t: float | None) -> float | None:
    return None if t is None else round(t, 3)


class CallTimeline:
    """One call's turns, from its engine events (see the module docs)."""

    __slots__ = ("_start", "_turns", "call_id", "ended_at", "outcome", "started_wall", "transport")

    def __init__(self, call_id: str, transport: str, started_wall: str, start: float) -> None:
        self.call_id = call_id
        self.transport = transport
        self.started_wall = started_wall
        self._start = start
        self._turns: OrderedDict[int, TurnRow] = OrderedDict()
        self.ended_at: float | None = None
        self.outcome: str | None = None

    def add(self, event: ev.EngineEvent) -> None:
        """Take one engine event (events of a turn that scrolled out of the kept ones are ignored)."""
        t = event.at - self._start
        if isinstance(event, ev.TurnStarted):
            self._turns[event.epoch] = TurnRow(event.epoch, t, barge_in=event.barge_in)
            while len(self._turns) > MAX_TURNS:
                self._turns.popitem(last=False)
            return
        row = self._turns.get(event.epoch)
        if row is None:
            if event.epoch != 0 or not isinstance(event, ev.BotText) or self._turns:
                return
            row = self._turns[0] = TurnRow(0, t, greeting=True)
        if isinstance(event, ev.TurnEnded):
            row.ended, row.reason = t, event.reason.value
            row.speech_ended = None if event.speech_ended is None else event.speech_ended - self._start
        elif isinstance(event, ev.LlmRound):
            row.rounds.append(_Round(event.requested - self._start,
                                     None if event.first_token is None else event.first_token - self._start,
                                     t, event.model, event.failed))
        elif isinstance(event, ev.BotAudible):
            if row.first_audio is None:
                row.first_audio = t
        elif isinstance(event, ev.BotHeard):
            row.cut = t
            if len(row.heard) < _MAX_HEARD:
                row.heard.append(_Heard(event.round, event.text, event.played))
        elif isinstance(event, ev.ToolCallStarted):
            if len(row.tools) < MAX_TOOL_BARS:
                row.tools.append(_Tool(event.call_id, event.name, event.kind.value if event.kind else None, t))
        elif isinstance(event, ev.ToolCallSettled):
            for tool in row.tools:
                if tool.call_id == event.call_id and tool.settled is None:
                    tool.settled, tool.outcome, tool.is_error = t, event.outcome.value, event.is_error
        elif isinstance(event, ev.FillerStarted):
            row.fillers.append(t)
        elif isinstance(event, ev.EngineFailure):
            row.failures.append(f"{event.stage}: {event.error}")

    def end(self, at: float, outcome: str) -> None:
        self.ended_at, self.outcome = at - self._start, outcome

    @property
    def live(self) -> bool:
        return self.ended_at is None

    @property
    def turns(self) -> list[TurnRow]:
        return list(self._turns.values())

    def summary(self) -> dict[str, Any]:
        last = next(reversed(self._turns.values()), None)
        return {"call_id": self.call_id, "transport": self.transport, "started": self.started_wall,
                "live": self.live, "outcome": self.outcome, "duration": _ms(self.ended_at), "turns": len(self._turns),
                "last_turn": last.to_json() if last is not None else None}

    def to_json(self) -> dict[str, Any]:
        return {**self.summary(), "budget": LATENCY_BUDGET, "turn_rows": [row.to_json() for row in self._turns.values()]}


class CallLog:
    """The live calls and the newest :data:`KEEP_ENDED` ended ones (see the module docs)."""

    def __init__(self, keep_ended: int = KEEP_ENDED) -> None:
        self._live: dict[str, CallTimeline] = {}
        self._ended: OrderedDict[str, CallTimeline] = OrderedDict()
        self._keep = keep_ended

    def open(self, call_id: str, transport: str, started_wall: str, start: float) -> CallTimeline:
        timeline = CallTimeline(call_id, transport, started_wall, start)
        self._live[call_id] = timeline
        return timeline

    def close(self, call_id: str, at: float, outcome: str) -> None:
        timeline = self._live.pop(call_id, None)
        if timeline is None:
            return
        timeline.end(at, outcome)
        self._ended[call_id] = timeline
        while len(self._ended) > self._keep:
            self._ended.popitem(last=False)

    def get(self, call_id: str) -> CallTimeline | None:
        return self._live.get(call_id) or self._ended.get(call_id)

    def summaries(self) -> list[dict[str, Any]]:
        """Live calls first, then the ended ones, newest first."""
        return [t.summary() for t in (*self._live.values(), *reversed(self._ended.values()))]
