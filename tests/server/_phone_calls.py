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
    """The served call's log (``/api/calls/<id>``) says what the context kept of each reply the
    phone's clears cut: the seconds the phone played of it before the clear (within ``tolerance``)
    and a prefix of the host's answer that ends at a word (empty while only the voice's leading
    silence played); at least one such cut kept words (the barge-in's).  A cut that heard no more
    than ``tolerance`` may show on one side only (a late STT final's turn replaced a reply before
    it played), and a reply the caller hung up on was cut by the call's end, not a clear."""
    rows = call["turn_rows"]
    cuts = [h for row in rows for h in row["heard"]]
    # the caller hung up while the last reply played: the call's end cut it, not a clear
    hung_up = [h for h in rows[-1]["heard"] if call["duration"] - rows[-1]["cut"] < 1.0] if rows else []
    phone = list(playout.cuts)
    j, spoken = 0, 0
    for h in cuts:
        while j < len(phone) and phone[j] <= tolerance and abs(phone[j] - h["played"]) > tolerance:
            j += 1  # the phone's cut of a reply the context never held, or held nothing of
        text = h["text"]
        assert text == "" or any(a.startswith(text) and a[len(text):len(text) + 1] == " " for a in ANSWERS), cuts
        if j < len(phone) and abs(phone[j] - h["played"]) <= tolerance:
            j += 1
            spoken += bool(text)
        else:  # heard next to nothing (no clear reached the phone), or cut by the hang-up
            assert h["played"] <= tolerance or h in hung_up, (cuts, phone)
    assert all(seconds <= tolerance for seconds in phone[j:]), (cuts, phone)  # no cut the context missed
    assert spoken >= 1, (cuts, phone, call)
