"""Played-text truncation: what did the caller actually hear of an interrupted reply?

One :class:`PlayedText` per assistant utterance (one TTS context) collects the text sent to
TTS, in order (:meth:`PlayedText.push_sent`, segments concatenated verbatim), and the word
timestamps the TTS reported (:meth:`PlayedText.push_word`, offsets in seconds from the
utterance's first audio sample, in any order and at any time before the cut).
:meth:`PlayedText.heard` maps them onto the sent text for a playback position and returns a
:class:`Truncation`; :func:`apply_truncation` writes it into the utterance's own assistant
message of a :class:`~brisvox.agent.context.Context`.

Rules:

* A word is heard when playback passed its start by more than
  :attr:`PlayedConfig.min_word_played` (default 0: its first sample played).
* Words are placed in start order, each searched forward from the previous one, on word
  boundaries, by their core (leading and trailing non-alphanumerics dropped; a word with no
  letter or digit, such as an emoji, whole).  A word made only of punctuation sits at the
  next non-space character if it is that mark, else it is zero-width: it never moves the cut.
* The heard text is the sent text up to the end of the last heard word, plus the
  punctuation that closes it; opening brackets and quotes, inverted marks and dashes are not
  kept.  Offsets are code points, so Turkish letters and emoji are safe.
* Text no timestamp covers (a lost chunk) stops the heard text before it (a gap).
* A word the TTS rewrote ("bin" for "1000") is counted as unmatched.  When it is isolated
  (one such word before the next located word, or the end, with exactly one whitespace token
  of untimed text) that token is its text; otherwise its text is unknown and the heard text
  stops before it.  So the heard text is always a prefix of what was heard, never longer.
* With no timestamp at all the heard text is an estimate: ``position * chars_per_second``
  characters cut back to a whitespace boundary, flagged :attr:`Truncation.estimated`.
* A reply the caller heard in full (``fully_played=True``: flushed, nothing lost, played
  out) is not cut: the whole text minus trailing whitespace.

:func:`apply_truncation` ends a cut message with :data:`CUT_MARKER` (a dash and a note that
the caller interrupted), so every model is told the reply stopped there and does not repeat
the fragment as if it had been said in full; :attr:`Truncation.text` (what was heard, the
``BotHeard`` event's text) stays without it.
"""

from __future__ import annotations

import enum
import math
import unicodedata
from dataclasses import dataclass, field

from brisvox.agent.context import AssistantMessage, Context, ContextError

__all__ = [
    "CUT_MARKER",
    "DEFAULT_CHARS_PER_SECOND",
    "PlayedConfig",
    "PlayedText",
    "TruncateError",
    "Truncation",
    "TruncationOutcome",
    "TruncationStats",
    "apply_truncation",
    "heard",
]

DEFAULT_CHARS_PER_SECOND = 14.0
CUT_MARKER = "— (the caller interrupted here)"
"""What ends an assistant message cut by a barge-in (the heard text comes before it)."""


class TruncateError(ContextError):
    """The truncation does not fit the message at the index; the context is untouched."""


@dataclass(frozen=True, slots=True)
class PlayedConfig:
    """How :meth:`PlayedText.heard` judges a word (durations in float seconds)."""

    min_word_played: float = 0.0
    chars_per_second: float = DEFAULT_CHARS_PER_SECOND

    def __post_init__(self) -> None:
        if math.isnan(self.min_word_played) or self.min_word_played < 0:
            raise ContextError(f"PlayedConfig: min_word_played must be >= 0 s, got {self.min_word_played!r}")
        if not self.chars_per_second > 0:
            raise ContextError(f"PlayedConfig: chars_per_second must be > 0, got {self.chars_per_second!r}")


@dataclass(frozen=True, slots=True)
class Truncation:
    """What was heard of one utterance."""

    text: str
    estimated: bool = False
    unmatched_words: int = 0
    gaps: int = 0
    fully_played: bool = False

    def __repr__(self) -> str:
        return (
            f"Truncation(text=<{len(self.text)} chars>, estimated={self.estimated}, "
            f"unmatched_words={self.unmatched_words}, gaps={self.gaps}, fully_played={self.fully_played})"
        )


@dataclass(slots=True)
class TruncationStats:
    """Counts of recorded truncations (a fully played reply is not a truncation)."""

    truncations: int = 0
    estimates: int = 0
    unmatched_words: int = 0
    gaps: int = 0

    def record(self, truncation: Truncation) -> None:
        if truncation.fully_played:
            return
        self.truncations += 1
        self.estimates += truncation.estimated
        self.unmatched_words += truncation.unmatched_words
        self.gaps += truncation.gaps


# --- character classes --------------------------------------------------------------------


def _is_punct(ch: str) -> bool:
    return unicodedata.category(ch).startswith("P")


def _only_punct(word: str) -> bool:
    return bool(word) and all(_is_punct(c) for c in word)


def _core(word: str) -> str:
    """The word without leading/trailing non-alphanumerics; whole if it has no alphanumeric."""
    start, end = 0, len(word)
    while start < end and not word[start].isalnum():
        start += 1
    while end > start and not word[end - 1].isalnum():
        end -= 1
    return word[start:end] if start < end else word


_OPENING_MARKS = frozenset("¡¿")
_QUOTES = frozenset("\"'")


def _closes(text: str, i: int) -> bool:
    """True when ``text[i]`` is punctuation that closes the word before it."""
    ch = text[i]
    cat = unicodedata.category(ch)
    if not cat.startswith("P") or cat in ("Ps", "Pi", "Pd") or ch in _OPENING_MARKS:
        return False
    # A straight quote before a letter opens the next word.
    return not (ch in _QUOTES and i + 1 < len(text) and text[i + 1].isalnum())


def _has_alnum(text: str) -> bool:
    return any(c.isalnum() for c in text)


# --- the tracker --------------------------------------------------------------------------


@dataclass(slots=True)
class PlayedText:
    """The sent text and the word timestamps of one assistant utterance."""

    _segments: list[str] = field(default_factory=list)
    _words: list[tuple[float, int, str]] = field(default_factory=list)

    def push_sent(self, text: str) -> None:
        """Append text sent to TTS (the response text unchanged)."""
        self._segments.append(text)

    def push_word(self, word: str, start: float) -> None:
        """A word timestamp: ``start`` seconds after the utterance's first sample."""
        self._words.append((start, len(self._words), word))

    @property
    def text(self) -> str:
        return "".join(self._segments)

    @property
    def has_timestamps(self) -> bool:
        return bool(self._words)

    def __repr__(self) -> str:
        return f"PlayedText(<{sum(map(len, self._segments))} chars>, {len(self._words)} words)"

    def heard(self, position: float, config: PlayedConfig | None = None, *, fully_played: bool = False) -> Truncation:
        """What was heard when ``position`` seconds of the utterance's audio had played.

        Pass ``fully_played=True`` only when the whole reply reached the caller: the TTS
        flushed it, no text was lost on the way and its last chunk played out.
        """
        cfg = config if config is not None else _DEFAULT_CONFIG
        full = self.text
        if fully_played:
            return Truncation(full.rstrip(), fully_played=True)
        if not self._words:
            return Truncation(_estimate(full, position, cfg.chars_per_second), estimated=True)
        return _map_words(full, sorted(self._words), position, cfg.min_word_played)


_DEFAULT_CONFIG = PlayedConfig()


def heard(
    played: PlayedText, position: float, config: PlayedConfig | None = None, *, fully_played: bool = False
) -> Truncation:
    """Module-level spelling of :meth:`PlayedText.heard`."""
    return played.heard(position, config, fully_played=fully_played)


def _estimate(full: str, position: float, chars_per_second: float) -> str:
    if not position > 0:
        return ""
    chars = position * chars_per_second
    if chars >= len(full):
        return full.rstrip()
    n = int(chars)
    if n < len(full) and not full[n].isspace() and n > 0 and not full[n - 1].isspace():
        # A mid-word cut backs up to the previous whitespace.
        back = n
        while back > 0 and not full[back - 1].isspace():
            back -= 1
        n = back
    return full[:n].rstrip()


def _find_word(full: str, core: str, start: int) -> int:
    """The first occurrence of ``core`` at or after ``start`` on word boundaries, or -1."""
    n = len(core)
    edge_alnum = core[0].isalnum(), core[-1].isalnum()
    i = full.find(core, start)
    while i >= 0:
        before_ok = not edge_alnum[0] or i == 0 or not full[i - 1].isalnum()
        after_ok = not edge_alnum[1] or i + n == len(full) or not full[i + n].isalnum()
        if before_ok and after_ok:
            return i
        i = full.find(core, i + 1)
    return -1


def _map_words(full: str, words: list[tuple[float, int, str]], position: float, min_played: float) -> Truncation:
    # Place every word (heard or not) in start order.
    lowered = full.lower()
    haystack = lowered if len(lowered) == len(full) else full
    spans: list[tuple[int, int] | None] = []
    marks: list[bool] = []
    cursor = 0
    for _, _, word in words:
        if _only_punct(word):
            pos = cursor
            while pos < len(full) and full[pos].isspace():
                pos += 1
            if full.startswith(word, pos):
                spans.append((pos, pos + len(word)))
                cursor = pos + len(word)
            else:
                spans.append((cursor, cursor))
            marks.append(True)
            continue
        marks.append(False)
        core = _core(word)
        needle = core.lower() if haystack is lowered else core
        if len(needle) != len(core):
            needle = core
        found = _find_word(haystack, needle, cursor) if needle else -1
        if found < 0:
            spans.append(None)
        else:
            spans.append((found, found + len(needle)))
            cursor = found + len(needle)

    # Walk the heard prefix (sorted by start, so heard words come first).
    heard_n = 0
    while heard_n < len(words) and words[heard_n][0] + min_played < position:
        heard_n += 1
    covered = 0  # end of the text provably covered by timed (or resolved) words
    end = 0  # end of the last heard word
    # Every heard word the TTS rewrote (not found in the text) counts, wherever the cut falls.
    unmatched = sum(1 for k in range(heard_n) if spans[k] is None)
    gaps = 0
    i = 0
    while i < heard_n:
        span = spans[i]
        if span is not None:
            s, e = span
            if _has_alnum(full[covered:s]):
                gaps += 1  # text no timestamp covers: the caller may not have heard it
                break
            covered = max(covered, e)
            if not marks[i]:
                end = e
            i += 1
            continue
        # A run of words the TTS rewrote.
        j = i
        while j < len(words) and spans[j] is None:
            j += 1
        nxt = spans[j] if j < len(words) else None
        next_start = nxt[0] if nxt is not None else len(full)
        untimed = full[covered:next_start]
        tokens = untimed.split()
        if j - i == 1 and len(tokens) == 1:
            tok_start = covered + untimed.index(tokens[0])
            covered = end = tok_start + len(tokens[0])
            i = j
            continue
        break  # unknown text: stop before it
    if end == 0:
        return Truncation("", unmatched_words=unmatched, gaps=gaps)
    # The punctuation that closes the last heard word.
    while end < len(full) and _closes(full, end):
        end += 1
    return Truncation(full[:end], unmatched_words=unmatched, gaps=gaps)


# --- applying to the context ----------------------------------------------------------------


class TruncationOutcome(enum.Enum):
    UNCHANGED = "unchanged"  # heard in full
    REMOVED = "removed"  # nothing heard, no tool call: the message is gone
    EMPTIED = "emptied"  # nothing heard, tool calls kept
    CUT = "cut"  # the text replaced by its heard prefix and CUT_MARKER


def apply_truncation(context: Context, index: int, truncation: Truncation) -> TruncationOutcome:
    """Cut the utterance's own assistant message at ``index`` to what was heard, marked
    as cut (:data:`CUT_MARKER`) so the model knows the caller interrupted it there.

    Raises :class:`TruncateError` (context untouched) when ``index`` is not an assistant
    message or the heard text is not a prefix of its text.
    """
    if not -len(context) <= index < len(context):
        raise TruncateError(f"truncation index {index} is outside the context ({len(context)} messages)")
    message = context[index]
    if not isinstance(message, AssistantMessage):
        raise TruncateError(f"truncation index {index} is a {type(message).__name__}, not an assistant message")
    text = truncation.text
    if not message.text.startswith(text):
        raise TruncateError(
            f"heard text ({len(text)} chars) is not a prefix of message {index} ({len(message.text)} chars)"
        )
    if text == message.text and text:
        return TruncationOutcome.UNCHANGED
    try:
        if not text:
            if not message.tool_calls:
                context.remove(index)
                return TruncationOutcome.REMOVED
            # The calls stay as issued (side-effect tools may have run); provider data too.
            context.replace(index, AssistantMessage(text="", tool_calls=message.tool_calls,
                                                    provider_data=message.provider_data))
            return TruncationOutcome.EMPTIED
        # Provider data may embed the whole text: dropped unless tool calls need it echoed.
        data = message.provider_data if message.tool_calls else None
        context.replace(index, AssistantMessage(text=f"{text.rstrip()}{CUT_MARKER}", tool_calls=message.tool_calls,
                                                provider_data=data))
        return TruncationOutcome.CUT
    except ContextError as exc:
        if isinstance(exc, TruncateError):
            raise
        raise TruncateError(f"truncating message {index} would break the context: {exc}") from exc
