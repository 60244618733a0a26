"""The TTS segmenter: cut streaming LLM text into pieces a TTS can start speaking.

A piece ends at a sentence boundary (``.``, ``!``, ``?``, ``…`` and their full-width
forms, followed by whitespace), or at a clause boundary (``,``, ``;``, ``:``, a dash)
once the piece holds at least ``clause_min_chars``, or at the last whitespace once it
reaches ``max_chars``.  The first piece of an utterance may end at a clause after only
``first_clause_min_chars``, so the caller hears the first words sooner.  Pure: no I/O,
no clock.  Text is never changed: the pieces concatenate to exactly the input.
"""

from __future__ import annotations

from dataclasses import dataclass

from brisvox.core.errors import ConfigError

__all__ = ["Segmenter", "SegmenterConfig"]

_SENTENCE_END = frozenset(".!?…。！？")
_CLAUSE_END = frozenset(",;:—–、，；：")


@dataclass(frozen=True, slots=True)
class SegmenterConfig:
    first_clause_min_chars: int = 12
    clause_min_chars: int = 40
    max_chars: int = 200

    def __post_init__(self) -> None:
        if not 1 <= self.first_clause_min_chars <= self.max_chars:
            raise ConfigError(
                f"SegmenterConfig.first_clause_min_chars must be in 1..max_chars, got {self.first_clause_min_chars}"
            )
        if not 1 <= self.clause_min_chars <= self.max_chars:
            raise ConfigError(f"SegmenterConfig.clause_min_chars must be in 1..max_chars, got {self.clause_min_chars}")


class Segmenter:
    """Accumulates text of one utterance; ``push`` returns the pieces that are ready."""

    __slots__ = ("_buf", "_config", "_emitted")

    def __init__(self, config: SegmenterConfig | None = None) -> None:
        self._config = config or SegmenterConfig()
        self._buf = ""
        self._emitted = 0

    @property
    def pending(self) -> str:
        return self._buf

    def push(self, text: str) -> list[str]:
        self._buf += text
        out: list[str] = []
        while (cut := self._find_cut()) is not None:
            out.append(self._buf[:cut])
            self._buf = self._buf[cut:]
            self._emitted += 1
        return out

    def flush(self) -> str | None:
        """The rest of the utterance (None when nothing is pending); resets for the next one."""
        rest, self._buf, self._emitted = self._buf, "", 0
        return rest or None

    def _find_cut(self) -> int | None:
        buf = self._buf
        cfg = self._config
        clause_min = cfg.first_clause_min_chars if self._emitted == 0 else cfg.clause_min_chars
        for i, ch in enumerate(buf[:-1]):
            if not buf[i + 1].isspace():
                continue
            if ch in _SENTENCE_END and buf[: i + 1].strip():
                return _after_space(buf, i + 1)
            if ch in _CLAUSE_END and i + 1 >= clause_min:
                return _after_space(buf, i + 1)
        if len(buf) >= cfg.max_chars:
            space = buf.rfind(" ", 0, cfg.max_chars)
            if space > 0:
                return space + 1
            return cfg.max_chars
        return None


def _after_space(buf: str, i: int) -> int:
    """The cut goes after the whitespace that follows a boundary, so the next piece starts with a word."""
    while i < len(buf) and buf[i].isspace():
        i += 1
    return i
