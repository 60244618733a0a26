from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brisvox.providers.cloud._sse import SseDecoder, SseEvent

STREAM = (
    b": keepalive comment\n"
    b"event: message_start\ndata: {\"a\": 1}\n\n"
    b"data: first line\r\ndata: second \xc3\xa9\r\n\r\n"
    b"id: 7\nretry: 100\ndata:no-space\n\n"
    b"data: [DONE]\n\n"
)
EXPECTED = [
    SseEvent("message_start", '{"a": 1}'),
    SseEvent("message", "first line\nsecond é"),
    SseEvent("message", "no-space"),
    SseEvent("message", "[DONE]"),
]


def test_events_fields_and_comments_decode_as_the_sse_format_defines() -> None:
    assert SseDecoder().feed(STREAM) == EXPECTED


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_cutting_the_byte_stream_anywhere_yields_the_same_events(cuts: list[int]) -> None:
    points = sorted(set(cuts))
    decoder = SseDecoder()
    out: list[SseEvent] = []
    prev = 0
    for p in [*points, len(STREAM)]:
        out += decoder.feed(STREAM[prev:p])
        prev = p
    assert out == EXPECTED
    assert not decoder.pending()


def test_a_bare_carriage_return_split_from_its_line_feed_ends_one_line_only() -> None:
    decoder = SseDecoder()
    assert decoder.feed(b"data: x\r") == []
    assert decoder.feed(b"\n\r\n") == [SseEvent("message", "x")]


def test_a_partial_event_is_pending_and_an_oversized_event_is_refused() -> None:
    decoder = SseDecoder()
    decoder.feed(b"data: half")
    assert decoder.pending()
    with pytest.raises(ValueError, match="exceeds"):
        SseDecoder().feed(b"data: " + b"x" * (5 * 1024 * 1024))
