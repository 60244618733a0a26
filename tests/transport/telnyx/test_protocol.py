from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brisvox.transport.telephony import CarrierProtocolError, b64decode
from brisvox.transport.telnyx.protocol import (
    Codec,
    Connected,
    FaultKind,
    InboundDtmf,
    InboundMedia,
    InboundStop,
    OutboundEncoder,
    StreamStart,
    TelnyxError,
    parse_message,
)
from tests.transport.telnyx import sim


def test_documented_start_is_parsed_with_string_numbers() -> None:
    msg = parse_message(sim.start(encoding="PCMA"))
    assert isinstance(msg, StreamStart)
    assert msg.call_control_id == sim.CALL_CONTROL_ID and msg.stream_id == sim.STREAM_ID
    assert msg.codec is Codec.PCMA and msg.from_number == "+13122011111"


@pytest.mark.parametrize("encoding,rate", [("L16", 16000), ("G722", 16000), ("OPUS", 16000), ("AMR-WB", 16000),
                                           ("PCMU", 16000)])
def test_unsupported_formats_are_refused_with_the_reason_and_call(encoding: str, rate: int) -> None:
    with pytest.raises(CarrierProtocolError) as info:
        parse_message(sim.start(encoding=encoding, sample_rate=rate))
    assert info.value.kind is FaultKind.UNSUPPORTED_FORMAT
    assert "PCMU or PCMA" in info.value.message and encoding in info.value.message
    assert info.value.call_control_id == sim.CALL_CONTROL_ID


def test_media_dtmf_stop_error_and_connected() -> None:
    media = parse_message(sim.media(b"\xff" * 160, 4, 9))
    assert isinstance(media, InboundMedia) and media.chunk == 4 and b64decode(media.payload) == b"\xff" * 160
    assert parse_message(sim.dtmf("a", 12)) == InboundDtmf("A", 12)
    assert parse_message(sim.stop(13)) == InboundStop()
    assert parse_message(sim.error(100003, 14)) == TelnyxError(100003, "malformed_frame", "Malformed frame")
    connected = parse_message(sim.connected("s3cret-token"))
    assert isinstance(connected, Connected) and connected.auth_token is not None
    assert "s3cret-token" not in repr(connected)


def test_outbound_messages_carry_no_stream_id() -> None:
    enc = OutboundEncoder()
    assert json.loads(enc.media(b"\x01\x02")) == {"event": "media", "media": {"payload": "AQI="}}
    assert json.loads(enc.mark('e"1')) == {"event": "mark", "mark": {"name": 'e"1'}}
    assert json.loads(enc.clear()) == {"event": "clear"}


def test_unknown_event_names_the_event() -> None:
    with pytest.raises(CarrierProtocolError, match="unknown event 'x'"):
        parse_message('{"event":"x"}')


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=10),
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
                     max_leaves=12)


@given(st.one_of(st.text(max_size=200), _json.map(json.dumps),
                 st.fixed_dictionaries({"event": st.sampled_from(["media", "start", "dtmf", "mark", "stop", "error",
                                                                  "connected"])},
                                       optional={"media": _json, "start": _json, "dtmf": _json, "mark": _json,
                                                 "payload": _json, "sequence_number": _json}).map(json.dumps)))
def test_the_parser_returns_a_message_or_a_typed_error_for_any_text(text: str) -> None:
    try:
        parse_message(text)
    except CarrierProtocolError as exc:
        assert exc.kind in FaultKind and exc.message
