"""Twilio Media Streams parsing, encoding and signatures (pure)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from twilio.request_validator import RequestValidator

from brisvox.transport.telephony import CarrierProtocolError, b64decode
from brisvox.transport.twilio.protocol import (
    Connected,
    FaultKind,
    InboundDtmf,
    InboundMark,
    InboundMedia,
    InboundStop,
    OutboundEncoder,
    StreamStart,
    parse_message,
    signature,
    signature_valid,
)
from tests.transport.conformance._drivers import start_message

SID = "MZ18ad3ab5a668481ce02b83e7395059f0"


def test_the_documented_messages_parse_with_numbers_as_strings() -> None:
    assert parse_message('{"event":"connected","protocol":"Call","version":"1.0.0"}') == Connected("Call")
    start = parse_message(json.dumps(start_message(SID, {"agent": "demo", "n": "1"}, call_sid="CA42")))
    assert isinstance(start, StreamStart)
    assert (start.stream_sid, start.call_sid, start.account_sid) == (SID, "CA42", "AC1")
    assert dict(start.custom_parameters) == {"agent": "demo", "n": "1"}
    assert "demo" not in repr(start), "parameters may carry credentials"
    media = parse_message(json.dumps({"event": "media", "sequenceNumber": "3", "streamSid": SID, "media": {
        "track": "inbound", "chunk": "1", "timestamp": "5", "payload": "//8="}}))
    assert media == InboundMedia("//8=", 1, 5, "inbound")
    assert parse_message(json.dumps({"event": "mark", "streamSid": SID, "mark": {"name": "e1"}})) == InboundMark("e1")
    assert parse_message(json.dumps({"event": "dtmf", "streamSid": SID,
                                     "dtmf": {"track": "inbound_track", "digit": "#"}})) == InboundDtmf("#")
    assert parse_message(json.dumps({"event": "stop", "streamSid": SID, "stop": {}})) == InboundStop()


@pytest.mark.parametrize(("text", "kind", "words"), [
    ("{", FaultKind.INVALID_JSON, "JSON"),
    ("[1]", FaultKind.INVALID_MESSAGE, "object"),
    ('{"event":"hello"}', FaultKind.UNKNOWN_EVENT, "hello"),
    ('{"event":"media","media":{}}', FaultKind.INVALID_MEDIA, "payload"),
    ('{"event":"media"}', FaultKind.INVALID_MESSAGE, "media"),
    ('{"event":"mark","mark":{"name":""}}', FaultKind.INVALID_MESSAGE, "name"),
    ('{"event":"dtmf","dtmf":{"digit":"12"}}', FaultKind.INVALID_MESSAGE, "digit"),
])
def test_a_bad_message_is_refused_naming_what_was_wrong(text: str, kind: FaultKind, words: str) -> None:
    with pytest.raises(CarrierProtocolError, match=words) as caught:
        parse_message(text)
    assert caught.value.kind is kind


@pytest.mark.parametrize("fmt", [{"encoding": "audio/x-l16", "sampleRate": 8000, "channels": 1},
                                 {"encoding": "audio/x-mulaw", "sampleRate": 16000, "channels": 1},
                                 {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 2}])
def test_a_start_in_another_media_format_is_refused(fmt: dict[str, Any]) -> None:
    msg = start_message(SID)
    msg["start"]["mediaFormat"] = fmt
    with pytest.raises(CarrierProtocolError, match="mediaFormat") as caught:
        parse_message(json.dumps(msg))
    assert caught.value.kind is FaultKind.UNSUPPORTED_FORMAT


def test_the_server_messages_are_the_documented_json_with_the_stream_sid() -> None:
    enc = OutboundEncoder('MZ"odd\\sid')
    media = json.loads(enc.media(b"\xff\x7f\x00"))
    assert media == {"event": "media", "streamSid": 'MZ"odd\\sid', "media": {"payload": "/38A"}}
    assert b64decode(media["media"]["payload"]) == b"\xff\x7f\x00"
    assert json.loads(enc.mark('e"1')) == {"event": "mark", "streamSid": 'MZ"odd\\sid', "mark": {"name": 'e"1'}}
    assert json.loads(enc.clear()) == {"event": "clear", "streamSid": 'MZ"odd\\sid'}


@pytest.mark.parametrize(("url", "params"), [
    ("wss://voice.example.com/twilio", {}),
    ("wss://voice.example.com:8443/twilio?agent=demo", {}),
    ("https://voice.example.com/incoming", {"CallSid": "CA1", "From": "+15550100", "To": "+15550199"}),
])
def test_the_signature_equals_what_twilio_computes(url: str, params: dict[str, str]) -> None:
    token = "12345678901234567890123456789012"
    expected = RequestValidator(token).compute_signature(url, params)
    assert signature(token, url, params) == expected
    assert signature_valid(token, url, expected, params)
    assert not signature_valid(token, url + "x", expected, params)
    assert not signature_valid("another-token-xxxxxxxxxxxxxxxxxxx", url, expected, params)
    assert not signature_valid(token, url, None, params)


@given(st.text(max_size=300))
def test_fuzzed_text_either_parses_or_raises_the_typed_error(text: str) -> None:
    try:
        parse_message(text)
    except CarrierProtocolError as exc:
        assert exc.message


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(
                        st.sampled_from(["event", "media", "start", "mark", "dtmf", "payload", "name", "digit",
                                         "chunk", "mediaFormat", "customParameters", "callSid", "streamSid"]),
                        inner, max_size=5), max_leaves=20),
       st.sampled_from(["media", "start", "mark", "dtmf", "stop", "connected"]))
def test_fuzzed_json_of_every_event_either_parses_or_raises_the_typed_error(body: Any, event: str) -> None:
    message = {**body, "event": event} if isinstance(body, dict) else body
    try:
        parse_message(json.dumps(message))
    except CarrierProtocolError as exc:
        assert exc.message
