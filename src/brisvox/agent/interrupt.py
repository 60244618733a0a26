"""The interruption policy: is a sound over the bot a real barge-in?

A VAD start while the bot is answering (``AwaitingResponse`` or ``BotSpeaking``) does not
interrupt at once: the :class:`~brisvox.agent.turn.TurnMachine` keeps it as a *barge-in
candidate* beside its state and asks this policy about it on the VAD start, every STT
interim, every recheck tick, a bot-audio start and the VAD stop.  The policy is pure: it
gets an :class:`Observation` (times are float seconds of the caller's clock) and returns an
:class:`Assessment`: confirmed, or blocked by a :class:`Guard` with the instant at which a
time-driven guard may lift (``recheck_at``).

Guards (all must pass; a guard that is off never blocks):

* ``min_speech`` / ``min_words``: combined with :attr:`Confirm.ALL` (both) or
  :attr:`Confirm.ANY` (either enabled one).  While the candidate is live, ``min_speech``
  is measured as ``elapsed - vad_hangover`` (a VAD reports its stop only after its silence
  hangover); at the VAD stop the backdated duration is exact and a heard word waives it.
* the echo window: for ``echo_guard`` seconds after the bot's audio (re)started, a
  candidate needs ``echo_min_words`` words.
* backchannels: a candidate whose latest interim is only backchannel phrases
  ("mm-hmm", "tamam") is held until ``backchannel_cap`` seconds of speech.
* ``transcript_wait``: a candidate with no interim yet is held up to that long for one,
  so the text guards can see it (live only; at the stop it is judged on what it has).
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from brisvox.agent._deadline import clamped_after
from brisvox.core.errors import ConfigError

__all__ = [
    "BACKCHANNEL_MAX_TOKENS",
    "DEFAULT_VAD_HANGOVER",
    "Assessment",
    "BackchannelSet",
    "Confirm",
    "Guard",
    "InterruptionPolicy",
    "Observation",
    "TextKind",
]

BACKCHANNEL_MAX_TOKENS = 16
"""Longer texts are never backchannels; tokenising stops after the 17th token."""

DEFAULT_VAD_HANGOVER = 0.1
"""The VAD hangover :meth:`InterruptionPolicy.recommended` assumes (seconds)."""

_TOKEN = re.compile(r"[^\W_]+")
_WORD = re.compile(r"\S*[^\W_]\S*")


class Confirm(enum.Enum):
    """How ``min_speech`` and ``min_words`` combine."""

    ALL = "all"
    ANY = "any"


class TextKind(enum.Enum):
    """What the latest STT interim of a candidate looks like."""

    NONE = "none"  # no interim yet, or one with no word
    SPEECH = "speech"
    BACKCHANNEL = "backchannel"


class Guard(enum.Enum):
    """The guard that blocks a candidate (and the veto reason at its VAD stop)."""

    ECHO = "echo"
    BACKCHANNEL = "backchannel"
    TRANSCRIPT = "transcript"
    MIN_SPEECH = "min_speech"
    MIN_WORDS = "min_words"


def _fold(text: str) -> str:
    # "İ".lower() is "i" + a combining dot; the spec folds it to a plain "i".  Dotless "ı"
    # stays distinct.
    return text.replace("İ", "i").lower()


def _tokens(text: str, limit: int) -> list[str]:
    """Lower-cased alphanumeric runs of ``text``, at most ``limit`` of them."""
    out: list[str] = []
    for match in _TOKEN.finditer(_fold(text)):
        out.append(match.group())
        if len(out) >= limit:
            break
    return out


def count_words(text: str) -> int:
    """Whitespace-separated tokens holding at least one letter or digit."""
    return len(_WORD.findall(text))


@dataclass(frozen=True, slots=True)
class BackchannelSet:
    """Phrases a listener says without taking the turn, as token tuples."""

    name: str
    phrases: frozenset[tuple[str, ...]]

    @classmethod
    def of(cls, name: str, phrases: Iterable[str]) -> BackchannelSet:
        """Tokenise ``phrases`` the way interims are tokenised ("uh-huh" is ("uh", "huh"))."""
        tuples = set()
        for phrase in phrases:
            tokens = tuple(_tokens(phrase, BACKCHANNEL_MAX_TOKENS + 1))
            if not tokens:
                raise ConfigError(f"backchannel set {name!r}: phrase {phrase!r} has no word")
            tuples.add(tokens)
        return cls(name, frozenset(tuples))

    @classmethod
    def english(cls) -> BackchannelSet:
        """Untuned default English backchannels; answers such as "yes" or "no" are left out."""
        return cls.of(
            "english",
            ("yeah", "yep", "uh-huh", "mm-hmm", "mhm", "hmm", "okay", "right", "alright", "sure",
             "i see", "got it", "cool", "oh", "ah", "uh", "um"),
        )

    @classmethod
    def turkish(cls) -> BackchannelSet:
        """Untuned default Turkish backchannels; "hayır" is left out (an answer)."""
        return cls.of(
            "turkish",
            ("evet", "hı-hı", "hı", "he", "hm", "mhm", "tamam", "aynen", "anladım", "anlıyorum",
             "peki", "tabii", "öyle mi", "ya"),
        )


@dataclass(frozen=True, slots=True)
class Observation:
    """What the machine knows about a candidate when it asks the policy.

    ``started`` is the VAD start, ``now`` the judgement time (at the stop: the backdated
    stop), ``words`` the largest word count of the interims seen, ``text`` the kind of the
    latest interim, ``bot_audio_since`` the start of the echo window (``None`` while the
    bot is silent).
    """

    started: float
    now: float
    words: int = 0
    text: TextKind = TextKind.NONE
    bot_audio_since: float | None = None


@dataclass(frozen=True, slots=True)
class Assessment:
    """The policy's answer: confirmed when ``blocked_by`` is ``None``."""

    blocked_by: Guard | None = None
    recheck_at: float | None = None

    @property
    def confirmed(self) -> bool:
        return self.blocked_by is None


_CONFIRMED = Assessment()


def _check_duration(name: str, value: float) -> None:
    if math.isnan(value) or value < 0:
        raise ConfigError(f"interruption policy: {name} must be a duration >= 0 s, got {value!r}")


@dataclass(frozen=True, slots=True)
class InterruptionPolicy:
    """The guards a barge-in candidate must pass (durations in float seconds; 0 = off)."""

    min_speech: float = 0.0
    min_words: int = 0
    confirm: Confirm = Confirm.ALL
    echo_guard: float = 0.0
    echo_min_words: int = 1
    transcript_wait: float = 0.0
    backchannels: tuple[BackchannelSet, ...] = ()
    backchannel_cap: float = math.inf
    vad_hangover: float = 0.0
    _phrases: frozenset[tuple[str, ...]] = field(init=False, repr=False, compare=False)
    _longest: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for name in ("min_speech", "echo_guard", "transcript_wait", "backchannel_cap", "vad_hangover"):
            _check_duration(name, getattr(self, name))
        for name in ("min_words", "echo_min_words"):
            if getattr(self, name) < 0:
                raise ConfigError(f"interruption policy: {name} must be >= 0, got {getattr(self, name)!r}")
        phrases = frozenset().union(*(s.phrases for s in self.backchannels))
        object.__setattr__(self, "_phrases", phrases)
        object.__setattr__(self, "_longest", max((len(p) for p in phrases), default=0))

    @classmethod
    def disabled(cls) -> InterruptionPolicy:
        """No guard: every candidate is confirmed at once (the plain turn machine)."""
        return cls()

    @classmethod
    def recommended(cls) -> InterruptionPolicy:
        """An untuned starting point: 300 ms speech (100 ms VAD hangover), a 400 ms echo
        window lifted by one word, English and Turkish backchannels capped at 1.5 s, and a
        350 ms wait for the first transcript."""
        return cls(
            min_speech=0.3,
            echo_guard=0.4,
            echo_min_words=1,
            transcript_wait=0.35,
            backchannels=(BackchannelSet.english(), BackchannelSet.turkish()),
            backchannel_cap=1.5,
            vad_hangover=DEFAULT_VAD_HANGOVER,
        )

    @property
    def is_disabled(self) -> bool:
        """True when no guard can ever block."""
        return (
            self.min_speech == 0
            and self.min_words == 0
            and (self.echo_guard == 0 or self.echo_min_words == 0)
            and self.transcript_wait == 0
            and (not self._phrases or self.backchannel_cap == 0)
        )

    # --- text --------------------------------------------------------------------------

    def is_backchannel(self, text: str) -> bool:
        """True when ``text`` is fully covered by a sequence of configured phrases."""
        if not self._phrases:
            return False
        tokens = _tokens(text, BACKCHANNEL_MAX_TOKENS + 1)
        if not tokens or len(tokens) > BACKCHANNEL_MAX_TOKENS:
            return False
        n = len(tokens)
        reach = [False] * (n + 1)
        reach[0] = True
        phrases = self._phrases
        for i in range(n):
            if not reach[i]:
                continue
            for length in range(1, min(self._longest, n - i) + 1):
                if tuple(tokens[i : i + length]) in phrases:
                    reach[i + length] = True
        return reach[n]

    def classify(self, text: str) -> tuple[TextKind, int]:
        """The kind and word count of an interim."""
        words = count_words(text)
        if words == 0:
            return TextKind.NONE, 0
        return (TextKind.BACKCHANNEL if self.is_backchannel(text) else TextKind.SPEECH), words

    # --- judgement ---------------------------------------------------------------------

    def assess(self, obs: Observation) -> Assessment:
        """Judge a live candidate (speech still going on)."""
        return self._judge(obs, at_stop=False)

    def assess_at_stop(self, obs: Observation) -> Assessment:
        """Judge a candidate at its (backdated) VAD stop: blocked here means vetoed.

        ``min_speech`` is waived when the latest interim is speech with a word, or a
        backchannel past its cap; the transcript wait no longer applies.
        """
        return self._judge(obs, at_stop=True)

    def _judge(self, obs: Observation, *, at_stop: bool) -> Assessment:
        started = obs.started
        now = obs.now if obs.now > started else started
        blocked: Guard | None = None
        recheck = math.inf

        # Echo window: time-driven, lifted by words.
        since = obs.bot_audio_since
        if self.echo_guard > 0 and since is not None and obs.words < self.echo_min_words:
            end = clamped_after(since, self.echo_guard)
            if now < end:
                blocked = Guard.ECHO
                recheck = min(recheck, end)

        # Backchannel: held until the cap (an infinite cap: only words lift it).
        cap = self.backchannel_cap
        cap_end = math.inf if cap == math.inf else clamped_after(started, cap)
        if obs.text is TextKind.BACKCHANNEL and now < cap_end:
            blocked = blocked or Guard.BACKCHANNEL
            recheck = min(recheck, cap_end)

        # Transcript wait (live only).
        if not at_stop and obs.text is TextKind.NONE and self.transcript_wait > 0:
            end = clamped_after(started, self.transcript_wait)
            if now < end:
                blocked = blocked or Guard.TRANSCRIPT
                recheck = min(recheck, end)

        # Minimum speech and words.
        speech_on = self.min_speech > 0
        words_on = self.min_words > 0
        if speech_on or words_on:
            speech_ok = True
            speech_lift = math.inf
            if speech_on:
                if at_stop:
                    waived = (obs.text is TextKind.SPEECH and obs.words >= 1) or (
                        obs.text is TextKind.BACKCHANNEL and now >= cap_end
                    )
                    speech_ok = waived or now >= clamped_after(started, self.min_speech)
                else:
                    speech_lift = clamped_after(started, self.min_speech + self.vad_hangover)
                    speech_ok = now >= speech_lift
            words_ok = not words_on or obs.words >= self.min_words
            if self.confirm is Confirm.ALL or not (speech_on and words_on):
                passed = speech_ok and words_ok
            else:
                passed = speech_ok or words_ok
            if not passed:
                blocked = blocked or (Guard.MIN_SPEECH if not speech_ok else Guard.MIN_WORDS)
                if not speech_ok and not at_stop:
                    recheck = min(recheck, speech_lift)

        if blocked is None:
            return _CONFIRMED
        if at_stop:
            return Assessment(blocked, None)
        return Assessment(blocked, recheck if recheck != math.inf else None)
