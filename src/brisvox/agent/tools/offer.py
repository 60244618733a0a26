"""Offered now: which tools the model may call in the session's present state, and the
argument rules that do not depend on the schema alone.  Pure (no I/O, no clock).

A small model (the embedded 0.5B one) picks badly among tools that cannot be right: it
booked again instead of confirming, booked before looking the table up, booked under a
name nobody said.  A grammar-constrained model can only write a call of an offered tool,
so what is not offered is impossible; a cloud model that calls it anyway gets the error a
call to an unknown tool gets, or a refusal naming what to do.  The rules:

* ``confirm_pending`` is offered only while a call waits for the caller's yes and the
  caller has spoken since it was asked (the gate refuses an earlier confirmation), its
  ``call_id`` narrowed to those ids; a confirm tool is not offered while a call of it
  waits (the model confirms or talks, it does not ask again).
* A tool whose call these rules refused is not offered again until the caller's next turn
  (the refusal tells the model what to ask).
* A tool with a :class:`~brisvox.agent.tools.spec.Requirement` is offered only after a
  call of the required tool answered with the required values, and once a call of it
  used that answer, not again until a new one; its bound arguments are offered as
  constants (``const``) equal to the required call's, so the model writes only the rest.
  A call that breaks the rule anyway is refused with what to do.
* A ``from_caller`` argument must be words the caller said in this call (normalised:
  case, accents and punctuation do not count), and not the agent's own name.  It is offered
  as an ``enum`` of the caller's recent name-like spans (:func:`name_spans`), so a
  grammar-constrained model can write only a name the caller said; with no such span yet
  the tool is not offered (the model must ask).
* A confirm tool's ``declined_by`` words in the caller's turn drop its waiting call (the
  engine does it as the turn is noted): a small model "confirmed" on a no (measured).
* A confirm tool's ``confirmed_by`` words in the caller's turn (and none of its
  ``declined_by``) make ``confirm_pending`` the round's only choice, a call required: on the
  yes the 0.5B model looked the table up again instead of confirming (measured).
* A ReadOnly tool's ``lookup_when_heard`` slots, read for sure in the caller's latest turn
  (:mod:`brisvox.agent.tools.slots`; the turns before fill in the rest), with no call of
  it since that turn and no answer for those values: the round offers only that tool, a
  call required, the heard values as constants (:meth:`Grounds.heard_offer`).  The 0.5B
  model answered "is there a table tomorrow at seven?" in words, inventing the answer.  Such
  a tool, once called in a turn, is not offered again until the caller's next turn, nor
  in a turn that names only part of its slots (the model asks for the rest).

See docs/TOOLS.md, "Offered now".
"""

from __future__ import annotations

import dataclasses
import datetime
import re
import unicodedata
from collections import deque
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from brisvox.agent.tools.registry import CONFIRM_PENDING
from brisvox.agent.tools.slots import read_slots
from brisvox.agent.tools.spec import ToolSpec

__all__ = ["MAX_NAME_SPANS", "Grounds", "name_spans", "words"]

_WORD = re.compile(r"\w+")
MAX_WORDS = 2048  # the caller's distinct words kept (a long call keeps its first ones)
SLOT_TURNS = 6  # the caller's latest turns whose slots fill in what the latest one leaves out
MAX_NAME_SPANS = 12
"""The caller's most recent name-like spans a ``from_caller`` enum offers.  A caller gives a
name in the turn it was asked for, or said it a turn or two before (two content words a
turn give three spans): 12 keeps those, while every extra choice is one more a 0.5B model
can pick wrongly (the grammar itself takes hundreds of choices without a measurable cost)."""


def words(text: str) -> tuple[str, ...]:
    """``text``'s words, case-folded, accents and punctuation removed ("Ayşe!" -> ("ayse",))."""
    plain = "".join(c for c in unicodedata.normalize("NFKD", text.casefold()) if not unicodedata.combining(c))
    return tuple(_WORD.findall(plain))


@dataclass(frozen=True, slots=True)
class _Answer:
    arguments: Mapping[str, Any]
    result: Any
    seq: int


class Grounds:
    """What the session's state allows: the caller's words, the last answer of each ReadOnly
    tool, and which answers a requiring tool's call already used."""

    __slots__ = ("_answers", "_called", "_heard", "_refused", "_seq", "_spans", "_turn_seq", "_turns", "_used",
                 "agent_words", "check_words")

    def __init__(self, agent_name: str = "") -> None:
        self.agent_words = words(agent_name)
        self.check_words = True  # False where the caller's words come after the calls (speech-to-speech)
        self._heard: set[str] = set()
        self._spans: dict[tuple[str, ...], str] = {}  # normalised -> as transcribed, oldest first
        self._refused: set[str] = set()  # tools refused by these rules since the caller's last turn
        self._answers: dict[str, _Answer] = {}
        self._used: dict[str, int] = {}  # requiring tool -> the answer seq its last call used
        self._seq = 0
        self._turns: deque[str] = deque(maxlen=SLOT_TURNS)  # the caller's latest turns (heard slots)
        self._turn_seq = 0  # the answer seq when the latest turn was noted
        self._called: set[str] = set()  # lookup_when_heard tools called since the latest turn

    def note_user_text(self, text: str) -> None:
        """A caller's turn entered the context (what was refused may be right again)."""
        self._refused.clear()
        self._note_spans(text)
        for w in words(text):
            if len(self._heard) >= MAX_WORDS:
                return
            self._heard.add(w)

    @staticmethod
    def declines(text: str, phrases: Iterable[str]) -> bool:
        """Whether ``text`` holds one of ``phrases`` as whole words ("don't" matches "I don't", not "donut")."""
        said = words(text)
        for phrase in phrases:
            want = words(phrase)
            n = len(want)
            if n and any(said[i:i + n] == want for i in range(len(said) - n + 1)):
                return True
        return False

    def note_answer(self, tool: str, arguments: Mapping[str, Any], result: Any) -> None:
        """A ReadOnly call answered ``result`` (the tool's own value, before it became text)."""
        self._seq += 1
        self._answers[tool] = _Answer(dict(arguments), result, self._seq)

    def note_refused(self, spec: ToolSpec) -> None:
        """A call of ``spec`` broke these rules: it is not offered again until the caller speaks
        (the refusal says what to ask; the 0.5B model otherwise wrote the same call again)."""
        self._refused.add(spec.name)

    def note_used(self, spec: ToolSpec) -> None:
        """A call of ``spec`` passed its rules: the answer it stood on is used."""
        if spec.requires is not None and (answer := self._answers.get(spec.requires.tool)) is not None:
            self._used[spec.name] = answer.seq

    def _grounding(self, spec: ToolSpec) -> _Answer | None:
        """The unused answer ``spec``'s requirement stands on, or None (never for a tool without one)."""
        need = spec.requires
        assert need is not None
        answer = self._answers.get(need.tool)
        if answer is None or self._used.get(spec.name, 0) >= answer.seq:
            return None
        result = answer.result
        if not isinstance(result, Mapping) or any(result.get(k, _MISSING) != v for k, v in need.result.items()):
            return None
        return answer

    def offer(self, specs: Iterable[ToolSpec], pending: Mapping[str, str],
              answerable: Collection[str] | None = None) -> list[ToolSpec]:
        """The specs the model may call now (order kept), narrowed where the state fixes a value.

        ``pending``: the calls waiting for the caller's yes, call id -> tool name;
        ``answerable``: those the caller has spoken since (the gate refuses a confirmation
        before that; None: all of them)."""
        waiting = set(pending.values())
        confirmable = sorted(pending if answerable is None else set(pending) & set(answerable))
        out = []
        for spec in specs:
            if spec.name == CONFIRM_PENDING:
                if confirmable:
                    out.append(_narrowed(spec, {"call_id": {"enum": confirmable}}))
                continue
            if spec.name in self._refused or (spec.confirm and spec.name in waiting):
                continue
            heard = self._heard_enums(spec)
            if heard is None:
                continue  # nothing the caller said can be the argument yet: the model asks
            if spec.requires is None:
                out.append(_narrowed(spec, heard))
                continue
            answer = self._grounding(spec)
            if answer is None:
                continue
            props = spec.parameters.get("properties", {})
            fixed = {name: {**props.get(name, {}), "const": answer.arguments[name]}
                     for name in spec.requires.bind if name in answer.arguments}
            out.append(_narrowed(spec, {**fixed, **heard}))
        return out

    # -- from_caller arguments as the caller's own words (docs/TOOLS.md, "Offered now") --------

    def _note_spans(self, text: str) -> None:
        """Keeps the turn's name-like spans, the newest last (a span said again moves up)."""
        for span in name_spans(text, self.agent_words):
            key = words(span)
            self._spans.pop(key, None)
            self._spans[key] = span
        while len(self._spans) > MAX_NAME_SPANS:
            del self._spans[next(iter(self._spans))]

    @property
    def spans(self) -> tuple[str, ...]:
        """The caller's recent name-like spans as transcribed, oldest first."""
        return tuple(self._spans.values())

    def _heard_enums(self, spec: ToolSpec) -> dict[str, dict[str, Any]] | None:
        """``spec``'s string ``from_caller`` arguments narrowed to the heard spans that fit
        their length bounds (``enum``), or None when one of them has no such span."""
        if not spec.from_caller or not self.check_words:
            return {}
        props = spec.parameters.get("properties", {})
        out = {}
        for name in spec.from_caller:
            schema = props.get(name, {})
            if schema.get("type", "string") != "string":
                continue
            low, high = schema.get("minLength", 0), schema.get("maxLength")
            fit = [s for s in self.spans if len(s) >= low and (high is None or len(s) <= high)]
            if not fit:
                return None
            out[name] = {**schema, "enum": fit}
        return out

    def refusal(self, spec: ToolSpec, arguments: Mapping[str, Any]) -> str | None:
        """Why a call of ``spec`` with ``arguments`` may not run now (a message the model can
        act on; it never quotes the arguments), or None."""
        need = spec.requires
        if need is not None:
            answer = self._grounding(spec)
            if answer is None:
                return (f"{spec.name} needs a new {need.tool} answer first ({_values(need.result)}); "
                        f"call {need.tool} now, or tell the caller what it said")
            changed = [n for n in need.bind if n in answer.arguments and arguments.get(n) != answer.arguments[n]]
            if changed:
                return (f"{', '.join(changed)} must be the ones {need.tool} was asked about; "
                        f"to change them, call {need.tool} again first")
        for name in spec.from_caller if self.check_words else ():
            value = arguments.get(name)
            if not isinstance(value, str):
                continue
            said = words(value)
            if not said or not set(said) <= self._heard:
                return f"the caller has not said this {name}: ask the caller for their {name}, then call {spec.name}"
            if said == self.agent_words:
                return f"that is the agent's own name, not the caller's: ask the caller for their {name}"
        return None

    # -- heard slots (``lookup_when_heard``) -------------------------------------------------

    def note_turn_slots(self, text: str) -> None:
        """A caller's turn, for the heard-slot rule: its slots are read when a request is made
        (with the call's date then)."""
        self._turns.append(text)
        self._turn_seq = self._seq
        self._called.clear()

    def note_lookup_called(self, spec: ToolSpec) -> None:
        """A call of a ``lookup_when_heard`` tool (or ``confirm_pending``) was made since the
        latest turn (answered or not): the turn's rule is spent, so a failing call is not forced
        again round after round."""
        if spec.lookup_when_heard or spec.name == CONFIRM_PENDING:
            self._called.add(spec.name)

    def confirm_offer(self, specs: Sequence[ToolSpec], waiting: Iterable[ToolSpec],
                      tentative: str | None = None) -> ToolSpec | None:
        """``confirm_pending`` alone when the caller's latest turn is a yes to a waiting call: it
        holds one of the waiting tool's ``confirmed_by`` phrases and none of its ``declined_by``,
        and ``confirm_pending`` is offered (a call waits and the caller spoke since the
        question) and was not called yet in this turn.  Never for words not yet a turn
        (``tentative``): a confirmation is the caller's, not a guess."""
        if tentative is not None or not self._turns or CONFIRM_PENDING in self._called:
            return None
        confirm = next((s for s in specs if s.name == CONFIRM_PENDING), None)
        if confirm is None:
            return None
        said = self._turns[-1]
        for spec in waiting:
            if spec.confirmed_by and self.declines(said, spec.confirmed_by) and not self.declines(said, spec.declined_by):
                return confirm
        return None

    def heard_offer(self, specs: Sequence[ToolSpec], today: datetime.date,
                    tentative: str | None = None) -> tuple[list[ToolSpec], bool]:
        """The round's offer under the heard-slot rule, and whether a call is required.

        The first of ``specs`` with ``lookup_when_heard`` whose slots the caller's latest turn
        names some of (for sure) and the turns before complete, with no call of it since that
        turn and whose last answer was not for those values: offered alone, its heard slots
        as constants, a call required.  Otherwise ``specs`` without the ``lookup_when_heard``
        tools called since the latest turn (one look-up a turn: the 0.5B model looked the same
        table up again round after round, until the round limit's fallback).  ``tentative``:
        words not yet a turn (a speculative request), taken as the latest."""
        turns = [*self._turns, tentative] if tentative is not None else list(self._turns)
        withheld = set() if tentative is not None else set(self._called)
        for spec in specs if turns else ():
            wanted = spec.lookup_when_heard
            if not wanted or spec.name in withheld:
                continue
            props = spec.parameters.get("properties", {})
            values = read_slots(turns[-1], today, wanted, props)
            if not values:
                continue  # the latest turn asked nothing of this tool (a greeting, a name, a yes)
            for older in reversed(turns[:-1]):
                if len(values) == len(wanted):
                    break
                for name, value in read_slots(older, today, wanted, props).items():
                    values.setdefault(name, value)
            if len(values) < len(wanted):
                withheld.add(spec.name)  # the caller gave part of it: the model asks for the rest
                continue
            answer = self._answers.get(spec.name)
            if tentative is None and answer is not None and answer.seq > self._turn_seq:
                continue
            if answer is not None and all(answer.arguments.get(k) == v for k, v in values.items()):
                continue  # already answered for these values: the answer is in the context
            fixed = {name: {**props.get(name, {}), "const": v} for name, v in values.items()}
            return [_narrowed(spec, fixed)], True
        return [spec for spec in specs if spec.name not in withheld], False

_MISSING = object()

# A token that can be (part of) a name: letters, inner apostrophes and hyphens ("O'Brien",
# "Mary-Jane"); digits never (a party size, a time).
_NAME_TOKEN = re.compile(r"[^\W\d_]+(?:['\u2019-][^\W\d_]+)*")
_CLAUSE = re.compile(r"[.,;:!?()\[\]\"\u201c\u201d]+")  # a span never crosses these
# Words a caller says that are not a name: function words, numbers, days, the words of a
# call and of a booking.  What is missing here only widens the choice, the caller's words stay.
_NOT_NAMES = frozenset(" ".join(words(w)) for w in ["a", "about", "actually", "after", "again", "ahead", "all", "alright", "also", "am", "an", "and", "any", "anything", "are", "around", "as", "at", "available", "availability", "be", "been", "before", "being", "book", "booked", "booking", "both", "but", "by", "bye", "call", "called", "calling", "can", "can't", "cancel", "change", "changed", "come", "could", "dinner", "do", "does", "don't", "done", "each", "else", "evening", "everything", "excuse", "fine", "first", "for", "forget", "free", "friday", "from", "get", "go", "going", "good", "goodbye", "got", "great", "guests", "had", "half", "has", "have", "having", "he", "hello", "help", "her", "here", "hey", "hi", "his", "hold", "hours", "how", "however", "i", "i'd", "i'll", "i'm", "i've", "if", "in", "instead", "is", "it", "it's", "its", "just", "last", "later", "let", "let's", "like", "lunch", "make", "many", "may", "me", "mind", "monday", "more", "morning", "much", "must", "my", "name", "named", "need", "next", "nice", "night", "no", "nope", "not", "now", "o'clock", "of", "off", "ok", "okay", "on", "one", "open", "opening", "or", "our", "out", "party", "people", "per", "person", "please", "pm", "possible", "put", "quarter", "really", "reservation", "reserve", "reserved", "restaurant", "right", "room", "said", "same", "say", "seat", "seats", "second", "see", "she", "should", "so", "some", "someone", "sorry", "space", "spelled", "spell", "spelt", "sure", "table", "tables", "than", "thank", "thanks", "that", "that's", "the", "their", "them", "then", "there", "there's", "these", "they", "they're", "thing", "think", "this", "those", "thursday", "time", "times", "to", "today", "tomorrow", "tonight", "too", "tuesday", "under", "until", "up", "us", "very", "wait", "want", "wanted", "was", "we", "we'd", "we'll", "we're", "wednesday", "week", "weekend", "well", "were", "what", "what's", "when", "where", "which", "who", "will", "with", "would", "yeah", "yep", "yes", "you", "you're", "your", "saturday", "sunday", "afternoon", "noon", "midnight", "zero", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty", "thirty", "forty", "fifty", "sixty", "hundred", "couple", "few", "january", "february", "march", "july", "august", "september", "october", "november", "december", "better", "best", "work", "works", "perfect", "lovely", "correct", "exactly", "absolutely", "definitely", "only", "still", "already", "another", "other", "something", "nothing", "inside", "outside", "terrace", "window"])


def name_spans(text: str, agent_words: Sequence[str] = ()) -> list[str]:
    """The one- and two-word spans of ``text`` that can be a name, as written, in order:
    letter words of two letters or more (a spelled "K A Y A" is not a name), not a word of
    :data:`_NOT_NAMES`, not where the agent's own name is said ("Is this Lokanta Deniz?";
    a lone "Deniz" stays, as the refusal lets it), a pair only of adjacent such words in one
    clause ("It's Ada Lovelace." -> "Ada", "Lovelace", "Ada Lovelace")."""
    out: list[str] = []
    for clause in _CLAUSE.split(text):
        tokens = clause.split()
        keys = [words(t) for t in tokens]
        agents = _agent_name_at(keys, tuple(agent_words))
        run: list[str] = []
        for i, token in enumerate([*tokens, ""]):
            if (i in agents or len(token) < 2 or not _NAME_TOKEN.fullmatch(token)
                    or " ".join(keys[i]) in _NOT_NAMES):
                run = []
                continue
            out.append(token)
            if run:
                out.append(f"{run[-1]} {token}")
            run.append(token)
    return out


def _agent_name_at(keys: Sequence[tuple[str, ...]], agent: tuple[str, ...]) -> set[int]:
    """The indices of the tokens (``keys``: their words) where the agent's name is said whole."""
    hits: set[int] = set()
    for i in range(len(keys)) if agent else ():
        said: tuple[str, ...] = ()
        for j in range(i, len(keys)):
            said += keys[j]
            if said == agent:
                hits.update(range(i, j + 1))
            if len(said) >= len(agent):
                break
    return hits


def _values(result: Mapping[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}".replace("True", "true").replace("False", "false") for k, v in result.items()) or "any"


def _narrowed(spec: ToolSpec, props: Mapping[str, Mapping[str, Any]]) -> ToolSpec:
    """``spec`` with some properties' schemas replaced (the registered schema is untouched)."""
    if not props:
        return spec
    params = dict(spec.parameters)
    params["properties"] = {**params.get("properties", {}), **props}
    return dataclasses.replace(spec, parameters=params)
