"""The turn-taking state machine: when has the caller finished, and when do they barge in?

:class:`TurnMachine` is pure and synchronous.  Every input carries its time (float
seconds of the caller's clock); the machine reads no clock, does no I/O and owns no task.
``handle(input)`` returns the actions the caller must carry out, in order (the inputs and
actions are in :mod:`brisvox.agent.turn_io`).

States: ``IDLE``, ``USER_SPEAKING``, ``USER_PAUSED`` (a candidate end of turn),
``AWAITING_RESPONSE``, ``BOT_SPEAKING`` and the terminal ``CLOSED``.  A VAD start while
the bot is answering is a barge-in *candidate* held beside the state and judged by the
:class:`~brisvox.agent.interrupt.InterruptionPolicy`; the default (disabled) policy
confirms it at once.

Policies: :class:`FixedSilence` (the turn ends ``silence`` after the backdated VAD stop)
and :class:`Adaptive` (a Smart Turn verdict per stop, STT finals, ``require_final``,
``final_grace``, a punctuated final ending the pause when it comes but not before
``punctuated_grace`` after the stop, no early end within ``min_pause`` of the stop, and a
fallback deadline, held for a pause's own final up to ``final_timeout`` with ``require_final``).

A turn that ends before its last STT final (the fallback beat a slow STT) is completed by
that final when it brings words and the caller is silent: a turn in the next epoch, ended at
once with the same reason (see ``_late_final``; ``owes_ended_turn`` tells the caller whose
words the next final carries).

The machine has one timer slot (:class:`ArmTimer` replaces, :class:`CancelTimer` clears;
nothing is emitted when the desired deadline is unchanged).  No input raises: deadlines
are clamped (see :func:`brisvox.agent._deadline.clamped_after`).  Inputs with no legal
transition change nothing and are counted per kind in :class:`TurnStats`.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from brisvox.agent._deadline import clamped_after
from brisvox.agent.interrupt import Assessment, Guard, InterruptionPolicy, Observation, TextKind
from brisvox.agent.turn_io import (
    ArmTimer,
    BotAudioEnded,
    BotAudioStarted,
    BotOpens,
    BotTurn,
    CancelTimer,
    EndReason,
    EndUserTurn,
    Hangup,
    InputKind,
    Interrupt,
    RequestAnalysis,
    StartBotTurn,
    StartUserTurn,
    SttFinal,
    SttInterim,
    Tick,
    TurnAction,
    TurnInput,
    UserText,
    VadStart,
    VadStop,
    Verdict,
)
from brisvox.core.errors import ConfigError, InvalidInput

__all__ = [
    "DEFAULT_FALLBACK_SILENCE",
    "DEFAULT_FINAL_GRACE",
    "DEFAULT_FINAL_TIMEOUT",
    "DEFAULT_MIN_PAUSE",
    "DEFAULT_PUNCTUATED_GRACE",
    "Adaptive",
    "AnalysisState",
    "ArmTimer",
    "BargeInCandidate",
    "BotAudioEnded",
    "BotAudioStarted",
    "BotOpens",
    "BotTurn",
    "CancelTimer",
    "EndReason",
    "EndUserTurn",
    "FixedSilence",
    "Hangup",
    "InputKind",
    "Interrupt",
    "Pause",
    "RequestAnalysis",
    "StartBotTurn",
    "StartUserTurn",
    "SttFinal",
    "SttInterim",
    "Tick",
    "TurnAction",
    "TurnInput",
    "TurnMachine",
    "TurnPolicy",
    "TurnState",
    "TurnStats",
    "UserText",
    "VadStart",
    "VadStop",
    "Verdict",
    "ends_sentence",
]

_log = logging.getLogger(__name__)

DEFAULT_FALLBACK_SILENCE = 3.0
DEFAULT_FINAL_GRACE = 0.8
# The shortest pause (from the stop) that a final ending a sentence ends: the final itself
# comes a decode after the stop (Whisper), and a caller who goes on resumes the pause whenever
# the final comes, so the wait is counted from the stop (docs/DEMO.md measures what it saves).
DEFAULT_PUNCTUATED_GRACE = 0.3
# The shortest pause (from the end of speech) that Smart Turn's "complete" or a punctuated
# final may end: a caller's breath inside a request ("A table for two, tomorrow at seven |
# please") lasts 0.2-0.4 s, and the VAD reports the resumed speech about 0.1 s after it
# starts.  LiveKit's min_endpointing_delay is 0.5 s; docs/TURN_TAKING.md measures the cost.
DEFAULT_MIN_PAUSE = 0.5
# With require_final, how long after the stop a pause waits for its own final when the
# fallback (or the grace after "complete") comes first: a turn ended without it is answered
# on part of the request, and the late final then replaces that answer after the caller heard
# some of it.  Whisper's final took up to about 3.5 s on the busy demo machine (docs/DEMO.md).
DEFAULT_FINAL_TIMEOUT = 6.0


class TurnState(enum.Enum):
    IDLE = "idle"
    USER_SPEAKING = "user_speaking"
    USER_PAUSED = "user_paused"
    AWAITING_RESPONSE = "awaiting_response"
    BOT_SPEAKING = "bot_speaking"
    CLOSED = "closed"


class AnalysisState(enum.Enum):
    """The Smart Turn progress of a pause."""

    NOT_REQUESTED = "not_requested"
    PENDING = "pending"
    INCOMPLETE = "incomplete"
    COMPLETE = "complete"


# --- policies -----------------------------------------------------------------------------


def _duration(owner: str, name: str, value: float) -> None:
    if math.isnan(value) or value < 0:
        raise ConfigError(f"{owner}: {name} must be a duration >= 0 s, got {value!r}")


@dataclass(frozen=True, slots=True)
class FixedSilence:
    """The turn ends ``silence`` seconds after the (backdated) VAD stop."""

    silence: float = 0.8

    def __post_init__(self) -> None:
        _duration("FixedSilence", "silence", self.silence)


@dataclass(frozen=True, slots=True)
class Adaptive:
    """Smart Turn verdicts plus STT finals, bounded by ``fallback_silence``.

    ``final_grace``: with ``require_final``, how long after a complete verdict the turn waits
    for the pause's final.  ``punctuated_grace``: a final that ends a sentence (``. ? ! …``) ends
    the pause when it comes, but no sooner than this after the stop (counted from the stop, not
    the final: the VAD hears a caller who goes on whenever the final comes), when Smart Turn has
    not called it complete; an unpunctuated final waits for the verdict or the fallback.  ``min_pause``: no turn ends
    on a verdict or a punctuated final sooner than this after the (backdated) VAD stop, so a
    caller who draws breath inside a request keeps the turn (only the fallback ends sooner,
    when it is shorter).  ``final_timeout`` (only with ``require_final``): a pause whose own
    final has not come does not end on the fallback or the grace after "complete" but waits
    for it, ending when it comes, up to this long after the stop (0: no wait).
    """

    fallback_silence: float = DEFAULT_FALLBACK_SILENCE
    require_final: bool = False
    final_grace: float = DEFAULT_FINAL_GRACE
    punctuated_grace: float = DEFAULT_PUNCTUATED_GRACE
    min_pause: float = DEFAULT_MIN_PAUSE
    final_timeout: float = DEFAULT_FINAL_TIMEOUT

    def __post_init__(self) -> None:
        _duration("Adaptive", "fallback_silence", self.fallback_silence)
        _duration("Adaptive", "final_grace", self.final_grace)
        _duration("Adaptive", "punctuated_grace", self.punctuated_grace)
        _duration("Adaptive", "min_pause", self.min_pause)
        _duration("Adaptive", "final_timeout", self.final_timeout)


TurnPolicy = FixedSilence | Adaptive


_CANCEL = CancelTimer()
_INF = math.inf
_AWAITING = TurnState.AWAITING_RESPONSE
_BOT_SPEAKING = TurnState.BOT_SPEAKING


# --- read-only views ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Pause:
    """A snapshot of the open pause (state ``USER_PAUSED``)."""

    stop_at: float
    analysis: AnalysisState
    analysis_id: int | None
    final_at: float | None
    final_punctuated: bool
    deadline: float
    reason: EndReason


@dataclass(frozen=True, slots=True)
class BargeInCandidate:
    """A snapshot of the pending barge-in candidate."""

    started: float
    words: int
    text: TextKind
    recheck_at: float | None
    detached: bool


class TurnStats:
    """Counters: ignored inputs per kind, and the life of barge-in candidates."""

    __slots__ = ("_ignored", "_vetoed", "candidates", "confirmed", "dropped", "promoted")

    def __init__(self) -> None:
        self._ignored = dict.fromkeys(InputKind, 0)
        self._vetoed = dict.fromkeys(Guard, 0)
        self.candidates = 0
        self.confirmed = 0
        self.promoted = 0
        self.dropped = 0

    def ignored(self, kind: InputKind) -> int:
        return self._ignored[kind]

    @property
    def total_ignored(self) -> int:
        return sum(self._ignored.values())

    def vetoed(self, reason: Guard) -> int:
        return self._vetoed[reason]

    @property
    def total_vetoed(self) -> int:
        return sum(self._vetoed.values())

    def __repr__(self) -> str:
        ignored = {k.value: v for k, v in self._ignored.items() if v}
        vetoed = {k.value: v for k, v in self._vetoed.items() if v}
        return (
            f"TurnStats(ignored={ignored}, candidates={self.candidates}, confirmed={self.confirmed}, "
            f"promoted={self.promoted}, vetoed={vetoed}, dropped={self.dropped})"
        )


def ends_sentence(text: str) -> bool:
    """True when the last non-whitespace character is ``.``, ``?``, ``!`` or ``…``."""
    stripped = text.rstrip()
    return bool(stripped) and stripped[-1] in ".?!…"


# --- internal state -----------------------------------------------------------------------


class _Pause:
    __slots__ = ("analysis", "analysis_id", "deadline", "final_at", "final_punctuated", "reason",
                 "stop_at", "verdict_at")

    def __init__(self, stop_at: float) -> None:
        self.stop_at = stop_at
        self.analysis = AnalysisState.NOT_REQUESTED
        self.analysis_id: int | None = None
        self.verdict_at = 0.0
        self.final_at: float | None = None
        self.final_punctuated = False
        self.deadline = stop_at
        self.reason = EndReason.FALLBACK


class _Candidate:
    __slots__ = ("detached", "recheck_at", "started", "text", "words")

    def __init__(self, started: float) -> None:
        self.started = started
        self.words = 0
        self.text = TextKind.NONE
        self.recheck_at: float | None = None
        self.detached = False


_Handler = Callable[["TurnMachine", Any, list[TurnAction]], bool]


class TurnMachine:
    """The pure turn-taking machine (see the module docs)."""

    __slots__ = ("_analysis_seq", "_bot_audio_last", "_bot_audio_since", "_candidate", "_epoch",
                 "_interruption", "_late_owed", "_late_reason", "_late_skip", "_owed_finals", "_pause",
                 "_policy", "_started_once", "_state", "_stats", "_timer", "_turn_stops")

    def __init__(
        self,
        policy: TurnPolicy | None = None,
        interruption: InterruptionPolicy | None = None,
    ) -> None:
        self._policy: TurnPolicy = policy if policy is not None else Adaptive()
        self._interruption = interruption if interruption is not None else InterruptionPolicy.disabled()
        self._state = TurnState.IDLE
        self._epoch = 0
        self._started_once = False
        self._timer: float | None = None
        self._pause: _Pause | None = None
        self._candidate: _Candidate | None = None
        self._owed_finals = 0
        self._turn_stops = 0  # VAD stops of the turn in progress
        # The turn that ended before its finals came (a fallback deadline beat a slow STT):
        # the next ``_late_skip`` finals answer older stops, the ``_late_owed`` after them are its.
        self._late_owed = 0
        self._late_skip = 0
        self._late_reason = EndReason.FALLBACK
        self._analysis_seq = 0
        self._bot_audio_since: float | None = None  # start of the echo window
        self._bot_audio_last: float | None = None  # latest BotAudioStarted of the epoch
        self._stats = TurnStats()

    # --- views -----------------------------------------------------------------------

    @property
    def state(self) -> TurnState:
        return self._state

    @property
    def epoch(self) -> int:
        return self._epoch

    @property
    def policy(self) -> TurnPolicy:
        return self._policy

    @property
    def interruption(self) -> InterruptionPolicy:
        return self._interruption

    @property
    def stats(self) -> TurnStats:
        return self._stats

    @property
    def timer(self) -> float | None:
        """The armed deadline, if any."""
        return self._timer

    @property
    def owed_finals(self) -> int:
        """VAD stops whose STT final has not arrived yet."""
        return self._owed_finals

    @property
    def owes_ended_turn(self) -> bool:
        """Whether the next STT final belongs to the user turn that ended last (it ended before
        that final came) and no later turn has started: its words are that turn's."""
        return self._late_owed > 0 and self._late_skip == 0

    @property
    def pause(self) -> Pause | None:
        p = self._pause
        if p is None:
            return None
        return Pause(p.stop_at, p.analysis, p.analysis_id, p.final_at, p.final_punctuated, p.deadline, p.reason)

    @property
    def barge_in_candidate(self) -> BargeInCandidate | None:
        c = self._candidate
        if c is None:
            return None
        return BargeInCandidate(c.started, c.words, c.text, c.recheck_at, c.detached)

    # --- entry point -----------------------------------------------------------------

    def handle(self, inp: TurnInput) -> list[TurnAction]:
        """Apply one input; return the actions to carry out, in order.

        Never raises for a turn input: an input out of step, or one whose time is NaN or
        infinite, changes nothing and is counted in :attr:`stats`.
        """
        out: list[TurnAction] = []
        handler = _DISPATCH.get(type(inp))
        if handler is None:
            raise InvalidInput(f"not a turn input: {type(inp).__name__}")
        # A time that is NaN or infinite has no legal transition anywhere.
        if not (-_INF < inp.at < _INF and handler(self, inp, out)):
            self._stats._ignored[inp.kind] += 1
            _log.debug("turn machine ignored %s in %s", inp.kind.value, self._state.value)
            return out
        # The one timer slot follows the pause or the candidate.
        if self._pause is not None:
            want: float | None = self._pause.deadline
        elif self._candidate is not None:
            want = self._candidate.recheck_at
        else:
            want = None
        if want != self._timer:
            if want is None:
                out.append(_CANCEL)
            else:
                out.append(ArmTimer(want))
            self._timer = want
        return out

    # --- helpers ---------------------------------------------------------------------

    def _start_turn(self, at: float, out: list[TurnAction], *, interrupt: bool) -> None:
        if self._started_once or interrupt:
            self._epoch += 1
        self._started_once = True
        self._bot_audio_since = None
        self._bot_audio_last = None
        self._turn_stops = 0
        self._late_owed = self._late_skip = 0  # a late final now joins the turn in progress
        if interrupt:
            out.append(Interrupt(self._epoch))
        out.append(StartUserTurn(self._epoch, at))

    def _end_turn(self, at: float, reason: EndReason, out: list[TurnAction]) -> None:
        self._pause = None
        self._state = TurnState.AWAITING_RESPONSE
        # Finals still owed answer the stops in order: the last of them are this turn's.
        own = min(self._owed_finals, self._turn_stops)
        self._late_owed, self._late_skip, self._late_reason = own, self._owed_finals - own, reason
        out.append(EndUserTurn(self._epoch, reason, at))

    def _late_final(self, inp: SttFinal, out: list[TurnAction]) -> None:
        """A final of the turn that ended before it came.  With words, and the caller silent
        (no turn, no barge-in candidate), it completes that turn: a turn in the next epoch,
        ended at once with the ended turn's reason, that replaces the answer to the shorter
        transcript (``Interrupt`` while that answer is pending or playing).  Otherwise (no
        words, or the caller is talking) it is consumed and its words join the next turn."""
        self._late_owed -= 1
        state = self._state
        if not inp.text.strip() or self._candidate is not None or not (
            state is TurnState.IDLE or state is _AWAITING or state is _BOT_SPEAKING
        ):
            return
        remaining, reason = self._late_owed, self._late_reason
        self._start_turn(inp.at, out, interrupt=state is not TurnState.IDLE)
        self._end_turn(inp.at, reason, out)
        self._late_owed, self._late_skip = remaining, 0  # finals still to come are this turn's too

    def _observe(self, c: _Candidate, now: float) -> Observation:
        since = None if c.detached or self._state is not TurnState.BOT_SPEAKING else self._bot_audio_since
        return Observation(c.started, now, c.words, c.text, since)

    def _judge(self, now: float, out: list[TurnAction]) -> None:
        """Ask the policy about the live candidate; resolve it when confirmed."""
        c = self._candidate
        assert c is not None
        verdict: Assessment = self._interruption.assess(self._observe(c, now))
        if verdict.confirmed:
            self._resolve(c, out)
        else:
            c.recheck_at = verdict.recheck_at

    def _resolve(self, c: _Candidate, out: list[TurnAction]) -> None:
        """The candidate becomes a user turn: a barge-in, or (detached) a plain turn."""
        self._candidate = None
        if c.detached:
            self._stats.promoted += 1
            self._start_turn(c.started, out, interrupt=False)
        else:
            self._stats.confirmed += 1
            self._start_turn(c.started, out, interrupt=True)
        self._state = TurnState.USER_SPEAKING

    def _open_pause(self, stop_at: float, out: list[TurnAction]) -> None:
        pause = _Pause(stop_at)
        self._owed_finals += 1
        self._turn_stops += 1
        self._pause = pause
        self._state = TurnState.USER_PAUSED
        if isinstance(self._policy, Adaptive):
            self._analysis_seq += 1
            pause.analysis = AnalysisState.PENDING
            pause.analysis_id = self._analysis_seq
            out.append(RequestAnalysis(self._analysis_seq, self._epoch))
        self._update_deadline(pause)

    def _update_deadline(self, p: _Pause) -> None:
        policy = self._policy
        if isinstance(policy, FixedSilence):
            p.deadline = clamped_after(p.stop_at, policy.silence)
            p.reason = EndReason.FIXED_SILENCE
            return
        fallback = clamped_after(p.stop_at, policy.fallback_silence)
        floor = clamped_after(p.stop_at, policy.min_pause)  # no earlier end but the fallback
        p.deadline, p.reason = fallback, EndReason.FALLBACK
        if p.analysis is AnalysisState.COMPLETE:
            if policy.require_final and p.final_at is None:
                # Waiting for this pause's final, at most final_grace after the verdict.
                grace = max(clamped_after(p.verdict_at, policy.final_grace), floor)
                p.deadline = min(grace, fallback)
                p.reason = EndReason.FINAL_GRACE
            elif floor <= fallback:
                p.deadline, p.reason = floor, EndReason.VERDICT
        elif p.final_at is not None and p.final_punctuated:
            # Counted from the stop, not from the final: a caller who goes on is heard by the
            # VAD whenever the final comes, so a wait after a late final only added its length
            # to the turn (0.3 s of every such turn on the demo machine, docs/DEMO.md).
            grace = max(p.final_at, clamped_after(p.stop_at, policy.punctuated_grace), floor)
            if grace < fallback:
                p.deadline, p.reason = grace, EndReason.STT_PUNCTUATION
        if policy.require_final and p.final_at is None:
            # The words are not in yet: hold the end for the final (see final_timeout).
            p.deadline = max(p.deadline, clamped_after(p.stop_at, policy.final_timeout))

    def _complete(self, p: _Pause, at: float, out: list[TurnAction]) -> None:
        """Smart Turn called the pause complete (and the final it waits for is in): the turn
        ends now, or at the end of the minimum pause."""
        self._update_deadline(p)
        if p.reason is EndReason.VERDICT and at >= p.deadline:
            self._end_turn(at, EndReason.VERDICT, out)

    # --- handlers (return False: ignored and counted) ------------------------------------

    def _on_vad_start(self, inp: VadStart, out: list[TurnAction]) -> bool:
        state = self._state
        if state is TurnState.IDLE:
            if self._candidate is not None:
                return False  # a duplicate start of a detached candidate
            self._start_turn(inp.at, out, interrupt=False)
            self._state = TurnState.USER_SPEAKING
            return True
        if state is TurnState.USER_PAUSED:
            self._pause = None  # resume the same turn; a pending verdict is now stale
            self._state = TurnState.USER_SPEAKING
            return True
        if state is TurnState.AWAITING_RESPONSE or state is TurnState.BOT_SPEAKING:
            if self._candidate is not None:
                return False
            self._stats.candidates += 1
            self._candidate = _Candidate(inp.at)
            self._judge(inp.at, out)
            return True
        return False

    def _on_vad_stop(self, inp: VadStop, out: list[TurnAction]) -> bool:
        if self._state is TurnState.USER_SPEAKING:
            self._open_pause(inp.at, out)
            return True
        c = self._candidate
        if c is None or self._state is TurnState.CLOSED:
            return False
        verdict = self._interruption.assess_at_stop(self._observe(c, inp.at))
        if verdict.confirmed:
            self._resolve(c, out)
            self._open_pause(inp.at, out)
        else:
            assert verdict.blocked_by is not None
            self._candidate = None
            self._owed_finals += 1  # STT still finalizes this utterance
            self._stats._vetoed[verdict.blocked_by] += 1
            _log.debug("barge-in candidate vetoed by %s", verdict.blocked_by.value)
        return True

    def _on_interim(self, inp: SttInterim, out: list[TurnAction]) -> bool:
        state = self._state
        if state is TurnState.USER_SPEAKING or state is TurnState.USER_PAUSED:
            return True
        c = self._candidate
        if c is None:
            return False
        kind, words = self._interruption.classify(inp.text)
        c.text = kind
        if words > c.words:
            c.words = words
        self._judge(inp.at, out)
        return True

    def _on_final(self, inp: SttFinal, out: list[TurnAction]) -> bool:
        if self._state is TurnState.CLOSED or self._owed_finals == 0:
            return False
        self._owed_finals -= 1
        p = self._pause
        if p is None and self._late_skip > 0:
            self._late_skip -= 1  # answers a stop older than the ended turn: consumed, no effect
            return True
        if p is None and self._late_owed > 0:
            self._late_final(inp, out)
            return True
        if p is None or self._owed_finals != 0:
            return True  # answers an earlier stop: consumed, no effect
        p.final_at = inp.at
        p.final_punctuated = ends_sentence(inp.text)
        if p.analysis is AnalysisState.COMPLETE:
            self._complete(p, inp.at, out)  # require_final was waiting for it
            return True
        self._update_deadline(p)
        if inp.at >= p.deadline:  # a held pause: the fallback passed while the final was owed
            self._end_turn(inp.at, p.reason, out)
        return True

    def _on_verdict(self, inp: Verdict, out: list[TurnAction]) -> bool:
        p = self._pause
        if p is None or p.analysis is not AnalysisState.PENDING or p.analysis_id != inp.analysis:
            return False
        policy = self._policy
        assert isinstance(policy, Adaptive)
        if not inp.complete:
            p.analysis = AnalysisState.INCOMPLETE
            self._update_deadline(p)
            return True
        p.analysis = AnalysisState.COMPLETE
        p.verdict_at = inp.at
        self._complete(p, inp.at, out)
        return True

    def _on_tick(self, inp: Tick, out: list[TurnAction]) -> bool:
        p = self._pause
        if p is not None:
            self._timer = None  # consumed; re-armed below if early
            if inp.at >= p.deadline:
                self._end_turn(inp.at, p.reason, out)
            return True
        c = self._candidate
        if c is None:
            return False
        self._timer = None
        self._judge(inp.at, out)
        return True

    def _on_bot_started(self, inp: BotAudioStarted, out: list[TurnAction]) -> bool:
        # Hot path: with per-chunk reporting this runs every 20 ms of bot audio.
        if inp.epoch != self._epoch:
            return False
        state = self._state
        at = inp.at
        if state is _BOT_SPEAKING:
            last = self._bot_audio_last
            if last is not None:
                if at <= last:
                    return True  # a repeated or older report changes nothing
                self._bot_audio_last = at
                guard = self._interruption.echo_guard
                if guard == 0 or at - last < guard:
                    return True  # the same burst: the echo window stays where it is
            self._bot_audio_since = self._bot_audio_last = at  # audio resumed after a real gap
        elif state is _AWAITING:
            self._bot_audio_since = self._bot_audio_last = at
            self._state = _BOT_SPEAKING
        else:
            return False
        if self._candidate is not None:
            self._judge(at, out)  # the echo window (re)started
        return True

    def _on_bot_ended(self, inp: BotAudioEnded, out: list[TurnAction]) -> bool:
        state = self._state
        if inp.epoch != self._epoch or not (
            state is TurnState.AWAITING_RESPONSE or state is TurnState.BOT_SPEAKING
        ):
            return False
        self._state = TurnState.IDLE
        self._bot_audio_since = None
        self._bot_audio_last = None
        if self._candidate is not None:
            self._candidate.detached = True
        return True

    def _on_user_text(self, inp: UserText, out: list[TurnAction]) -> bool:
        state = self._state
        c = self._candidate
        if c is not None:
            self._resolve(c, out)  # the caller adds the text to that turn
            return True
        if state is TurnState.IDLE:
            self._start_turn(inp.at, out, interrupt=False)
        elif state is TurnState.AWAITING_RESPONSE or state is TurnState.BOT_SPEAKING:
            self._start_turn(inp.at, out, interrupt=True)
        else:
            return False
        self._end_turn(inp.at, EndReason.TEXT, out)
        return True

    def _on_bot_opens(self, inp: BotOpens, out: list[TurnAction]) -> bool:
        if self._state is not TurnState.IDLE or self._started_once or self._candidate is not None:
            return False
        self._started_once = True  # the caller's first turn takes the next epoch
        self._state = TurnState.AWAITING_RESPONSE
        return True

    def bot_turn_possible(self, interrupt: bool) -> bool:
        """Whether a :class:`BotTurn` with ``interrupt`` would start a bot turn now."""
        state = self._state
        return self._candidate is None and (
            state is TurnState.IDLE or (interrupt and (state is _AWAITING or state is _BOT_SPEAKING)))

    def _on_bot_turn(self, inp: BotTurn, out: list[TurnAction]) -> bool:
        state = self._state
        if not self.bot_turn_possible(inp.interrupt):
            return False
        self._epoch += 1
        self._started_once = True
        self._bot_audio_since = self._bot_audio_last = None
        if state is not TurnState.IDLE:
            out.append(Interrupt(self._epoch))
        out.append(StartBotTurn(self._epoch))
        self._state = _AWAITING
        return True

    def _on_hangup(self, inp: Hangup, out: list[TurnAction]) -> bool:
        state = self._state
        if state is TurnState.CLOSED:
            return False
        if state is TurnState.USER_SPEAKING or state is TurnState.USER_PAUSED:
            out.append(EndUserTurn(self._epoch, EndReason.HANGUP, inp.at))
        if self._candidate is not None:
            self._stats.dropped += 1
            self._candidate = None
        self._pause = None
        self._state = TurnState.CLOSED
        return True


# Handlers by input type (plain functions: no per-machine bound methods, no reference cycle).
_DISPATCH: dict[type, _Handler] = {
    VadStart: TurnMachine._on_vad_start,
    VadStop: TurnMachine._on_vad_stop,
    SttInterim: TurnMachine._on_interim,
    SttFinal: TurnMachine._on_final,
    Verdict: TurnMachine._on_verdict,
    Tick: TurnMachine._on_tick,
    BotAudioStarted: TurnMachine._on_bot_started,
    BotAudioEnded: TurnMachine._on_bot_ended,
    UserText: TurnMachine._on_user_text,
    Hangup: TurnMachine._on_hangup,
    BotOpens: TurnMachine._on_bot_opens,
    BotTurn: TurnMachine._on_bot_turn,
}
