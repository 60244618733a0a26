from __future__ import annotations

import pytest

from brisvox.sim.accuracy import word_accuracy, word_errors


def test_case_and_punctuation_do_not_count_as_errors() -> None:
    assert word_accuracy("Book a table, please.", "book a table please") == 1.0


def test_each_substitution_deletion_and_insertion_costs_one_word() -> None:
    assert word_errors("book a table for two", "book the table for") == (2, 5)
    assert word_errors("hello", "hello there friend") == (2, 1)
    assert word_accuracy("one two three four", "one two four") == pytest.approx(0.75)


def test_an_empty_reference_is_perfect_only_for_an_empty_transcript() -> None:
    assert word_accuracy("", "") == 1.0
    assert word_accuracy("", "noise") == 0.0
