"""The per-turn timeline: when each step of a turn happened, for latency metrics.

Every stage marks the events it sees with the time it read from the injected clock;
the first mark of an event in a turn wins (a repeat is counted, never moves it).  A turn
also times each LLM request round on its own (``llm_request`` opens a round,
``llm_first_token`` and ``llm_done`` close its parts), at most :data:`MAX_LLM_ROUNDS`
per turn; later rounds are counted as dropped.  Pure bookkeeping: no clock, no I/O.
Records are kept for the newest ``max_turns`` turns.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

__all__ = ["MAX_LLM_ROUNDS", "LlmRoundMetrics", "TimelineRecorder", "TimelineStats", "TurnEvent", "TurnRecord"]

MAX_LLM_ROUNDS: Final = 32


class TurnEvent(enum.Enum):
    USER_TURN_STARTED = "user_turn_started"
    USER_TURN_ENDED = "user_turn_ended"  # the gated end of turn
    LLM_REQUEST = "llm_request"
    LLM_FIRST_TOKEN = "llm_first_token"
    FIRST_TTS_TEXT = "first_tts_text"
    FIRST_TTS_AUDIO = "first_tts_audio"
    FIRST_AUDIO_SENT = "first_audio_sent"  # handed to the transport
    BOT_AUDIO_STARTED = "bot_audio_started"  # released to the caller
    BOT_AUDIBLE = "bot_audible"  # its first audible sample released (a voice's leading silence skipped)
    BARGE_IN = "barge_in"  # the decision
    CLEAR_APPLIED = "clear_applied"
    FILLER_STARTED = "filler_started"  # the turn's first filler round began


@dataclass(frozen=True, slots=True)
class LlmRoundMetrics:
    round: int
    time_to_first_token: float | None
    duration: float | None


@dataclass(slots=True)
class _Round:
    request: float
    first_token: float | None = None
    done: float | None = None


@dataclass(slots=True)
class TurnRecord:
    epoch: int
    marks: dict[TurnEvent, float] = field(default_factory=dict)
    rounds: list[_Round] = field(default_factory=list)

    def at(self, event: TurnEvent) -> float | None:
        return self.marks.get(event)

    def between(self, start: TurnEvent, end: TurnEvent) -> float | None:
        a, b = self.marks.get(start), self.marks.get(end)
        return None if a is None or b is None else b - a

    def llm_round_count(self) -> int:
        return len(self.rounds)

    def llm_rounds(self) -> list[LlmRoundMetrics]:
        return [self.llm_round(i) for i in range(len(self.rounds))]

    def llm_round(self, i: int) -> LlmRoundMetrics:
        r = self.rounds[i]
        ttft = None if r.first_token is None else r.first_token - r.request
        duration = None if r.done is None else r.done - r.request
        return LlmRoundMetrics(i, ttft, duration)


@dataclass(slots=True)
class TimelineStats:
    recorded: int = 0
    repeated: int = 0
    llm_rounds_dropped: int = 0
    turns_forgotten: int = 0
    late_marks: int = 0  # marks for a turn that was already forgotten (dropped)


class TimelineRecorder:
    def __init__(self, max_turns: int = 64) -> None:
        self._turns: OrderedDict[int, TurnRecord] = OrderedDict()
        self._max = max_turns
        self._forgotten_up_to: int | None = None  # the newest epoch evicted so far
        self.stats = TimelineStats()

    def forgotten(self, epoch: int) -> bool:
        """Whether ``epoch`` is at or below a turn already evicted (its marks are dropped)."""
        return epoch not in self._turns and self._forgotten_up_to is not None and epoch <= self._forgotten_up_to

    def turn(self, epoch: int) -> TurnRecord:
        """The record of ``epoch`` (created when new).  A forgotten turn gets a detached record:
        a late mark never resurrects it and never evicts a newer turn."""
        record = self._turns.get(epoch)
        if record is None:
            record = TurnRecord(epoch)
            if self.forgotten(epoch):
                return record
            self._turns[epoch] = record
            while len(self._turns) > self._max:
                old, _ = self._turns.popitem(last=False)
                if self._forgotten_up_to is None or old > self._forgotten_up_to:
                    self._forgotten_up_to = old
                self.stats.turns_forgotten += 1
        return record

    def get(self, epoch: int) -> TurnRecord | None:
        return self._turns.get(epoch)

    def records(self) -> list[TurnRecord]:
        return list(self._turns.values())

    def mark(self, epoch: int, event: TurnEvent, at: float) -> bool:
        """Record ``event`` of turn ``epoch``; False (and counted) when it was already marked
        or the turn was already forgotten."""
        if self.forgotten(epoch):
            self.stats.late_marks += 1
            return False
        marks = self.turn(epoch).marks
        if event in marks:
            self.stats.repeated += 1
            return False
        marks[event] = at
        self.stats.recorded += 1
        return True

    def llm_request(self, epoch: int, at: float) -> int | None:
        """Open the turn's next request round; None past :data:`MAX_LLM_ROUNDS`."""
        record = self.turn(epoch)
        self.mark(epoch, TurnEvent.LLM_REQUEST, at)
        if len(record.rounds) >= MAX_LLM_ROUNDS:
            self.stats.llm_rounds_dropped += 1
            return None
        record.rounds.append(_Round(at))
        return len(record.rounds) - 1

    def llm_first_token(self, epoch: int, round_: int | None, at: float) -> None:
        self.mark(epoch, TurnEvent.LLM_FIRST_TOKEN, at)
        r = self._round(epoch, round_)
        if r is not None and r.first_token is None:
            r.first_token = at

    def llm_done(self, epoch: int, round_: int | None, at: float) -> None:
        r = self._round(epoch, round_)
        if r is not None and r.done is None:
            r.done = at

    def _round(self, epoch: int, round_: int | None) -> _Round | None:
        record = self._turns.get(epoch)
        if record is None or round_ is None or not 0 <= round_ < len(record.rounds):
            return None
        return record.rounds[round_]
