"""The protocol module: client message parsing (with a hypothesis fuzz) and server messages."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brisvox.audio.codec import AudioEncoding
from brisvox.transport.websocket.protocol import (
    MAX_JSON_DEPTH,
    ClientDtmf,
    ClientMark,
    ClientStop,
    ErrorCode,
    ProtocolViolation,
    StopKind,
    clear_message,
    error_message,
    mark_message,
    parse_control,
    parse_start,
    started_message,
    stop_message,
)


def test_a_full_start_is_parsed_and_defaults_fill_the_rest() -> None:
    s = parse_start('{"type":"start","encoding":"mulaw","sample_rate":8000,"call_id":"c1","metadata":{"k":"v"}}')
    assert (s.encoding, s.sample_rate, s.call_id, dict(s.metadata)) == (AudioEncoding.MULAW, 8000, "c1", {"k": "v"})
    d = parse_start('{"type":"start"}')
    assert (d.encoding, d.sample_rate, d.call_id, dict(d.metadata)) == (AudioEncoding.PCM16, 16000, None, {})


@pytest.mark.parametrize(("text", "needle"), [
    ("nope", "not valid JSON"),
    ("[1]", "JSON object with a string 'type'"),
    ('{"type":"dtmf","digit":"1"}', "must be 'start'"),
    ('{"type":"start","encoding":"alaw"}', "alaw"),
    ('{"type":"start","sample_rate":11025}', "11025"),
    ('{"type":"start","extra":1}', "extra"),
    ('{"type":"start","metadata":{"k":1}}', "metadata"),
    ('{"type":"start","call_id":"' + "x" * 129 + '"}', "call_id"),
    ('{"type":"start","metadata":{' + ",".join(f'"k{i}":"v"' for i in range(33)) + "}}", "metadata"),
    ('{"type":"start","metadata":{"a":' * 9 + '"x"' + "}" * 10, f"deeper than {MAX_JSON_DEPTH}"),
])
def test_a_bad_start_is_invalid_start_naming_what_is_wrong(text: str, needle: str) -> None:
    with pytest.raises(ProtocolViolation) as info:
        parse_start(text)
    assert info.value.code is ErrorCode.INVALID_START and needle in info.value.message


def test_control_messages_are_parsed_into_their_kinds() -> None:
    assert parse_control('{"type":"dtmf","digit":"#"}') == ClientDtmf(type="dtmf", digit="#")
    assert parse_control('{"type":"mark","id":"m-1","extra":1}') == ClientMark(type="mark", id="m-1")
    assert parse_control('{"type":"stop"}') == ClientStop(type="stop")


@pytest.mark.parametrize(("text", "code"), [
    ('{"type":"start"}', ErrorCode.SECOND_START),
    ('{"type":"wiggle"}', ErrorCode.UNKNOWN_TYPE),
    ('{"type":"dtmf","digit":"E"}', ErrorCode.MALFORMED_MESSAGE),
    ('{"type":"mark","id":""}', ErrorCode.MALFORMED_MESSAGE),
    ('{"type":"mark","id":"' + "x" * 257 + '"}', ErrorCode.MALFORMED_MESSAGE),
    ("[" * 4000, ErrorCode.MALFORMED_MESSAGE),
    ('{"type": 5}', ErrorCode.MALFORMED_MESSAGE),
])
def test_a_bad_control_message_is_a_non_fatal_violation_with_its_code(text: str, code: ErrorCode) -> None:
    with pytest.raises(ProtocolViolation) as info:
        parse_control(text)
    assert info.value.code is code


def test_brackets_inside_strings_do_not_count_as_nesting() -> None:
    mark = parse_control(json.dumps({"type": "mark", "id": "[" * 150 + "\\\"{" * 20}))
    assert isinstance(mark, ClientMark)
    assert parse_start(json.dumps({"type": "start", "metadata": {"k": "[[[[[[[[[[[[["}})).metadata == {
        "k": "[[[[[[[[[[[[["}


def test_nesting_at_the_limit_is_parsed_and_one_deeper_is_refused() -> None:
    at = "[" * (MAX_JSON_DEPTH - 1) + "]" * (MAX_JSON_DEPTH - 1)
    with pytest.raises(ProtocolViolation) as ok_depth:  # parsed, then refused for its shape, not its depth
        parse_control('{"type":"mark","id":' + at + "}")
    assert "deeper" not in ok_depth.value.message
    deeper = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    with pytest.raises(ProtocolViolation) as too_deep:
        parse_control('{"type":"mark","id":' + deeper + "}")
    assert "deeper" in too_deep.value.message


def test_server_messages_are_the_documented_json() -> None:
    assert json.loads(started_message("c", AudioEncoding.PCM16, 16000)) == {
        "type": "started", "call_id": "c", "encoding": "pcm16", "sample_rate": 16000}
    assert json.loads(clear_message(3)) == {"type": "clear", "epoch": 3}
    assert json.loads(mark_message('m"1')) == {"type": "mark", "id": 'm"1'}
    assert json.loads(stop_message(StopKind.SHUTDOWN)) == {"type": "stop", "reason": "shutdown"}
    assert json.loads(error_message(ErrorCode.PING_TIMEOUT, "x", fatal=True)) == {
        "type": "error", "code": "ping_timeout", "message": "x", "fatal": True}


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
                     lambda inner: st.lists(inner) | st.dictionaries(st.text(), inner), max_leaves=30)
_texts = st.one_of(
    st.text(max_size=300),
    _json.map(json.dumps),
    st.integers(0, 3000).map(lambda n: "[" * n),
    st.integers(0, 3000).map(lambda n: '{"a":' * n),
    st.builds(lambda t, extra: json.dumps({"type": t, **extra}),
              st.sampled_from(["start", "dtmf", "mark", "stop", "x"]), st.dictionaries(st.text(max_size=10), _json)),
)


@settings(max_examples=600, deadline=None)
@given(_texts)
def test_fuzz_any_text_is_parsed_or_refused_with_a_protocol_violation(text: str) -> None:
    for parse in (parse_start, parse_control):
        try:
            parse(text)
        except ProtocolViolation as exc:
            assert isinstance(exc.code, ErrorCode) and exc.message
