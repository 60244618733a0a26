"""What the phone end-to-end tests (``test_twilio_e2e``, ``test_telnyx_e2e``) share: the caller's
words, the scripted host's answer to them, a model of the caller's phone playing the bot's audio,
and the check that a served call's context holds what that phone played before the clear."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ASK = "Hello, I would like to book a table, please."
"""No party, day or time: the scripted host answers with one long, fixed line (:data:`ANSWER`)."""
ANSWER = "Happy to help with a table. Could you tell me how many people and which day and what time?"
ANSWERS = (ANSWER, "Happy to help with a table. Could you tell me which day and what time?")
"""The host's answers in these calls: before and after it heard the party size."""
BARGE_IN = "Wait, sorry, make it five people instead."
ASK_TRAIL = 3.5
"""Seconds between the end of :data:`ASK` and the barge-in: inside :data:`ANSWER` (about 6 s of speech)
whether the local STT is fast or slow."""

QUIET = 0.5
"""Seconds of silence on the phone after which the next audio begins a new reply."""
MIN_HEARD = 0.05
"""Seconds: a cut that heard less is taken as one that heard nothing (the two clocks differ by a frame)."""


@dataclass(slots=True)
class Playout:
    """The caller's phone: each piece of the bot's audio plays ``buffer`` s after it arrived, or once
    the audio before it has played; a mark is echoed when the audio before it has played
    (:meth:`mark_due`); a clear drops what has not played and notes how much of the reply it cut (the
    audio since the phone was last quiet for :data:`QUIET`) was heard (``cuts``, seconds)."""

    buffer: float = 0.0
    end: float = float("-inf")  # when the audio queued so far will have played
    reply_from: float = 0.0  # when the current reply began to play
    cuts: list[float] = field(default_factory=list)

    def audio(self, at: float, seconds: float) -> None:
        start = max(at + self.buffer, self.end)
        if start > self.end + QUIET:
            self.reply_from = start
        self.end = start + seconds

    def mark_due(self, at: float) -> float:
        return max(at, self.end)

    def clear(self, at: float) -> None:
        if at < self.end:  # a clear with nothing left to play cuts nothing
            self.cuts.append(max(0.0, at - self.reply_from))
            self.end = at


def assert_context_holds_what_was_played(call: dict[str, Any], playout: Playout, tolerance: float) -> None:
    """The served call's log (``/api/calls/<id>``) says the context kept, of each reply the phone's
    clears cut while it played, a non-empty prefix that ends at a word (of :data:`ANSWER`, or of
    the host's answer once it knows the party) covering the seconds the phone played of it before
    the clear (within ``tolerance``); the first is the barge-in's cut of :data:`ANSWER`."""
    cuts = [h for row in call["turn_rows"] for h in row["heard"]]
    # A reply cut before any of it played (a turn the STT's late final replaced) keeps nothing.
    assert all(h["text"] == "" for h in cuts if h["played"] == 0), cuts
    heard = [h for h in cuts if h["played"] > MIN_HEARD]
    played = [seconds for seconds in playout.cuts if seconds > MIN_HEARD]
    assert heard and len(heard) == len(played), (heard, playout.cuts, call)
    for h, seconds in zip(heard, played, strict=True):
        text = h["text"]
        assert abs(h["played"] - seconds) <= tolerance, (heard, playout.cuts)
        assert any(text and a.startswith(text) and a[len(text):len(text) + 1] == " " for a in ANSWERS), heard
    assert ANSWER.startswith(heard[0]["text"]), heard
