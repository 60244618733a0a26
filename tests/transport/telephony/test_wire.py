"""The telephony wire helpers: lenient numbers, strict base64, media payloads, the message field
checks both carriers' parsers use, constant-time compare."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brisvox.transport.telephony import UpgradeRefusal, b64decode, b64encode, lenient_int, secret_equal
from brisvox.transport.telephony.wire import (
    CarrierProtocolError,
    FaultKind,
    decode_media,
    dtmf_digit,
    field_text,
    load_event,
    media_fields,
)


@pytest.mark.parametrize(("raw", "value"), [(7, 7), ("42", 42), ("0", 0), ("12345678901234567890", 12345678901234567890),
                                             (True, None), (1.5, None), ("4x", None), ("", None), ("-1", None),
                                             ("٣", None), (None, None), ("1" * 21, None)])
def test_numbers_are_read_from_json_numbers_or_decimal_strings(raw: object, value: int | None) -> None:
    assert lenient_int(raw) == value


@given(st.binary(max_size=400))
def test_base64_round_trips(data: bytes) -> None:
    assert b64decode(b64encode(data)) == data


@pytest.mark.parametrize("bad", ["abc", "ab=c", "a b=", "é===", "AAAA\n"])
def test_bad_base64_is_refused_with_a_value_error(bad: str) -> None:
    with pytest.raises(ValueError, match="invalid base64"):
        b64decode(bad)


def test_secrets_compare_equal_only_when_identical() -> None:
    assert secret_equal("token-1", "token-1")
    assert not secret_equal("token-1", "token-2") and not secret_equal("", "x")


def test_a_refusal_body_names_the_reason_and_the_detail() -> None:
    assert UpgradeRefusal(403, "bad_signature", "wrong").body() == "bad_signature: wrong\n"


def test_a_media_payload_decodes_to_its_bytes_within_the_size_bound() -> None:
    assert decode_media(b64encode(b"\xff" * 160), 160) == b"\xff" * 160


@pytest.mark.parametrize(("payload", "words"), [("abc", "invalid base64"), ("", "0 bytes"),
                                                 (b64encode(b"\x00" * 161), "161 bytes")])
def test_a_bad_media_payload_is_refused_as_invalid_media_naming_what_was_wrong(payload: str, words: str) -> None:
    with pytest.raises(CarrierProtocolError, match=words) as caught:
        decode_media(payload, 160)
    assert caught.value.kind is FaultKind.INVALID_MEDIA


@pytest.mark.parametrize(("text", "kind"), [("{", FaultKind.INVALID_JSON), ("[1]", FaultKind.INVALID_MESSAGE),
                                             ("[" * 100_000, FaultKind.INVALID_JSON)])
def test_a_frame_that_is_not_a_json_object_is_refused(text: str, kind: FaultKind) -> None:
    with pytest.raises(CarrierProtocolError) as caught:
        load_event(text)
    assert caught.value.kind is kind


def test_the_field_checks_name_the_event_and_the_field() -> None:
    raw, event = load_event('{"event":"dtmf","dtmf":{"digit":"a"},"mark":{"name":""},"media":{"payload":"AA=="}}')
    assert event == "dtmf" and dtmf_digit(raw) == "A"
    with pytest.raises(CarrierProtocolError, match="'mark' message needs a string 'name' of 1 to 8"):
        field_text(raw["mark"], "name", "mark", 8)  # type: ignore[arg-type]
    assert media_fields(raw)[1:] == ("AA==", "inbound")


@given(st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
                        st.sampled_from(["event", "media", "dtmf", "payload", "track", "digit"]), inner, max_size=4),
                    max_leaves=12))
def test_any_json_gives_the_helpers_a_value_or_a_carrier_protocol_error(value: object) -> None:
    try:
        raw, _event = load_event(json.dumps(value))
        dtmf_digit(raw)
        _media, payload, track = media_fields(raw)
        assert isinstance(payload, str) and isinstance(track, str)
        decode_media(payload, 160)
    except CarrierProtocolError as exc:
        assert exc.message


@given(st.text(max_size=300))
def test_any_text_decodes_to_bounded_media_or_a_carrier_protocol_error(text: str) -> None:
    try:
        assert 1 <= len(decode_media(text, 160)) <= 160
    except CarrierProtocolError as exc:
        assert exc.kind is FaultKind.INVALID_MEDIA
