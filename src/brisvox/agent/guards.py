"""Claim guards for speech-to-speech models that own the conversation.

A speech-to-speech model decides what to say and when to call a tool, and it can say
things that are false: "I texted you the link" while nothing was sent, or "let me check"
while no tool call ever ran.  Each send and each tool call goes through brisvox, so brisvox
knows the facts; these guards hand those facts back to the model.  They never mute or
rewrite speech (the caller would hear nothing and still wait).

* :class:`DeliveryClaimGuard`: a send claimed while a tool call runs, whose result lists
  nothing delivered, gets a correction in the tool result, placed first so the model says
  it first.
* :class:`WorkClaimGuard`: keeps the latest claim of work (now, not an offer) of an
  interaction and decides when the interaction ends: nothing when a tool call ran or still
  runs; otherwise a ``work-claim-without-tool`` decision with a note that quotes the claim,
  and a requested turn only after an uninterrupted reply, at most once per user utterance.
* :class:`ThinkBudget`: how long a caller waits for a tool result (10 s on a phone call)
  before the result says the work still runs and the answer follows as a late answer.

Claims are found by regular expressions (:class:`ClaimPatterns`, English and Turkish to
start; extend the table with :meth:`ClaimPatterns.extended`).  A claim the patterns do not
match gets no note; see docs/S2S.md for what they cannot catch.

Pure: every input carries its time, outputs are frozen decisions; no asyncio, sockets or
clock.
"""

from __future__ import annotations

import enum
import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from brisvox.core.errors import ConfigError, InvalidInput

__all__ = [
    "DEFAULT_CLAIM_PATTERNS",
    "PHONE_THINK_BUDGET",
    "WORK_CLAIM_WITHOUT_TOOL",
    "ClaimKind",
    "ClaimPattern",
    "ClaimPatterns",
    "DeliveryClaimGuard",
    "DeliveryVerdict",
    "ThinkBudget",
    "ThinkOutcome",
    "ThinkVerdict",
    "WorkClaimDecision",
    "WorkClaimGuard",
    "WorkClaimVerdict",
]

WORK_CLAIM_WITHOUT_TOOL = "work-claim-without-tool"
"""The log tag of a work claim with no tool call (search the logs for it to find new phrases)."""

PHONE_THINK_BUDGET = 10.0
"""Seconds a caller on a phone call waits for a tool result before the model hears "still running"."""

MAX_QUOTE = 160
"""Characters of a claim quoted in a note (a claim is one phrase; a runaway match is cut)."""


class ClaimKind(enum.Enum):
    DELIVERY = "delivery"  # something was sent: "I texted you the link"
    WORK = "work"  # work runs now or in the next moment: "let me check", "I'm booking it"


@dataclass(frozen=True, slots=True)
class ClaimPattern:
    """One row of the claim table: a case-insensitive regular expression of one kind and language."""

    kind: ClaimKind
    language: str
    regex: str


def _rows(kind: ClaimKind, language: str, *regexes: str) -> tuple[ClaimPattern, ...]:
    return tuple(ClaimPattern(kind, language, r) for r in regexes)


# Work claims speak of work now or in the next moment.  Offers ("I can check that for you",
# "shall I look it up?", "would you like me to ...") are not claims: no pattern starts with
# can/could/shall/would, and the English ones are anchored on "let me", "I'm", "I'll" + verb.
_WORK_VERBS_EN = (
    r"(?:check(?:ing)?|look(?:ing)?\s+(?:it\s+|that\s+|this\s+)?up|look(?:ing)?\s+into|search(?:ing)?|"
    r"find(?:ing)?|book(?:ing)?|send(?:ing)?|text(?:ing)?|cancel(?:l?ing)?|pull(?:ing)?\s+up|"
    r"schedul(?:e|ing)|set(?:ting)?\s+up|reserv(?:e|ing)|verify(?:ing)?|confirm(?:ing)?|get(?:ting)?)"
)
DEFAULT_CLAIM_PATTERNS: tuple[ClaimPattern, ...] = (
    *_rows(
        ClaimKind.WORK,
        "en",
        rf"\blet\s+me\s+(?:just\s+|quickly\s+)?{_WORK_VERBS_EN}\b",
        rf"\bi\s*'?\s*a?m\s+(?:now\s+|just\s+|currently\s+)?{_WORK_VERBS_EN}\b",
        rf"\bi\s*'?\s*ll\s+(?:go\s+ahead\s+and\s+|just\s+|quickly\s+)?{_WORK_VERBS_EN}\b(?![^.?!]*\?)",
        r"\b(?:one|just\s+a)\s+(?:moment|second|sec)\b[^.?!]*\b(?:check|look|find|pull)",
        r"\bi\s*'?\s*m\s+(?:still\s+)?(?:working\s+on|on\s+it|looking)\b",
        r"\bstill\s+(?:checking|looking|working\s+on\s+it|searching)\b",
    ),
    *_rows(
        ClaimKind.WORK,
        "tr",
        r"\b(?:hemen\s+|şimdi\s+)?(?:kontrol|kayıt|rezervasyon)\s+ediyorum\b",
        r"\b(?:bir\s+)?bakıyorum\b",
        r"\b(?:hemen\s+)?bakayım\b",
        r"\bkontrol\s+edeyim\b",
        r"\barıyorum\b",
        r"\b(?:gönderiyorum|yolluyorum|ayarlıyorum)\b",
        r"\bhala\s+bakıyorum\b|\bhâlâ\s+bakıyorum\b",
    ),
    *_rows(
        ClaimKind.DELIVERY,
        "en",
        r"\bi\s*(?:'?\s*ve|\s+have)?\s+(?:just\s+)?(?:sent|texted|emailed|e-mailed|messaged|forwarded)\b",
        r"\b(?:it|the\s+\w+|that)\s*(?:'s|\s+has\s+been|\s+was|\s+is)\s+(?:just\s+)?(?:been\s+)?(?:sent|delivered|texted|emailed)\b",
        r"\byou\s+should\s+(?:have\s+)?(?:get|got|receive|received|see)\s+(?:it|a\s+text|an\s+e-?mail|the\s+\w+)\b",
        r"\bcheck\s+your\s+(?:phone|messages|inbox|e-?mail)\b",
    ),
    *_rows(
        ClaimKind.DELIVERY,
        "tr",
        r"\b(?:gönderdim|yolladım|ilettim|mesaj\s+attım|e-?posta\s+attım)\b",
        r"\bgönderildi\b",
        r"\btelefonunuza\s+(?:gelmiş|gelecek|geldi)\b",
    ),
)


class ClaimPatterns:
    """The compiled claim table.  ``extended(rows)`` returns a new table with more rows."""

    __slots__ = ("_compiled", "rows")

    def __init__(self, rows: Iterable[ClaimPattern] = DEFAULT_CLAIM_PATTERNS) -> None:
        self.rows: tuple[ClaimPattern, ...] = tuple(rows)
        compiled: list[tuple[ClaimKind, re.Pattern[str]]] = []
        for row in self.rows:
            try:
                compiled.append((row.kind, re.compile(row.regex, re.IGNORECASE)))
            except re.error as exc:
                raise ConfigError(f"claim pattern {row.regex!r} ({row.language}) does not compile: {exc}") from None
        self._compiled = tuple(compiled)

    def extended(self, rows: Iterable[ClaimPattern]) -> ClaimPatterns:
        return ClaimPatterns((*self.rows, *rows))

    def find(self, text: str, kind: ClaimKind) -> str | None:
        """The sentence of ``text`` that holds the last claim of ``kind``, or None."""
        best: tuple[int, str] | None = None
        for k, pattern in self._compiled:
            if k is not kind:
                continue
            for m in pattern.finditer(text):
                if best is None or m.start() > best[0]:
                    best = (m.start(), _sentence(text, m.start(), m.end()))
        return best[1] if best is not None else None


def _sentence(text: str, start: int, end: int) -> str:
    """The sentence around a match: the claim quoted in its own words."""
    left = max(text.rfind(c, 0, start) for c in ".!?\n") + 1
    rights = [i for i in (text.find(c, end) for c in ".!?\n") if i != -1]
    right = min(rights) + 1 if rights else len(text)
    return text[left:right].strip()[:MAX_QUOTE]


_DEFAULT = ClaimPatterns()


# --- delivery claims ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class DeliveryVerdict:
    """What a tool result says about sends claimed while its call ran."""

    call_id: str
    claim: str | None  # the latest send claim said while the call ran
    delivered: tuple[str, ...]
    correction: str | None  # set when a send was claimed and nothing was delivered

    def apply(self, content: str) -> str:
        """The tool result with the correction first (unchanged when there is none)."""
        if self.correction is None:
            return content
        return f"{self.correction}\n{content}"


def delivery_correction(claim: str) -> str:
    return (
        f'CORRECTION, say this first: you told the caller "{claim}", but nothing was sent. '
        "Tell the caller that it was not sent yet. Only say something was sent when a tool result lists it in delivered."
    )


class DeliveryClaimGuard:
    """Watches what the model says while tool calls run; corrects send claims nothing backs.

    ``call_started`` when a tool call starts, ``agent_said`` for the model's speech
    (transcript text, with its time), ``result`` when the call's result is ready: the
    verdict carries a correction when a send was claimed while the call ran and the result
    lists nothing in ``delivered``.
    """

    __slots__ = ("_claims", "_patterns", "_running")

    def __init__(self, patterns: ClaimPatterns = _DEFAULT) -> None:
        self._patterns = patterns
        self._running: dict[str, float] = {}
        self._claims: dict[str, str] = {}

    def call_started(self, call_id: str, at: float) -> None:
        self._running[call_id] = at

    def agent_said(self, text: str, at: float) -> None:
        claim = self._patterns.find(text, ClaimKind.DELIVERY)
        if claim is None:
            return
        for call_id, started in self._running.items():
            if at >= started:
                self._claims[call_id] = claim

    def call_cancelled(self, call_id: str, at: float) -> None:
        """A call that will have no result (withdrawn by the vendor, the session ended): forget it."""
        self._running.pop(call_id, None)
        self._claims.pop(call_id, None)

    @property
    def running_calls(self) -> int:
        return len(self._running)

    def result(self, call_id: str, delivered: Sequence[str], at: float) -> DeliveryVerdict:
        if call_id not in self._running:
            raise InvalidInput(f"delivery guard: result for {call_id!r}, which was never started (at {at:g})")
        del self._running[call_id]
        claim = self._claims.pop(call_id, None)
        sent = tuple(delivered)
        correction = delivery_correction(claim) if claim is not None and not sent else None
        return DeliveryVerdict(call_id=call_id, claim=claim, delivered=sent, correction=correction)


# --- work claims -------------------------------------------------------------------------------


class WorkClaimVerdict(enum.Enum):
    NO_CLAIM = "no_claim"  # the interaction made no work claim the patterns see
    TOOL_CALLED = "tool_called"  # a tool call of this interaction backs the claim
    TOOL_RUNNING = "tool_running"  # a tool call of the session still runs
    WITHOUT_TOOL = WORK_CLAIM_WITHOUT_TOOL  # nothing backs the claim: log it, add the note


@dataclass(frozen=True, slots=True)
class WorkClaimDecision:
    """The guard's decision at the end of an interaction."""

    verdict: WorkClaimVerdict
    at: float
    claim: str | None = None
    note: str | None = None  # add to the conversation (set only for WITHOUT_TOOL)
    request_turn: bool = False  # ask the model for a turn after the note

    @property
    def log_tag(self) -> str | None:
        return WORK_CLAIM_WITHOUT_TOOL if self.verdict is WorkClaimVerdict.WITHOUT_TOOL else None


def work_claim_note(claim: str) -> str:
    return (
        f'NOTE: you said "{claim}", but no tool call is running: those words started nothing. '
        "If the caller asked for something, call the tool for it now. Otherwise tell the caller plainly "
        "what you can and cannot do (if the work was queued earlier, say that it is queued)."
    )


@dataclass(slots=True)
class _Interaction:
    claim: str | None = None
    tool_called: bool = False
    last_reply_interrupted: bool = False
    replies: int = 0
    started: float | None = field(default=None)


class WorkClaimGuard:
    """Keeps the latest work claim of an interaction and decides when the interaction ends.

    Feed it, each with its time: ``user_utterance`` (the caller started speaking: a new
    utterance, which allows one more requested turn), ``agent_reply`` (a reply the model
    chose to say, with whether the caller cut it off; tool-result readings and turns we
    wrote are skipped by the caller passing ``ours=True``), ``tool_call_started`` /
    ``tool_call_finished`` and ``interaction_ended`` (Gemini Live's end of interaction,
    OpenAI Realtime's ``response.done`` of the last response), which returns the decision.
    """

    __slots__ = ("_interaction", "_patterns", "_running", "_turn_requested")

    def __init__(self, patterns: ClaimPatterns = _DEFAULT) -> None:
        self._patterns = patterns
        self._interaction = _Interaction()
        self._running: set[str] = set()
        self._turn_requested = False  # for the current user utterance

    @property
    def running_calls(self) -> int:
        return len(self._running)

    def user_utterance(self, at: float) -> None:
        self._turn_requested = False

    def agent_reply(self, text: str, at: float, *, interrupted: bool, ours: bool = False) -> None:
        if ours:
            return
        it = self._interaction
        if it.started is None:
            it.started = at
        it.replies += 1
        it.last_reply_interrupted = interrupted
        claim = self._patterns.find(text, ClaimKind.WORK)
        if claim is not None:
            it.claim = claim  # the latest claim of the interaction wins

    def tool_call_started(self, call_id: str, at: float) -> None:
        self._interaction.tool_called = True
        self._running.add(call_id)

    def tool_call_finished(self, call_id: str, at: float) -> None:
        self._running.discard(call_id)

    def interaction_ended(self, at: float) -> WorkClaimDecision:
        it = self._interaction
        self._interaction = _Interaction()
        if it.claim is None:
            return WorkClaimDecision(WorkClaimVerdict.NO_CLAIM, at)
        if it.tool_called:
            return WorkClaimDecision(WorkClaimVerdict.TOOL_CALLED, at, claim=it.claim)
        if self._running:
            return WorkClaimDecision(WorkClaimVerdict.TOOL_RUNNING, at, claim=it.claim)
        # A turn while the caller talks makes the model talk over them, and a model that answers
        # with another claim could loop: only after a finished reply, once per user utterance.
        request = not it.last_reply_interrupted and not self._turn_requested
        if request:
            self._turn_requested = True
        return WorkClaimDecision(
            WorkClaimVerdict.WITHOUT_TOOL, at, claim=it.claim, note=work_claim_note(it.claim), request_turn=request
        )


# --- think budget ------------------------------------------------------------------------------


class ThinkVerdict(enum.Enum):
    ANSWERED = "answered"  # the result arrived within the budget
    STILL_RUNNING = "still_running"  # the budget ran out: answer "still running", the result follows late
    LATE_ANSWER = "late_answer"  # the result of a call already answered "still running"


@dataclass(frozen=True, slots=True)
class ThinkOutcome:
    verdict: ThinkVerdict
    call_id: str
    content: str  # what goes to the model


@dataclass(frozen=True, slots=True)
class ThinkBudget:
    """How long the model's tool result may take before the caller hears that work still runs."""

    seconds: float = PHONE_THINK_BUDGET

    def __post_init__(self) -> None:
        if not self.seconds > 0:
            raise ConfigError(f"ThinkBudget.seconds must be positive, got {self.seconds}")

    def deadline(self, started_at: float) -> float:
        return started_at + self.seconds

    def decide(self, call_id: str, tool: str, started_at: float, now: float, result: str | None) -> ThinkOutcome | None:
        """At ``now``: the answer, "still running" past the budget, or None (keep waiting)."""
        if result is not None:
            return ThinkOutcome(ThinkVerdict.ANSWERED, call_id, result)
        if now >= self.deadline(started_at):
            return ThinkOutcome(ThinkVerdict.STILL_RUNNING, call_id, still_running_text(tool, self.seconds))
        return None

    @staticmethod
    def late_answer(call_id: str, tool: str, result: str) -> ThinkOutcome:
        return ThinkOutcome(
            ThinkVerdict.LATE_ANSWER,
            call_id,
            f"LATE ANSWER of {tool} (call {call_id}), which you were told still runs: {result}",
        )


def still_running_text(tool: str, seconds: float) -> str:
    message = (
        f"The work is still running after {seconds:g} s. Tell the caller it is in progress; "
        "the answer arrives later as a LATE ANSWER."
    )
    return json.dumps({"status": "still_running", "tool": tool, "message": message}, ensure_ascii=False)
