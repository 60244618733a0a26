"""Played-text truncation: the mapping rules, the estimate, the context rules, a seeded randomized test."""

from __future__ import annotations

import random
from dataclasses import dataclass

import pytest

from brisvox.agent.context import AssistantMessage, Context, SystemMessage, ToolCall, ToolMessage, UserMessage
from brisvox.agent.played import (
    CUT_MARKER,
    DEFAULT_CHARS_PER_SECOND,
    PlayedConfig,
    PlayedText,
    TruncateError,
    Truncation,
    TruncationOutcome,
    TruncationStats,
    apply_truncation,
    heard,
)
from brisvox.core.errors import InvalidInput


def played(segments: list[str] | str, words: list[tuple[str, float]]) -> PlayedText:
    p = PlayedText()
    for seg in [segments] if isinstance(segments, str) else segments:
        p.push_sent(seg)
    for word, start in words:
        p.push_word(word, start)
    return p


HELLO = played("Hello there, how are you?", [("Hello", 0.0), ("there", 0.3), ("how", 0.6), ("are", 0.8), ("you", 0.9)])


@pytest.mark.parametrize(
    ("position", "text"),
    [
        (0.0, ""),  # a word counts once playback has passed its start
        (0.01, "Hello"),
        (0.3, "Hello"),
        (0.31, "Hello there,"),  # the closing comma is kept
        (0.85, "Hello there, how are"),
        (5.0, "Hello there, how are you?"),
    ],
)
def test_the_heard_text_ends_with_the_last_word_whose_start_was_passed(position: float, text: str) -> None:
    assert HELLO.heard(position).text == text


def test_min_word_played_raises_the_bar() -> None:
    assert HELLO.heard(0.35, PlayedConfig(min_word_played=0.1)).text == "Hello"
    assert HELLO.heard(0.41, PlayedConfig(min_word_played=0.1)).text == "Hello there,"


def test_words_map_on_word_boundaries() -> None:
    p = played("haha, ha ha!", [("haha", 0.0), ("ha", 0.2), ("ha", 0.4)])
    assert p.heard(0.3).text == "haha, ha"
    assert p.heard(0.5).text == "haha, ha ha!"
    # "ha" never matches inside "haha": the untimed "haha" is a gap.
    t = played("haha ha", [("ha", 0.0)]).heard(0.1)
    assert t.text == "" and t.gaps == 1


def test_repeated_words_map_to_successive_occurrences() -> None:
    p = played("no, no, no. Yes.", [("no", 0.0), ("no", 0.2), ("no", 0.4), ("Yes", 0.6)])
    assert p.heard(0.3).text == "no, no,"
    assert p.heard(0.5).text == "no, no, no."


def test_turkish_letters_and_emoji_are_safe() -> None:
    p = played(
        "Çok güzel 😀 İstanbul'da ığdır şöyle.",
        [("Çok", 0.0), ("güzel", 0.2), ("😀", 0.4), ("İstanbul'da", 0.6), ("ığdır", 0.8), ("şöyle", 1.0)],
    )
    assert p.heard(0.3).text == "Çok güzel"
    assert p.heard(0.5).text == "Çok güzel 😀"
    assert p.heard(0.7).text == "Çok güzel 😀 İstanbul'da"
    assert p.heard(1.1).text == "Çok güzel 😀 İstanbul'da ığdır şöyle."


def test_a_word_split_across_segments_still_maps() -> None:
    p = played(["Merhaba dün", "ya! Nasıl", "sın?"], [("Merhaba", 0.0), ("dünya", 0.3), ("Nasılsın", 0.6)])
    assert p.heard(0.4).text == "Merhaba dünya!"
    assert p.heard(0.7).text == "Merhaba dünya! Nasılsın?"


def test_late_and_shuffled_timestamps_are_mapped_when_heard_is_called() -> None:
    p = PlayedText()
    p.push_sent("one two three four")
    assert p.heard(1.0).estimated
    for word, start in [("three", 0.4), ("one", 0.0), ("four", 0.6), ("two", 0.2)]:
        p.push_word(word, start)
    assert p.heard(0.5).text == "one two three"
    assert not p.heard(0.5).estimated


def test_a_gap_no_timestamp_covers_stops_the_heard_text() -> None:
    # The TTS lost "lost words" (a reconnect): the caller may not have heard them.
    p = played("before lost words after", [("before", 0.0), ("after", 0.5)])
    t = p.heard(0.6)
    assert t.text == "before" and t.gaps == 1
    # Untimed punctuation or emoji is not a gap.
    p = played("before — 😀 after", [("before", 0.0), ("after", 0.5)])
    assert p.heard(0.6) == Truncation("before — 😀 after")


def test_an_isolated_rewrite_takes_the_untimed_token_as_its_text() -> None:
    p = played("It costs 1000 dollars.", [("It", 0.0), ("costs", 0.1), ("bin", 0.2), ("dollars", 0.4)])
    assert p.heard(0.3) == Truncation("It costs 1000", unmatched_words=1)
    assert p.heard(0.5) == Truncation("It costs 1000 dollars.", unmatched_words=1)
    # At the end of the text.
    p = played("It costs 1000.", [("It", 0.0), ("costs", 0.1), ("bin", 0.2)])
    assert p.heard(0.3).text == "It costs 1000."


def test_a_rewrite_expanded_to_several_words_stops_before_it() -> None:
    p = played("Oran 3.5 kg ağır.", [("Oran", 0.0), ("üç", 0.1), ("nokta", 0.2), ("beş", 0.3), ("kilogram", 0.4)])
    assert p.heard(0.25) == Truncation("Oran", unmatched_words=2)
    assert p.heard(0.5).text == "Oran"


def test_consecutive_rewrites_and_a_rewrite_followed_by_untimed_text_stop_before_them() -> None:
    p = played("Pay 12 34 now", [("Pay", 0.0), ("twelve", 0.1), ("thirty-four", 0.2), ("now", 0.3)])
    assert p.heard(0.35).text == "Pay"
    # One rewrite, but two untimed tokens up to the end: which one it is is unknown.
    p = played("Pay 12 now please", [("Pay", 0.0), ("twelve", 0.1)])
    assert p.heard(0.2) == Truncation("Pay", unmatched_words=1)
    # A rewrite whose text is more than one token.
    p = played("Pay 3.5 kg now", [("Pay", 0.0), ("weight", 0.1), ("now", 0.3)])
    assert p.heard(0.35).text == "Pay"


def test_timed_punctuation_marks_never_move_the_cut() -> None:
    p = played("Wait - what? Yes!", [("Wait", 0.0), ("-", 0.1), ("what", 0.2), ("?", 0.3), ("Yes", 0.4), ("!", 0.5)])
    assert p.heard(0.15).text == "Wait"  # the dash is not kept
    assert p.heard(0.25).text == "Wait - what?"
    assert p.heard(0.35).text == "Wait - what?"
    # A mark the text does not have there is zero-width.
    p = played("Yes no", [("Yes", 0.0), ("…", 0.1), ("no", 0.2)])
    assert p.heard(0.15).text == "Yes" and p.heard(0.3).text == "Yes no"


def test_closing_quotes_and_brackets_are_kept_and_opening_ones_are_not() -> None:
    p = played(
        'He said "Merhaba!" (then left) ¡Hola! “Bye”',
        [("He", 0.0), ("said", 0.1), ("Merhaba", 0.2), ("then", 0.3), ("left", 0.4), ("Hola", 0.5), ("Bye", 0.6)],
    )
    assert p.heard(0.15).text == "He said"  # the quote before a letter opens the next word
    assert p.heard(0.25).text == 'He said "Merhaba!"'
    assert p.heard(0.35).text == 'He said "Merhaba!" (then'
    assert p.heard(0.45).text == 'He said "Merhaba!" (then left)'
    assert p.heard(0.55).text == 'He said "Merhaba!" (then left) ¡Hola!'
    assert p.heard(0.65).text == 'He said "Merhaba!" (then left) ¡Hola! “Bye”'


def test_without_timestamps_the_estimate_counts_chars_and_cuts_back_to_a_whole_word() -> None:
    text = "Merhaba dünya, bugün hava çok güzel."
    p = played(text, [])
    assert DEFAULT_CHARS_PER_SECOND == 14.0
    t = p.heard(1.0)  # 14 chars: "Merhaba dünya," (ends on a space)
    assert t == Truncation("Merhaba dünya,", estimated=True)
    assert p.heard(0.6).text == "Merhaba"  # 8.4 chars: mid-word cut backs up
    assert p.heard(0.4).text == ""  # 5.6 chars: inside the first word
    assert p.heard(10.0).text == text
    assert p.heard(1.0, PlayedConfig(chars_per_second=7)).text == "Merhaba"
    assert heard(p, 1.0) == t


def test_a_fully_played_reply_is_not_cut() -> None:
    p = played("Oran 3.5 kg ağır.  ", [("Oran", 0.0), ("üç", 0.1), ("nokta", 0.2), ("beş", 0.3), ("kilogram", 0.4)])
    t = p.heard(0.5, fully_played=True)
    assert t == Truncation("Oran 3.5 kg ağır.", fully_played=True)
    long = played("x" * 10 + " " + "y" * 309, [])
    assert long.heard(20.0, fully_played=True).text == long.text
    assert long.heard(20.0).text != long.text  # 320 chars at 14 chars/s would be cut
    stats = TruncationStats()
    stats.record(t)
    assert stats == TruncationStats()


def test_stats_count_truncations_estimates_unmatched_words_and_gaps() -> None:
    stats = TruncationStats()
    stats.record(Truncation("a", estimated=True))
    stats.record(Truncation("b", unmatched_words=2, gaps=1))
    assert stats == TruncationStats(truncations=2, estimates=1, unmatched_words=2, gaps=1)


def test_the_config_is_checked_and_reprs_hide_text() -> None:
    with pytest.raises(InvalidInput):
        PlayedConfig(chars_per_second=0)
    with pytest.raises(InvalidInput):
        PlayedConfig(min_word_played=-1)
    assert "Hello" not in repr(HELLO) + repr(HELLO.heard(1.0))


# --- applying to the context ------------------------------------------------------------------

CALL = ToolCall(id="t0.0", name="book", arguments={"day": "mon"})


def ctx(*assistants: AssistantMessage) -> Context:
    messages: list = [SystemMessage(text="sys"), UserMessage(text="hi")]
    for a in assistants:
        messages.append(a)
        for call in a.tool_calls:
            messages.append(ToolMessage(call_id=call.id, content="ok"))
    return Context(messages)


def test_heard_in_full_leaves_the_message_unchanged() -> None:
    c = ctx(AssistantMessage(text="Hello.", provider_data={"sig": 1}))
    assert apply_truncation(c, 2, Truncation("Hello.")) is TruncationOutcome.UNCHANGED
    assert c[2] == AssistantMessage(text="Hello.", provider_data={"sig": 1})


def test_nothing_heard_and_no_tool_calls_removes_the_message() -> None:
    c = ctx(AssistantMessage(text="Hello."))
    assert apply_truncation(c, 2, Truncation("")) is TruncationOutcome.REMOVED
    assert len(c) == 2


def test_nothing_heard_with_tool_calls_empties_the_text_and_keeps_the_calls() -> None:
    c = ctx(AssistantMessage(text="Booking now.", tool_calls=(CALL,), provider_data="sig"))
    assert apply_truncation(c, 2, Truncation("")) is TruncationOutcome.EMPTIED
    assert c[2] == AssistantMessage(text="", tool_calls=(CALL,), provider_data="sig")
    c.validate()


def test_a_heard_prefix_replaces_the_text_and_drops_provider_data_only_without_tool_calls() -> None:
    c = ctx(AssistantMessage(text="Hello there.", provider_data={"full": "Hello there."}))
    assert apply_truncation(c, 2, Truncation("Hello")) is TruncationOutcome.CUT
    assert c[2] == AssistantMessage(text="Hello" + CUT_MARKER)
    c = ctx(AssistantMessage(text="Booking now.", tool_calls=(CALL,), provider_data="sig"))
    assert apply_truncation(c, 2, Truncation("Booking")) is TruncationOutcome.CUT
    assert c[2] == AssistantMessage(text="Booking" + CUT_MARKER, tool_calls=(CALL,), provider_data="sig")


def test_the_cut_hits_the_utterance_own_message_not_the_last_one() -> None:
    c = ctx(AssistantMessage(text="First answer."), AssistantMessage(text="Second answer."))
    assert apply_truncation(c, 2, Truncation("First")) is TruncationOutcome.CUT
    assert [m.text for m in c if isinstance(m, AssistantMessage)] == ["First" + CUT_MARKER, "Second answer."]


def test_the_model_is_handed_the_cut_reply_marked_as_interrupted_not_as_said_in_full() -> None:
    c = ctx(AssistantMessage(text="Your table for two is booked for Friday at eight."))
    apply_truncation(c, 2, Truncation("Your table for two is"))
    c.push_user("sorry, Saturday")
    said = [m.text for m in c.messages if isinstance(m, AssistantMessage)]
    assert said == ["Your table for two is\u2014 (the caller interrupted here)"]
    c.validate()


@pytest.mark.parametrize(
    ("index", "truncation", "match"),
    [
        (2, Truncation("Goodbye"), "not a prefix"),
        (1, Truncation(""), "UserMessage"),
        (9, Truncation(""), "outside"),
    ],
)
def test_a_truncation_that_does_not_fit_is_an_error_and_the_context_is_untouched(
    index: int, truncation: Truncation, match: str
) -> None:
    c = ctx(AssistantMessage(text="Hello."))
    before = c.messages
    with pytest.raises(TruncateError, match=match):
        apply_truncation(c, index, truncation)
    assert c.messages == before


# --- seeded randomized test -------------------------------------------------------------------

VOCAB = ["ha", "haha", "ali", "veli", "bugün", "çok", "güzel", "İstanbul", "ığdır", "şöyle", "yes", "no", "😀", "🚀",
         "well", "it's", "ok"]
REWRITTEN = ["1000", "3.5", "%50", "12:30", "2.", "km/h"]
SPOKEN = ["bin", "üç", "nokta", "beş", "yüzde", "elli", "on", "iki", "otuz"]
LOST = ["kayıp", "gitti", "lost", "dropped", "sessiz"]  # never a timed word, so never mistaken for one
MARKS = ["—", "…", "!", "-"]
OPEN = ["", "", "", "(", '"', "“", "¡"]
CLOSE = ["", "", "", ",", ".", "!", "?", "…", ")", '"', "”", "?!"]


@dataclass
class Token:
    text: str  # as it appears in the sent text
    core: str  # the word (or the mark) itself
    kind: str  # timed, rewritten, untimed, mark
    start: float = 0.0
    last_start: float = 0.0  # start of its last spoken word (a rewrite may be several)
    offset: int = 0  # where it starts in the sent text


def make_case(rng: random.Random) -> tuple[list[Token], str, list[tuple[str, float]]]:
    tokens: list[Token] = []
    for _ in range(rng.randint(1, 14)):
        r = rng.random()
        if r < 0.62:
            core = rng.choice(VOCAB)
            opening = rng.choice(OPEN) if core[0].isalnum() else ""
            closing = rng.choice(CLOSE)
            tokens.append(Token(opening + core + closing, core, "timed"))
        elif r < 0.77:
            tokens.append(Token(rng.choice(REWRITTEN) + rng.choice(["", "", ","]), "", "rewritten"))
        elif r < 0.9:
            tokens.append(Token(rng.choice(LOST), "", "untimed"))
        else:
            mark = rng.choice(MARKS)
            tokens.append(Token(mark, mark, "mark"))
    words: list[tuple[str, float]] = []
    t = 0.0
    for tok in tokens:
        if tok.kind == "untimed":
            # Lost on the way (a TTS reconnect): no audio, no timestamp, never heard.
            tok.start = tok.last_start = t
            continue
        t += rng.uniform(0.05, 0.4)
        tok.start = tok.last_start = t
        if tok.kind == "timed":
            # The TTS reports the bare word or the word with its punctuation.
            words.append((tok.core if rng.random() < 0.5 else tok.text, t))
            if tok.text.endswith(("!", "?")) and rng.random() < 0.3:
                words.append((tok.text[-1], t + 0.01))  # a timed mark for attached punctuation
        elif tok.kind == "rewritten":
            for k in range(rng.choice([1, 1, 2, 3])):
                tok.last_start = t + 0.02 * k
                words.append((rng.choice(SPOKEN), tok.last_start))
        elif tok.kind == "mark" and rng.random() < 0.7:
            words.append((tok.core, t))
    separators = [rng.choice([" ", " ", " ", "  ", "\n"]) for _ in tokens]
    text = ""
    for tok, sep in zip(tokens, separators, strict=True):
        tok.offset = len(text)
        text += tok.text + sep
    return tokens, text, words


def expected_heard(tokens: list[Token], text: str, position: float) -> tuple[str, bool]:
    """What the caller heard, as a prefix of the sent text (up to the last heard word and its
    closing punctuation), and whether the timings resolve it exactly.

    Lost (untimed) text was never heard, so the prefix ends before it; a rewritten token
    counts only once all its spoken words had started."""
    last = None
    exact = True
    for i, tok in enumerate(tokens):
        if tok.start >= position:
            break
        if tok.kind == "untimed":
            exact = False
            break
        if tok.kind == "rewritten":
            exact = False
            if tok.last_start >= position:
                break
        if tok.kind != "mark":
            last = i
    if last is None:
        return "", exact
    tok = tokens[last]
    # The token's text runs from its opening mark to its closing punctuation, then a separator.
    return text[: tok.offset + len(tok.text)], exact


def test_seeded_random_replies_are_always_cut_to_a_prefix_of_what_was_heard() -> None:
    rng = random.Random(20261202)
    cases = exact_cases = nonempty_exact = 0
    for case in range(600):
        tokens, text, words = make_case(rng)
        if not words:
            continue  # the rate estimate, tested on its own
        cases += 1
        order = list(words)
        rng.shuffle(order)
        p = PlayedText()
        cuts = sorted(rng.sample(range(len(text) + 1), min(len(text), rng.randint(0, 4))))
        for a, b in zip([0, *cuts], [*cuts, len(text)], strict=True):
            p.push_sent(text[a:b])
        for word, start in order:
            p.push_word(word, start)
        position = rng.uniform(0.0, (tokens[-1].start if tokens else 0) + 0.3)
        got = p.heard(position)
        want, exact = expected_heard(tokens, text, position)
        where = f"case {case}: text={text!r} words={sorted(words, key=lambda w: w[1])} position={position}"
        assert want.startswith(got.text), where
        if exact:
            exact_cases += 1
            nonempty_exact += bool(want)
            assert got.text == want, where
        # The context stays valid.
        calls = (ToolCall(id="t1.0", name="look", arguments={}),) if rng.random() < 0.3 else ()
        c = Context([SystemMessage(text="s"), UserMessage(text="u"), AssistantMessage(text=text, tool_calls=calls)]
                    + [ToolMessage(call_id=call.id, content="r") for call in calls])
        apply_truncation(c, 2, got)
        c.validate()
    assert cases >= 400 and exact_cases >= 150 and nonempty_exact >= 100
