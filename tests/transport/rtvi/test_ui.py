"""Typed UI actions and app events: the contract, the call's screen, nonces, the tools' dispatch."""

from __future__ import annotations

import json
from typing import Any, Literal

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel

from brisvox.agent.tools import ToolError
from brisvox.core.errors import ChannelClosed, ConfigError
from brisvox.transport.rtvi.ui import (
    MAX_OPEN_NONCES,
    MAX_SERVER_MESSAGE_BYTES,
    Action,
    AppEvent,
    CallUi,
    UiContract,
    UiError,
    UiErrorKind,
    UiEventError,
    default_note,
    server_message_data,
    ui_name,
)


class OpenConfirm(Action):
    nonce: str
    summary: str


class ShowMenu(Action):
    ui_name = "menu"
    items: list[str]


class ConfirmAnswered(AppEvent):
    nonce: str
    answer: Literal["yes", "no"]


class PageOpened(AppEvent):
    page: str


def contract(**kw: Any) -> UiContract:
    return UiContract(actions=(OpenConfirm, ShowMenu), events=(ConfirmAnswered, PageOpened), **kw)


def screen(**kw: Any) -> tuple[CallUi, list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    def post(message: dict[str, Any]) -> bool:
        sent.append(message)
        return True

    return CallUi(contract(**kw), post, "c1"), sent


def test_a_models_wire_name_is_its_class_name_in_snake_case_unless_it_sets_one() -> None:
    assert [ui_name(m) for m in (OpenConfirm, ShowMenu, ConfirmAnswered)] == ["open_confirm", "menu",
                                                                               "confirm_answered"]

    class HTTPStatusShown(Action):
        code: int

    assert ui_name(HTTPStatusShown) == "http_status_shown"


def test_a_contract_refuses_a_plain_model_and_two_models_with_one_name() -> None:
    class Plain(BaseModel):
        x: int

    class Menu(Action):
        pass

    with pytest.raises(ConfigError) as err:
        UiContract(actions=(ShowMenu, Menu), events=(Plain,))  # type: ignore[arg-type]
    assert "Plain" in str(err.value) and "two actions are named 'menu'" in str(err.value)


def test_dispatch_sends_a_ui_command_with_the_models_payload_and_returns_at_once() -> None:
    ui, sent = screen()
    ui.dispatch(OpenConfirm(nonce="n1", summary="Table for two at nine"))
    assert len(sent) == 1 and sent[0]["type"] == "ui-command"
    assert sent[0]["data"] == {"command": "open_confirm", "payload": {"nonce": "n1", "summary": "Table for two at nine"}}
    assert ui.is_open("n1") and ui.dispatched == 1


def test_an_undeclared_action_a_full_queue_and_an_ended_call_are_refused_with_their_kind() -> None:
    class Other(Action):
        pass

    ui, _ = screen()
    with pytest.raises(UiError) as undeclared:
        ui.dispatch(Other())
    assert undeclared.value.kind is UiErrorKind.UNDECLARED

    full = CallUi(contract(), lambda _m: False)
    with pytest.raises(UiError) as err:
        full.dispatch(OpenConfirm(nonce="n", summary="s"))
    assert err.value.kind is UiErrorKind.QUEUE_FULL and not full.is_open("n")

    def closed(_m: dict[str, Any]) -> bool:
        raise ChannelClosed("rtvi outbox is closed")

    with pytest.raises(UiError) as over:
        CallUi(contract(), closed).dispatch(OpenConfirm(nonce="n", summary="s"))
    assert over.value.kind is UiErrorKind.NO_SCREEN


def test_an_answer_closes_its_nonce_and_names_the_action_it_answers() -> None:
    ui, _ = screen()
    ui.dispatch(OpenConfirm(nonce="n1", summary="Table for two"))
    got = ui.receive("confirm_answered", {"nonce": "n1", "answer": "yes"})
    assert got.answers == OpenConfirm(nonce="n1", summary="Table for two") and not got.stale
    assert got.note == default_note(got.event, got.answers)
    assert "confirm_answered" in (got.note or "") and "open_confirm" in (got.note or "")
    again = ui.receive("confirm_answered", {"nonce": "n1", "answer": "no"})  # the sheet is closed now
    assert again.stale and again.note is None and ui.stale == 1


def test_a_tap_on_a_sheet_never_opened_changes_nothing() -> None:
    ui, _ = screen()
    got = ui.receive("confirm_answered", {"nonce": "nope", "answer": "yes"})
    assert got.stale and got.note is None and ui.answered == 0


def test_an_event_without_a_nonce_is_always_taken_and_on_event_writes_its_note() -> None:
    seen: list[tuple[AppEvent, Action | None]] = []

    def on_event(event: AppEvent, answers: Action | None) -> str | None:
        seen.append((event, answers))
        return f"the user opened {event.page}" if isinstance(event, PageOpened) else None

    ui, _ = screen(on_event=on_event)
    assert ui.receive("page_opened", {"page": "menu"}).note == "the user opened menu"
    assert seen == [(PageOpened(page="menu"), None)]


@pytest.mark.parametrize(("name", "payload", "says"), [
    ("nope", {}, "'nope' is not declared by this agent (declared: confirm_answered, page_opened)"),
    ("confirm_answered", {"nonce": "n"}, "payload.answer: Field required"),
    ("confirm_answered", {"nonce": "n", "answer": "maybe"}, "payload.answer"),
    ("page_opened", {"page": "x", "extra": 1}, "payload.extra: Extra inputs are not permitted"),
    ("page_opened", [1, 2], "payload"),
])
def test_an_event_the_agent_does_not_accept_is_refused_naming_what_was_wrong(name: str, payload: Any,
                                                                             says: str) -> None:
    ui, _ = screen()
    with pytest.raises(UiEventError) as err:
        ui.receive(name, payload)
    assert says in str(err.value)


def test_past_the_limit_the_oldest_open_sheet_is_forgotten() -> None:
    ui, _ = screen()
    for i in range(MAX_OPEN_NONCES + 1):
        ui.dispatch(OpenConfirm(nonce=f"n{i}", summary="s"))
    assert not ui.is_open("n0") and ui.is_open("n1") and ui.is_open(f"n{MAX_OPEN_NONCES}")


def test_a_screen_that_cannot_take_an_action_is_a_tool_error_the_model_reads() -> None:
    class NotAnAction(BaseModel):
        pass

    ui, _ = screen()
    with pytest.raises(ToolError):  # the tool engine answers tool_failed with its text
        ui.dispatch(NotAnAction())



_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
                     lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=8), kids, max_size=3),
                     max_leaves=12)
_payloads = _json | st.fixed_dictionaries({}, optional={"nonce": _json, "answer": _json, "page": _json})


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["confirm_answered", "page_opened"]) | st.text(max_size=16), _payloads)
def test_any_app_event_from_the_screen_is_an_answer_or_an_error_naming_it(name: str, payload: Any) -> None:
    ui, _ = screen()
    ui.dispatch(OpenConfirm(nonce="n", summary="s"))
    try:
        got = ui.receive(name, payload)
    except UiEventError as exc:
        assert "app event" in str(exc)
        return
    assert isinstance(got.event, ConfirmAnswered | PageOpened)
    assert got.stale == (got.note is None)
    json.dumps(got.event.model_dump(mode="json"))


def test_a_server_message_goes_out_as_rtvi_server_message_with_its_data_and_needs_no_declaration() -> None:
    ui, sent = screen()
    ui.send_message({"progress": 0.5, "steps": ["a", "b"], "done": False, "note": None})
    ui.send_message(ShowMenu(items=["soup"]))  # a model is sent as its JSON form
    assert [m["type"] for m in sent] == ["server-message", "server-message"]
    assert sent[0]["data"] == {"progress": 0.5, "steps": ["a", "b"], "done": False, "note": None}
    assert sent[1]["data"] == {"items": ["soup"]}
    assert ui.messages == 2 and ui.dispatched == 0
    json.dumps(sent[0], allow_nan=False)


@pytest.mark.parametrize(("data", "named"), [
    ({"when": {1, 2}}, "data.when: a set is not JSON"),
    ({"rows": [1, float("nan")]}, "data.rows[1]: nan is not a JSON number"),
    ([{"x": float("inf")}], "data[0].x: inf is not a JSON number"),
    ({3: "a"}, "data: the key 3 is a int, not a string"),
    (object(), "data: a object is not JSON"),
    ({"blob": "x" * MAX_SERVER_MESSAGE_BYTES}, f"over {MAX_SERVER_MESSAGE_BYTES}"),
])
def test_a_server_message_that_is_not_json_is_refused_naming_the_bad_value_and_nothing_is_sent(data: Any,
                                                                                                named: str) -> None:
    ui, sent = screen()
    with pytest.raises(UiError) as err:
        ui.send_message(data)
    assert err.value.kind is UiErrorKind.NOT_JSON and named in str(err.value)
    assert sent == [] and ui.messages == 0


def test_a_server_message_nested_too_deep_is_refused() -> None:
    deep: Any = "leaf"
    for _ in range(40):
        deep = [deep]
    with pytest.raises(UiError, match="nested deeper than 32"):
        server_message_data(deep)


def test_a_server_message_on_a_full_queue_or_an_ended_call_is_refused_with_its_kind() -> None:
    with pytest.raises(UiError) as full:
        CallUi(contract(), lambda _m: False).send_message({"a": 1})
    assert full.value.kind is UiErrorKind.QUEUE_FULL

    def closed(_m: dict[str, Any]) -> bool:
        raise ChannelClosed("rtvi outbox is closed")

    with pytest.raises(UiError) as over:
        CallUi(contract(), closed).send_message({"a": 1})
    assert over.value.kind is UiErrorKind.NO_SCREEN


@settings(max_examples=200, deadline=None)
@given(_json)
def test_any_json_value_is_sent_as_is(data: Any) -> None:
    ui, sent = screen()
    try:
        ui.send_message(data)
    except UiError as exc:  # only an infinite float is refused (hypothesis's floats include them)
        assert "is not a JSON number" in str(exc)
        return
    assert sent[0]["data"] == data
