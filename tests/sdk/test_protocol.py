"""The agent protocol's parser: every message round-trips; anything else is a ProtocolError naming the field."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from brisvox.sdk import protocol as p

SPEC = {"name": "lookup", "description": "Look it up.", "parameters": {"type": "object", "properties": {}}}
VALID: list[p.AgentMessage] = [
    p.Ready(type="ready", v=1, tools=(p.RemoteToolSpec(**SPEC, kind="side_effect", timeout=2),), resume=True),
    p.ToolResult(type="tool.result", id="r1", ok=True, result={"x": [1, "two"]}),
    p.ToolResult(type="tool.result", id="r2", ok=False, error="no such day"),
    p.Say(type="say", text="One moment.", interrupt=True),
    p.Ready(type="ready", v=1, answers_turns=True),
    p.Say(type="say", text="Monday, nine to five.", reply_to="t1"),
    p.Say(type="say", text="", reply_to="t1", final=True),
    p.ContextUpdate(type="context.update", note="The user is a member."),
    p.ToolsSet(type="tools.set", names=("lookup",)),
    p.End(type="end", farewell="Bye."),
    p.UiCommand(type="ui.command", command="open_confirm", payload={"nonce": "n1", "summary": "9:00"}),
    p.Transfer(type="transfer", to="+14155550100"),
    p.UiMessage(type="ui.message", data={"progress": 0.5, "steps": ["a", None]}),
]
SERVER_VALID: list[p.ServerMessage] = [
    p.SessionStart(type="session.start", v=1, call_id="c", agent="a", transport="websocket"),
    p.CallEvent(type="event", kind="user_turn", turn=3, text="hi"),
    p.ToolCallRequest(type="tool.call", id="r1", name="x", arguments={}, idempotency_key="c/1/t1.0", timeout=5.0),
    p.ProtocolErrorMessage(type="error", code="bad_field", field="ok"),
    p.ProtocolErrorMessage(type="error", code="no_carrier", message="no carrier", command="transfer"),
    p.UiEvent(type="ui.event", event="confirm_answered", payload={"nonce": "n1", "answer": "yes"}),
    p.TurnRequest(type="turn.request", id="t1", turn=2, text="when do you open"),
]


@pytest.mark.parametrize("message", VALID, ids=lambda m: m.type)
def test_every_agent_message_round_trips_through_its_frame(message: p.AgentMessage) -> None:
    assert p.parse_agent_message(p.encode(message)) == message


def test_server_messages_round_trip_for_the_sdk() -> None:
    for message in SERVER_VALID:
        assert p.parse_server_message(p.encode(message)) == message


def test_a_ui_name_that_is_not_snake_case_is_refused_naming_the_field() -> None:
    with pytest.raises(p.ProtocolError) as refused:
        p.parse_agent_message('{"type": "ui.command", "command": "OpenConfirm", "payload": {}}')
    assert (refused.value.code, refused.value.field) == (p.ErrorCode.BAD_FIELD, "command")
    with pytest.raises(p.ProtocolError) as refused:
        p.parse_server_message('{"type": "ui.event", "event": "", "payload": null}')
    assert (refused.value.code, refused.value.field) == (p.ErrorCode.BAD_FIELD, "event")


@pytest.mark.parametrize(("say", "answers_turns", "code", "field"), [
    (p.Say(type="say", text=""), False, p.ErrorCode.BAD_FIELD, "text"),
    (p.Say(type="say", text="hi", final=True), True, p.ErrorCode.BAD_FIELD, "final"),
    (p.Say(type="say", text="hi", reply_to="t1"), False, p.ErrorCode.UNEXPECTED, "reply_to"),
    (p.Say(type="say", text="hi", reply_to="t1", interrupt=True), True, p.ErrorCode.BAD_FIELD, "interrupt"),
    (p.Say(type="say", text="", reply_to="t1"), True, p.ErrorCode.BAD_FIELD, "text"),
])
def test_the_rules_between_a_says_fields_refuse_naming_the_field(say: p.Say, answers_turns: bool,
                                                                   code: p.ErrorCode, field: str) -> None:
    refusal = p.say_refusal(say, answers_turns)
    assert refusal is not None and (refusal.code, refusal.field) == (code, field)


def test_a_reply_line_and_its_end_pass_the_rules_of_an_agent_that_answers_the_turns() -> None:
    assert p.say_refusal(p.Say(type="say", text="Hi.", reply_to="t1"), True) is None
    assert p.say_refusal(p.Say(type="say", text="", reply_to="t1", final=True), True) is None
    assert p.say_refusal(p.Say(type="say", text="Hi.", interrupt=True), False) is None


@pytest.mark.parametrize(("frame", "code", "field"), [
    ('{"type":"tool.result","id":"a","ok":"yes"}', p.ErrorCode.BAD_FIELD, "ok"),
    ('{"type":"ready","v":1,"tools":[{"name":"a b","description":"d","parameters":{}}]}',
     p.ErrorCode.BAD_FIELD, "tools.0.name"),
    ('{"type":"ready","v":1,"tools":[{"name":"a","description":"d","parameters":{},"timeout":0}]}',
     p.ErrorCode.BAD_FIELD, "tools.0.timeout"),
    ('{"type":"say","text":"hi","loud":true}', p.ErrorCode.BAD_FIELD, "loud"),
    ('{"type":"say"}', p.ErrorCode.BAD_FIELD, "text"),
    ('{"type":"transfer","to":""}', p.ErrorCode.BAD_FIELD, "to"),
    ('{"type":"nope"}', p.ErrorCode.BAD_FIELD, "type"),
    ('{"text":"hi"}', p.ErrorCode.BAD_FIELD, "type"),
    ('{"type":"ready","v":2}', p.ErrorCode.VERSION, "v"),
    ("[1]", p.ErrorCode.NOT_OBJECT, ""),
    ("{", p.ErrorCode.NOT_JSON, ""),
    (b"\xff", p.ErrorCode.NOT_JSON, ""),
    ("[" * 100_000, p.ErrorCode.NOT_JSON, ""),
    ('{"type":"tool.result","id":"a","ok":true,"result":NaN}', p.ErrorCode.NOT_JSON, ""),
    (" " * (p.MAX_MESSAGE_BYTES + 1), p.ErrorCode.TOO_LARGE, ""),
    ('{"type":"say","text":"' + "é" * (p.MAX_MESSAGE_BYTES // 2) + '"}', p.ErrorCode.TOO_LARGE, ""),
], ids=["bool", "tool name", "timeout", "unknown key", "missing", "empty destination", "unknown type", "no type", "version",
        "array", "broken", "not utf-8", "deep", "nan", "large", "large in bytes, not in characters"])
def test_a_bad_frame_is_refused_with_its_code_and_the_field_it_names(frame: str | bytes, code: p.ErrorCode,
                                                                     field: str) -> None:
    with pytest.raises(p.ProtocolError) as refused:
        p.parse_agent_message(frame)
    assert (refused.value.code, refused.value.field) == (code, field)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
                     lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
                     max_leaves=20)
_types = st.sampled_from(["ready", "tool.result", "say", "context.update", "tools.set", "end", "transfer", "ui.command",
                          "ui.message", "session.start", "event", "tool.call", "error", "ui.event", "turn.request", "x",
                          ""])
_fields = st.sampled_from(["v", "id", "ok", "result", "error", "text", "interrupt", "note", "names", "farewell",
                           "tools", "resume", "name", "parameters", "kind", "timeout", "command", "payload", "to",
                           "event", "call_id", "turn", "arguments", "idempotency_key", "code", "field", "data",
                           "answers_turns", "reply_to", "final"])


def _mutate(message: p.AgentMessage | p.ServerMessage, data: st.DataObject) -> Any:
    value: dict[str, Any] = json.loads(p.encode(message))
    for _ in range(data.draw(st.integers(0, 3))):
        value[data.draw(_fields)] = data.draw(_json)
    if data.draw(st.booleans()):
        value["type"] = data.draw(_types)
    return value


def _fuzz(data: st.DataObject, valid: list[Any], parse: Callable[[str | bytes], Any]) -> None:
    """A mutated valid message, any JSON or any bytes: parsed, or refused with a documented error;
    a parsed ``say`` then passes the link's rules between fields (``say_refusal``) or is refused
    with a documented error too."""
    kind = data.draw(st.sampled_from(["mutated", "json", "bytes"]))
    if kind == "mutated":
        frame: str | bytes = json.dumps(_mutate(data.draw(st.sampled_from(valid)), data))
    elif kind == "json":
        frame = json.dumps(data.draw(_json))
    else:
        frame = data.draw(st.binary(max_size=64))
    try:
        message = parse(frame)
    except p.ProtocolError as exc:
        assert exc.code in p.ErrorCode and isinstance(exc.field, str)
    else:
        assert parse(p.encode(message)) == message
        if isinstance(message, p.Say):
            for answers_turns in (False, True):
                refusal = p.say_refusal(message, answers_turns)
                assert refusal is None or (refusal.code in p.ErrorCode and refusal.field in
                                           ("text", "final", "interrupt", "reply_to"))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_servers_inbound_parser_never_crashes_and_only_raises_documented_errors(data: st.DataObject) -> None:
    _fuzz(data, VALID, p.parse_agent_message)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_the_sdks_inbound_parser_never_crashes_and_only_raises_documented_errors(data: st.DataObject) -> None:
    _fuzz(data, SERVER_VALID, p.parse_server_message)
