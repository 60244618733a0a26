from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from brisvox.core.frames import ReplyMode
from brisvox.transport.rtvi.protocol import (
    ClientMessage,
    ClientReady,
    DtmfKeys,
    RtviViolation,
    SendText,
    compatible,
    parse_request,
)
from brisvox.transport.rtvi.wire import InboundMessage

_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                     lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
                     max_leaves=12)
_types = st.sampled_from(["client-ready", "disconnect-bot", "client-message", "send-text", "dtmf", "ui-event",
                          "append-to-context"]) | st.text(max_size=12)
_fields = st.fixed_dictionaries({}, optional={
    "version": _json, "t": _json, "d": _json, "content": _json, "options": _json, "buttons": _json,
    "button": _json, "event": _json, "payload": _json})


@settings(max_examples=400, deadline=None)
@given(_types, st.none() | st.text(max_size=8), _json | _fields)
def test_any_request_parses_to_a_typed_request_or_a_violation_naming_its_id(type_: str, id_: str | None,
                                                                            data: Any) -> None:
    try:
        parse_request(InboundMessage(type_, id_, data))
    except RtviViolation as exc:
        assert exc.request_id == id_ and exc.message


def test_the_requests_of_pipecats_client_parse() -> None:
    assert parse_request(InboundMessage("client-ready", "r", {"version": "2.1.0", "about": {}})) == ClientReady("r", "2.1.0")
    assert parse_request(InboundMessage("dtmf", None, {"button": "5"})) == DtmfKeys(None, ("5",))
    sent = parse_request(InboundMessage("send-text", "s", {"content": "hi", "options": {"audio_response": False}}))
    assert isinstance(sent, SendText) and (sent.content, sent.reply, sent.run_immediately) == ("hi", ReplyMode.TEXT, True)
    msg = parse_request(InboundMessage("client-message", "m", {"t": "x", "d": [1]}))
    assert isinstance(msg, ClientMessage) and (msg.t, msg.d) == ("x", [1])


@pytest.mark.parametrize(("data", "where"), [({"t": 1}, "data.t"), ({"buttons": ["x"]}, "data.buttons.0")])
def test_bad_data_is_a_violation_naming_the_field(data: dict[str, Any], where: str) -> None:
    type_ = "client-message" if "t" in data else "dtmf"
    with pytest.raises(RtviViolation, match=where):
        parse_request(InboundMessage(type_, "i", data))


def test_a_client_of_another_major_version_is_not_compatible() -> None:
    assert compatible("2.0.3") and not compatible("1.0.0") and not compatible("")
