"""The MarkBook: names, echoes, eviction and clear."""

from __future__ import annotations

import pytest

from brisvox.transport.telephony import Echo, MarkBook, MarkKind


def test_engine_and_progress_marks_get_distinct_names_and_resolve_to_what_was_sent() -> None:
    book = MarkBook()
    e = book.engine("greeting-end", at=1.0, position=800)
    p = book.progress(at=1.5, position=1600)
    assert e.startswith("e") and p.startswith("p") and e != p
    assert book.echo(p, at=2.0) == Echo(MarkKind.PROGRESS, None, 0.5, 1600)
    assert book.echo(e, at=2.5) == Echo(MarkKind.ENGINE, "greeting-end", 1.5, 800)
    assert len(book) == 0


def test_an_echo_is_resolved_once_and_an_unknown_one_is_counted() -> None:
    book = MarkBook()
    name = book.engine("a", at=0.0, position=0)
    assert book.echo(name, at=0.1) is not None
    assert book.echo(name, at=0.2) is None
    assert book.echo("e999", at=0.2) is None
    assert book.unmatched == 2


def test_an_echo_of_a_mark_flushed_by_a_clear_is_never_taken_for_a_played_one() -> None:
    book = MarkBook()
    flushed = [book.engine(f"m{i}", at=0.0, position=i) for i in range(3)]
    assert book.clear() == 3
    later = book.engine("m0", at=1.0, position=10)  # the engine may reuse its id: the wire name is new
    assert later not in flushed
    assert all(book.echo(name, at=1.1) is None for name in flushed)
    assert book.echo(later, at=1.2) is not None


def test_past_the_capacity_the_oldest_mark_is_forgotten_and_counted() -> None:
    book = MarkBook(capacity=512)
    names = [book.progress(at=0.0, position=i) for i in range(514)]
    assert len(book) == 512 and book.evicted == 2
    assert book.echo(names[0], at=1.0) is None and book.echo(names[1], at=1.0) is None
    assert book.echo(names[2], at=1.0) is not None


def test_a_book_needs_room_for_one_mark() -> None:
    with pytest.raises(ValueError, match="capacity"):
        MarkBook(capacity=0)
