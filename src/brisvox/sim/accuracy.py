"""Word accuracy of a transcript against a reference, for STT tests and benchmarks.

Word accuracy is ``1 - WER``: one minus the word-level edit distance (substitutions,
deletions, insertions) divided by the number of reference words, after both sides are
lower-cased and stripped of punctuation.  It can be negative for a transcript with many
insertions; it is 1.0 for an exact match.
"""

from __future__ import annotations

import re

__all__ = ["normalize_words", "word_accuracy", "word_errors"]

_WORD = re.compile(r"[a-z0-9']+")


def normalize_words(text: str) -> list[str]:
    return [w.strip("'") for w in _WORD.findall(text.lower()) if w.strip("'")]


def word_errors(reference: str, hypothesis: str) -> tuple[int, int]:
    """(edit distance in words, number of reference words)."""
    ref, hyp = normalize_words(reference), normalize_words(hypothesis)
    row = list(range(len(hyp) + 1))
    for i, r in enumerate(ref, 1):
        prev, row[0] = row[0], i
        for j, h in enumerate(hyp, 1):
            prev, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, prev + (r != h))
    return row[len(hyp)], len(ref)


def word_accuracy(reference: str, hypothesis: str) -> float:
    errors, n = word_errors(reference, hypothesis)
    if n == 0:
        return 1.0 if not normalize_words(hypothesis) else 0.0
    return 1.0 - errors / n
