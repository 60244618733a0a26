from __future__ import annotations

import random

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brisvox.transport.telnyx.reorder import MAX_JUMP, DtmfOrder, Reorder


def _b(n: int) -> bytes:
    return n.to_bytes(4, "big")


def test_in_order_chunks_are_released_at_once() -> None:
    r = Reorder()
    assert [r.offer(i, _b(i), 0.0) for i in range(5, 8)] == [[_b(5)], [_b(6)], [_b(7)]]
    assert len(r) == 0 and r.expected == 8


def test_a_chunk_ahead_waits_for_the_gap_then_both_are_released_in_order() -> None:
    r = Reorder()
    r.offer(1, _b(1), 0.0)
    assert r.offer(3, _b(3), 0.0) == []
    assert r.offer(2, _b(2), 0.01) == [_b(2), _b(3)]
    assert r.reordered == 1 and r.gaps == 0


def test_a_gap_is_given_up_after_the_timeout_and_the_late_chunk_is_counted() -> None:
    r = Reorder(timeout=0.125)
    r.offer(1, _b(1), 0.0)
    r.offer(3, _b(3), 0.25)
    assert r.deadline() == 0.375
    assert r.expire(0.37) == []
    assert r.expire(0.375) == [_b(3)]
    assert r.gaps == 1
    assert r.offer(2, _b(2), 0.2) == []
    assert r.late == 1 and r.duplicates == 0


def test_a_later_gap_keeps_its_own_full_wait() -> None:
    r = Reorder(timeout=0.1)
    r.offer(1, _b(1), 0.0)
    r.offer(3, _b(3), 0.0)
    r.offer(6, _b(6), 0.09)
    assert r.expire(0.1) == [_b(3)]
    assert r.deadline() == pytest.approx(0.19)
    assert r.offer(4, _b(4), 0.15) == [_b(4)]
    assert r.offer(5, _b(5), 0.16) == [_b(5), _b(6)]


def test_window_overflow_gives_up_the_oldest_gap() -> None:
    r = Reorder(window=2)
    r.offer(1, _b(1), 0.0)
    assert r.offer(3, _b(3), 0.0) == []
    assert r.offer(4, _b(4), 0.0) == []
    assert r.offer(6, _b(6), 0.0) == [_b(3), _b(4)]
    assert r.gaps == 1 and len(r) == 1


def test_duplicates_are_dropped_and_counted() -> None:
    r = Reorder()
    r.offer(1, _b(1), 0.0)
    r.offer(3, _b(3), 0.0)
    assert r.offer(1, _b(1), 0.0) == [] and r.offer(3, _b(3), 0.0) == []
    assert r.duplicates == 2


def test_a_corrupt_counter_resyncs_on_the_newest_instead_of_silencing_the_caller() -> None:
    r = Reorder(window=8)
    r.offer(10, _b(10), 0.0)
    far = 10 + MAX_JUMP + 100
    out = [r.offer(far + i, _b(i), 0.0) for i in range(9)]
    assert out[:8] == [[]] * 8
    assert out[8] == [_b(8)] and r.resyncs == 1
    assert r.offer(far + 9, _b(9), 0.0) == [_b(9)]


def test_flush_releases_what_is_held_in_order() -> None:
    r = Reorder()
    r.offer(1, _b(1), 0.0)
    r.offer(5, _b(5), 0.0)
    r.offer(3, None, 0.0)
    assert r.flush() == [None, _b(5)]


@given(st.lists(st.integers(0, 40), max_size=120), st.integers(1, 64), st.randoms(use_true_random=False))
def test_every_chunk_is_released_at_most_once_in_increasing_order(chunks: list[int], window: int,
                                                                  rng: random.Random) -> None:
    r = Reorder(window=window, timeout=0.05)
    out: list[bytes | None] = []
    now = 0.0
    for c in chunks:
        now += rng.random() * 0.03
        out += r.expire(now)
        out += r.offer(c, _b(c), now)
        assert len(r) <= window
    out += r.flush()
    numbers = [int.from_bytes(b, "big") for b in out if b is not None]
    assert numbers == sorted(set(numbers))
    assert set(numbers) <= set(chunks)
    if chunks:
        assert chunks[0] in numbers


@given(st.permutations(list(range(1, 30))))
def test_a_shuffle_within_the_window_comes_out_in_order_with_nothing_lost(order: list[int]) -> None:
    r = Reorder(window=64, timeout=10.0)
    out = r.offer(0, _b(0), 0.0)
    for c in order:
        out += r.offer(c, _b(c), 0.0)
    assert out == [_b(i) for i in range(30)]


@given(st.lists(st.integers(-10**12, 10**12), max_size=80))
def test_arbitrary_counters_never_crash_or_hold_more_than_the_window(chunks: list[int]) -> None:
    r = Reorder(window=8)
    for i, c in enumerate(chunks):
        r.offer(c, None, i * 0.01)
        r.expire(i * 0.01)
        assert len(r) <= 8


def test_dtmf_is_released_in_sequence_order_after_the_wait() -> None:
    d = DtmfOrder(timeout=0.1)
    assert d.offer(7, "2", 0.0) == []
    assert d.offer(5, "1", 0.05) == []
    assert d.expire(0.1) == ["1", "2"]
    assert d.reordered == 1 and len(d) == 0


def test_dtmf_over_capacity_releases_early() -> None:
    d = DtmfOrder(timeout=1.0, capacity=2)
    d.offer(1, "1", 0.0)
    d.offer(2, "2", 0.0)
    assert d.offer(3, "3", 0.0) == ["1"]
    assert d.flush() == ["2", "3"]
