from __future__ import annotations

import random

import pytest

from brisvox.agent.segmenter import Segmenter, SegmenterConfig
from brisvox.core.errors import ConfigError


def feed(seg: Segmenter, text: str, step: int) -> list[str]:
    out: list[str] = []
    for i in range(0, len(text), step):
        out.extend(seg.push(text[i : i + step]))
    rest = seg.flush()
    if rest:
        out.append(rest)
    return out


def test_sentences_become_pieces_as_soon_as_their_end_is_seen() -> None:
    seg = Segmenter()
    assert seg.push("Sure. I can") == ["Sure. "]
    assert seg.push(" help! Anything") == ["I can help! "]
    assert seg.flush() == "Anything"


def test_the_first_clause_is_cut_early_and_later_clauses_only_when_long() -> None:
    seg = Segmenter(SegmenterConfig(first_clause_min_chars=10, clause_min_chars=30))
    assert seg.push("Let me check, one second, please wait") == ["Let me check, "]
    assert seg.push(" a moment, ") == ["one second, please wait a moment, "]


def test_a_long_run_without_punctuation_is_cut_at_a_space_before_the_limit() -> None:
    seg = Segmenter(SegmenterConfig(first_clause_min_chars=5, clause_min_chars=5, max_chars=20))
    pieces = seg.push("word " * 10)
    assert pieces and all(len(p) <= 20 for p in pieces)
    assert all(p.endswith(" ") for p in pieces)


def test_decimal_points_and_abbreviation_free_dots_do_not_cut() -> None:
    seg = Segmenter()
    assert seg.push("It costs 3.50 euros") == []


@pytest.mark.parametrize("seed", range(50))
def test_pieces_always_concatenate_to_the_input_whatever_the_chunking(seed: int) -> None:
    rng = random.Random(seed)
    words = ["Hello,", "world.", "Çok", "güzel!", "3.5", "kg;", "ok", "🙂", "yes?", "—", "well"]
    text = " ".join(rng.choice(words) for _ in range(rng.randint(1, 60)))
    limit = rng.randint(20, 80)
    config = SegmenterConfig(first_clause_min_chars=min(12, limit), clause_min_chars=min(40, limit), max_chars=limit)
    pieces = feed(Segmenter(config), text, rng.randint(1, 9))
    assert "".join(pieces) == text


def test_invalid_limits_are_rejected_by_name() -> None:
    with pytest.raises(ConfigError, match="clause_min_chars"):
        SegmenterConfig(clause_min_chars=0)
