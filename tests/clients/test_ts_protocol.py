"""The TypeScript client reads and writes the agent protocol exactly as the Python reference does.

Frames made from the Python models (every message type, every field) are parsed by the client's
parsers in Node and must give the same message; bad frames must be refused with the same
``code`` and ``field``.  A differential fuzz then holds the client's parsers to pydantic's strict
mode on any frame: the client accepts nothing the Python side refuses, and names the same field.
"""

from __future__ import annotations

import base64
import json
import re
import typing
from pathlib import Path
from typing import Annotated, Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import BaseModel, Field, TypeAdapter, ValidationError

from brisvox.sdk import protocol as p
from tests.clients._node import parse_in_node
from tests.sdk.test_protocol import VALID as VALID_AGENT

pytestmark = pytest.mark.slow

AGENT_MODELS: tuple[type[BaseModel], ...] = typing.get_args(p.AgentMessage)
SERVER_MODELS: tuple[type[BaseModel], ...] = typing.get_args(p.ServerMessage)


def _tag(model: type[BaseModel]) -> str:
    tag: str = typing.get_args(model.model_fields["type"].annotation)[0]
    return tag


PYTHON_AGENT_TYPES = {_tag(m) for m in AGENT_MODELS}
PYTHON_SERVER_TYPES = {_tag(m) for m in SERVER_MODELS}
# Messages the client knows that this Python protocol module does not define yet (changes made at
# the same time add them); each is checked here as soon as the module defines it.
PENDING_AGENT = {"transfer", "ui.command", "ui.message"} - PYTHON_AGENT_TYPES
PENDING_SERVER = {"ui.event"} - PYTHON_SERVER_TYPES

SPEC = {"name": "lookup", "description": "Look it up.", "parameters": {"type": "object", "properties": {}}}
MORE_AGENT: list[BaseModel] = [
    p.Ready(type="ready", v=1),
    p.Ready(type="ready", v=1, tools=(p.RemoteToolSpec(**SPEC), p.RemoteToolSpec(
        name="b-2", description="", parameters={"type": "object"}, kind="read_only", timeout=120, repeatable=True))),
    p.ToolResult(type="tool.result", id="r3", ok=True),
    p.ToolResult(type="tool.result", id="r4", ok=True, result=[None, 1.5, {"é": "ü"}]),
    p.Say(type="say", text="Hi."),
    p.Say(type="say", text="", reply_to="t1", final=True),
    p.End(type="end"),
    p.ToolsSet(type="tools.set", names=()),
]
SERVER: list[BaseModel] = [
    p.SessionStart(type="session.start", v=1, call_id="CA1", agent="shop", transport="twilio",
                   parameters={"encoding": "mulaw", "from": "+1555"}, resume=True),
    p.SessionStart(type="session.start", v=1, call_id="c", agent="", transport="websocket"),
    *(p.CallEvent(type="event", kind=kind, turn=4, text="hello there") for kind in
      ("transcript", "user_turn", "bot_heard")),
    p.CallEvent(type="event", kind="turn_started", turn=0),
    p.CallEvent(type="event", kind="tool_settled", turn=2, tool="book", outcome="late_result"),
    p.CallEvent(type="event", kind="call_ended"),
    p.ToolCallRequest(type="tool.call", id="r1", name="book", arguments={"day": "monday", "n": [1, {"x": None}]},
                      idempotency_key="c/2/t2.0", timeout=3.0),
    p.ProtocolErrorMessage(type="error", code="not_supported", field="type", message="say is not applied"),
    p.ProtocolErrorMessage(type="error", code="unexpected"),
    p.TurnRequest(type="turn.request", id="t1", turn=3, text="when do you open"),
    p.TurnRequest(type="turn.request", id="t2"),
]
if "transfer" not in PENDING_AGENT:
    MORE_AGENT.append(p.Transfer(type="transfer", to="+15551234567"))
if "ui.command" not in PENDING_AGENT:
    MORE_AGENT.append(p.UiCommand(type="ui.command", command="show_map", payload={"c": [1.5]}))
if "ui.message" not in PENDING_AGENT:
    MORE_AGENT += [p.UiMessage(type="ui.message", data=[1, None, "é"]), p.UiMessage(type="ui.message")]
if "ui.event" not in PENDING_SERVER:
    SERVER += [p.UiEvent(type="ui.event", event="confirm_answered", payload={"answer": "yes"}),
               p.UiEvent(type="ui.event", event="ping")]
if "command" in p.ProtocolErrorMessage.model_fields:
    SERVER.append(p.ProtocolErrorMessage(type="error", code="no_carrier", message="no line", command="transfer"))
    SERVER.append(p.ProtocolErrorMessage(type="error", code="overtaken", message="a barge-in came first",
                                         command="say"))


def test_the_clients_error_codes_include_every_code_of_the_python_protocol() -> None:
    source = (Path(__file__).resolve().parents[2] / "clients" / "ts" / "src" / "protocol.ts").read_text()
    enum = source[source.index("export enum ErrorCode {"):]
    client = set(re.findall(r'= "([a-z_]+)",', enum[:enum.index("\n}")]))
    assert {c.value for c in p.ErrorCode} <= client


def _dumped(message: BaseModel) -> dict[str, Any]:
    """The message as the client returns it: JSON, with the fields Python leaves out when None left out."""
    return {k: v for k, v in message.model_dump(mode="json").items() if v is not None}


def _comparable(value: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in value.items() if v is not None}


def test_the_examples_cover_every_message_type_and_field_of_the_python_protocol() -> None:
    for models, examples in ((AGENT_MODELS, [*VALID_AGENT, *MORE_AGENT]), (SERVER_MODELS, SERVER)):
        for model in models:
            mine = [json.loads(p.encode(m)) for m in examples if isinstance(m, model)]
            assert mine, f"no example of {model.__name__}"
            seen = set().union(*mine)
            assert seen == set(model.model_fields), f"{model.__name__}: no example sets {set(model.model_fields) - seen}"


def test_every_python_message_parses_in_the_client_to_the_same_message() -> None:
    frames = [{"side": "agent", "text": p.encode(m)} for m in [*VALID_AGENT, *MORE_AGENT]]
    frames += [{"side": "server", "text": p.encode(m)} for m in SERVER]
    got = parse_in_node(frames)
    expected = [_dumped(m) for m in [*VALID_AGENT, *MORE_AGENT, *SERVER]]
    assert [_comparable(g.get("message", g)) for g in got] == expected


def test_what_the_client_sends_for_each_command_the_python_parser_reads_as_the_same_message() -> None:
    examples = [*VALID_AGENT, *MORE_AGENT]
    got = parse_in_node([{"side": "encode", "message": json.loads(p.encode(m))} for m in examples])
    assert [p.parse_agent_message(g["frame"]) for g in got] == examples
    transfer = parse_in_node([{"side": "encode", "message": {"type": "transfer", "to": "+15551234567"}}])[0]
    assert json.loads(transfer["frame"]) == {"type": "transfer", "to": "+15551234567"}


def test_the_client_refuses_to_send_what_the_python_parser_refuses_naming_the_same_field() -> None:
    bad = [{"type": "say", "text": ""}, {"type": "tools.set", "names": ["ok", "not ok"]},
           {"type": "tool.result", "id": "r1", "ok": True, "error": "e" * 4097},
           {"type": "ready", "v": 1, "tools": [{**SPEC, "timeout": 500}]}, {"type": "end", "farewell": 3},
           {"type": "say", "text": "Hi.", "final": True},
           {"type": "say", "text": "Hi.", "reply_to": "t1", "interrupt": True},
           {"type": "say", "text": "", "reply_to": "t1"}]
    got = parse_in_node([{"side": "encode", "message": m} for m in bad])
    for message, result in zip(bad, got, strict=True):
        with pytest.raises(p.ProtocolError) as refused:
            parsed = p.parse_agent_message(json.dumps(message))
            # The rules between a say's fields, as the server's link applies them (an agent that answers turns).
            refusal = p.say_refusal(parsed, True) if isinstance(parsed, p.Say) else None
            if refusal is not None:
                raise refusal
        assert result == {"code": refused.value.code.value, "field": refused.value.field}


def test_the_client_knows_every_python_message_type_and_only_the_pending_ones_more() -> None:
    known = ["ready", "tool.result", "say", "context.update", "tools.set", "end", "transfer", "ui.command", "ui.message",
             "session.start", "event", "tool.call", "error", "ui.event", "turn.request", "nope"]
    got = parse_in_node([{"side": "agent", "text": json.dumps({"type": t})} for t in known] +
                        [{"side": "server", "text": json.dumps({"type": t})} for t in known])
    client_agent = {t for t, g in zip(known, got[:len(known)], strict=True) if g.get("field") != "type"}
    client_server = {t for t, g in zip(known, got[len(known):], strict=True) if g.get("field") != "type"}
    assert client_agent == PYTHON_AGENT_TYPES | PENDING_AGENT
    assert client_server == PYTHON_SERVER_TYPES | PENDING_SERVER


BAD_FRAMES: list[tuple[str, str | bytes]] = [
    ("agent", '{"type":"tool.result","id":"a","ok":"yes"}'),
    ("agent", '{"type":"tool.result","id":"","ok":true}'),
    ("agent", '{"type":"ready","v":1,"tools":[{"name":"a b","description":"d","parameters":{}}]}'),
    ("agent", '{"type":"ready","v":1,"tools":[{"name":"a","description":"d","parameters":{},"timeout":0}]}'),
    ("agent", '{"type":"ready","v":1,"tools":[{"name":"a","description":"d","parameters":{},"kind":"rw"}]}'),
    ("agent", '{"type":"ready","v":1,"tools":[{"name":"a","description":"d","parameters":[]}]}'),
    ("agent", '{"type":"ready","v":1,"tools":[{"name":"a","description":"d","parameters":{},"repeatable":1}]}'),
    ("agent", '{"type":"ready","v":2}'),
    ("agent", '{"type":"ready"}'),
    ("agent", '{"type":"say","text":"hi","loud":true}'),
    ("agent", '{"type":"say","loud":true}'),
    ("agent", '{"type":"say","text":"hi","reply_to":""}'),
    ("agent", '{"type":"say","text":"hi","final":"yes"}'),
    ("agent", '{"type":"ready","v":1,"answers_turns":1}'),
    ("agent", '{"type":"say","text":"hi","interrupt":"yes"}'),
    ("agent", '{"type":"context.update","note":7}'),
    ("agent", '{"type":"tools.set","names":["ok","no way"]}'),
    ("agent", '{"type":"tools.set","names":"book"}'),
    ("agent", '{"type":"end","farewell":null}'),
    ("agent", '{"type":"nope"}'),
    ("agent", '{"type":3}'),
    ("agent", '{"text":"hi"}'),
    ("agent", "[1]"),
    ("agent", "{"),
    ("agent", b"\xff"),
    ("agent", '{"type":"tool.result","id":"a","ok":true,"result":NaN}'),
    ("agent", '{"type":"tool.result","id":"a","ok":true,"result":Infinity}'),
    ("agent", " " * (p.MAX_MESSAGE_BYTES + 1)),
    ("server", '{"type":"session.start","v":1,"call_id":"c","agent":"a","transport":"t","parameters":{"k":1}}'),
    ("server", '{"type":"session.start","v":1,"call_id":"c","agent":"a"}'),
    ("server", '{"type":"session.start","v":7,"call_id":"c","agent":"a","transport":"t"}'),
    ("server", '{"type":"event","kind":"user_turn","turn":"3"}'),
    ("server", '{"type":"event","kind":"user_turn","turn":1.5}'),
    ("server", '{"type":"event","kind":"user_turn","extra":1}'),
    ("server", '{"type":"tool.call","id":"r","name":"n","arguments":[],"idempotency_key":"k","timeout":1}'),
    ("server", '{"type":"tool.call","id":"r","name":"n","arguments":{},"idempotency_key":"k","timeout":"1"}'),
    ("server", '{"type":"error"}'),
    ("server", '{"type":"turn.request"}'),
    ("server", '{"type":"turn.request","id":"t1","text":3}'),
]


def _wire(side: str, frame: str | bytes) -> dict[str, str]:
    if isinstance(frame, bytes):
        return {"side": side, "base64": base64.b64encode(frame).decode()}
    return {"side": side, "text": frame}


# Frames the Python parser reads in pydantic's lax mode (a number from a string) and the client refuses
# as the strict mode does: a server never sends them (it encodes from its models).
COERCED = {'{"type":"event","kind":"user_turn","turn":"3"}',
           '{"type":"tool.call","id":"r","name":"n","arguments":{},"idempotency_key":"k","timeout":"1"}'}


def test_a_bad_frame_is_refused_by_the_client_with_the_pythons_code_and_field() -> None:
    got = parse_in_node([_wire(side, frame) for side, frame in BAD_FRAMES])
    for (side, frame), result in zip(BAD_FRAMES, got, strict=True):
        parse = p.parse_agent_message if side == "agent" else p.parse_server_message
        if frame in COERCED:
            parse(frame)  # accepted by the lax parser, refused by the strict one below
            assert result == _strict(side, frame) == {"code": "bad_field", "field": frame.split('"')[-4]}
            continue
        with pytest.raises(p.ProtocolError) as refused:
            parse(frame)
        assert result == {"code": refused.value.code.value, "field": refused.value.field}, frame[:100]


# --- the differential fuzz ------------------------------------------------------------------------

_ADAPTERS = {
    "agent": TypeAdapter[Any](Annotated[p.AgentMessage, Field(discriminator="type")]),
    "server": TypeAdapter[Any](Annotated[p.ServerMessage, Field(discriminator="type")]),
}


def _strict(side: str, frame: str) -> dict[str, Any]:
    """The Python parser's answer in pydantic's strict mode (the client's contract), as Node reports it."""
    parse = p.parse_agent_message if side == "agent" else p.parse_server_message
    try:
        parse(frame)
    except p.ProtocolError as exc:
        if exc.code is not p.ErrorCode.BAD_FIELD or exc.field == "type":
            return {"code": exc.code.value, "field": exc.field}
    value = json.loads(frame)
    try:
        message = _ADAPTERS[side].validate_json(json.dumps(value), strict=True)
    except ValidationError as exc:
        loc = exc.errors(include_url=False)[0]["loc"]
        if loc and loc[0] == value.get("type"):
            loc = loc[1:]
        return {"code": "bad_field", "field": ".".join(str(part) for part in loc) or "type"}
    return {"message": _dumped(message)}


_text = st.text(st.characters(blacklist_categories=("Cs",)), max_size=12)
# Never integral: JSON.parse cannot tell 3.0 from 3, and an integer field refuses 3.0 in Python.
_float = st.builds(lambda whole, part: whole + part / 1000, st.integers(-10**6, 10**6), st.integers(1, 999))
_int = st.integers(-(2**53), 2**53)
_json = st.recursive(st.none() | st.booleans() | _int | _float | _text,
                     lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_text, inner, max_size=3),
                     max_leaves=8)
# Every field the Python models have (a field only the client knows would be refused there), and one neither has.
_keys = st.sampled_from(sorted({name for m in AGENT_MODELS + SERVER_MODELS for name in m.model_fields} | {"x"}))
_tags = st.sampled_from(sorted(PYTHON_AGENT_TYPES | PYTHON_SERVER_TYPES | {"", "x"}))
_EXAMPLES = {"agent": [*VALID_AGENT, *MORE_AGENT], "server": SERVER}


@st.composite
def _frames(draw: st.DrawFn) -> tuple[str, str]:
    side = draw(st.sampled_from(["agent", "server"]))
    value: Any = json.loads(p.encode(draw(st.sampled_from(_EXAMPLES[side]))))
    how = draw(st.sampled_from(["set", "drop", "nested", "tag", "any"]))
    if how == "set":
        for _ in range(draw(st.integers(1, 3))):
            value[draw(_keys)] = draw(_json)
    elif how == "drop" and value:
        value.pop(draw(st.sampled_from(sorted(value))))
    elif how == "nested":
        for key in ("tools", "parameters", "names", "arguments", "payload"):
            if isinstance(value.get(key), list) and value[key]:
                item = value[key][0]
                if isinstance(item, dict):
                    item[draw(st.sampled_from([*sorted(SPEC), "kind", "timeout", "repeatable", "x"]))] = draw(_json)
                else:
                    value[key][0] = draw(_json)
            elif isinstance(value.get(key), dict):
                value[key][draw(_text)] = draw(_json)
    elif how == "tag":
        value["type"] = draw(_tags)
    else:
        value = draw(_json)
    return side, json.dumps(value)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_frames(), min_size=25, max_size=40))
def test_fuzz_the_clients_parsers_answer_any_frame_as_pythons_strict_parser_does(frames: list[tuple[str, str]]) -> None:
    got = parse_in_node([_wire(side, frame) for side, frame in frames])
    for (side, frame), result in zip(frames, got, strict=True):
        assert "crash" not in result, (frame, result)
        if "message" in result:
            result = {"message": _comparable(result["message"])}
            parse = p.parse_agent_message if side == "agent" else p.parse_server_message
            assert _dumped(parse(frame)) == result["message"]  # what the client accepts, Python accepts as well
        assert result == _strict(side, frame), (side, frame)
