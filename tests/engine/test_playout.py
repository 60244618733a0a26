"""The PlayoutBook on its own: what the caller heard, when a reply began and became audible."""

from __future__ import annotations

import struct

import pytest

from brisvox.audio.pcm import silence
from brisvox.core.frames import WordTiming
from brisvox.engine.playout import PlayoutBook

RATE = 16000


def tone(seconds: float, level: int = 3000) -> bytes:
    return struct.pack("<h", level) * round(seconds * RATE)


def test_a_reply_that_starts_with_silence_becomes_audible_when_its_voice_is_released() -> None:
    book = PlayoutBook()
    utt = book.open_utterance(2, 0)
    book.audio_sent(utt, silence(0.3, RATE), RATE)
    book.audio_sent(utt, tone(0.5), RATE)
    first = book.released(utt, round(0.1 * RATE), RATE)
    assert first.started == 2 and first.audible is None  # only silence went out so far
    assert book.released(utt, round(0.2 * RATE), RATE).audible is None
    audible = book.released(utt, round(0.4 * RATE), RATE)
    assert audible.started is None and audible.audible == 2
    # 0.1 s of audio went out from the voice's first sample on.
    assert audible.audible_ago == pytest.approx(0.1)
    assert book.released(utt, round(0.6 * RATE), RATE).audible is None  # once per epoch


def test_an_epoch_is_audible_once_even_over_several_utterances() -> None:
    book = PlayoutBook()
    a, b = book.open_utterance(1, 0), book.open_utterance(1, 1)
    for utt in (a, b):
        book.audio_sent(utt, tone(0.1), RATE)
    assert book.released(a, 320, RATE).audible == 1
    assert book.released(b, 320, RATE).audible is None


def test_an_epoch_ends_once_its_response_is_done_and_every_utterance_played_out() -> None:
    book = PlayoutBook()
    utt = book.open_utterance(0, 0)
    book.audio_sent(utt, tone(0.2), RATE)
    assert not book.take_ended(0)  # the response is not done
    book.response_done(0)
    assert not book.take_ended(0)  # not played out
    book.released(utt, round(0.2 * RATE), RATE)
    assert book.take_ended(0)
    assert not book.take_ended(0)  # only once


def test_the_cuts_keep_what_was_heard_newest_message_first_and_forget_the_rounds() -> None:
    book = PlayoutBook()
    heard_in_full = book.open_utterance(0, 0)
    book.push_sent(heard_in_full, "Hello there.")
    book.audio_sent(heard_in_full, tone(0.5), RATE)
    book.record_round(0, 0, 2)
    book.response_done(0)
    book.released(heard_in_full, round(0.5 * RATE), RATE)
    cut = book.open_utterance(1, 0)
    book.push_sent(cut, "one two three four")
    book.push_words(cut, tuple(WordTiming(word=w, start=i * 0.5, end=i * 0.5 + 0.4)
                               for i, w in enumerate(["one", "two", "three", "four"])))
    book.audio_sent(cut, tone(2.0), RATE)
    book.record_round(1, 0, 4)
    book.released(cut, round(0.7 * RATE), RATE)
    never_heard = book.open_utterance(1, 1)
    book.push_sent(never_heard, "Nobody heard this.")
    book.record_round(1, 1, 5)
    cuts = book.cuts(before_epoch=2)
    assert [c.msg_index for c in cuts] == [5, 4, 2]
    texts = {c.msg_index: c.truncation.text for c in cuts}
    assert texts[2] == "Hello there." and texts[5] == ""
    assert texts[4].startswith("one two") and "four" not in texts[4]
    assert book.cuts(before_epoch=2) == []  # settled rounds are forgotten


def _words(book: PlayoutBook, utt: int, words: list[str]) -> None:
    """``words`` one every 0.5 s (0.4 s each), 0.5 s of audio per word sent."""
    book.push_sent(utt, " ".join(words))
    book.push_words(utt, tuple(WordTiming(word=w, start=i * 0.5, end=i * 0.5 + 0.4) for i, w in enumerate(words)))
    book.audio_sent(utt, tone(0.5 * len(words)), RATE)


def test_audio_a_clear_flushed_unplayed_is_taken_off_the_end_of_the_epoch_newest_utterance_first() -> None:
    book = PlayoutBook()
    first, second = book.open_utterance(3, 0), book.open_utterance(3, 1)
    _words(book, first, ["one", "two", "three", "four"])
    _words(book, second, ["five", "six"])
    book.record_round(3, 0, 2)
    book.record_round(3, 1, 4)
    book.response_done(3)
    book.released(first, round(2.0 * RATE), RATE)  # released in full
    book.released(second, round(0.4 * RATE), RATE)
    book.unplayed(3, 0.9)  # the carrier still held 0.9 s: all 0.4 s of the second, 0.5 s of the first
    heard_first, heard_second = book.heard(first), book.heard(second)
    assert heard_second is not None and heard_second[0] == 0.0 and heard_second[1].text == ""
    assert heard_first is not None and heard_first[0] == pytest.approx(1.5)
    assert heard_first[1].text == "one two three" and not heard_first[1].fully_played
    texts = {c.msg_index: c.truncation.text for c in book.cuts(before_epoch=4)}
    assert texts == {2: "one two three", 4: ""}


def test_a_flushed_lead_of_another_epoch_leaves_a_reply_heard_in_full() -> None:
    book = PlayoutBook()
    utt = book.open_utterance(0, 0)
    _words(book, utt, ["one", "two"])
    book.record_round(0, 0, 2)
    book.response_done(0)
    book.released(utt, round(1.0 * RATE), RATE)
    book.unplayed(1, 0.5)  # the next reply's audio was flushed, not this one's
    [cut] = book.cuts(before_epoch=1)
    assert cut.truncation.fully_played and cut.truncation.text == "one two"


def test_a_full_book_forgets_its_oldest_round_and_counts_it() -> None:
    book = PlayoutBook(max_rounds=2)
    first = book.open_utterance(0, 0)
    book.open_utterance(1, 0)
    book.open_utterance(2, 0)
    assert book.stats.rounds_dropped == 1
    assert book.epoch_of(first) is None
