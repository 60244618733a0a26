"""The telephony wire helpers: lenient numbers, strict base64, constant-time compare."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brisvox.transport.telephony import UpgradeRefusal, b64decode, b64encode, lenient_int, secret_equal


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
