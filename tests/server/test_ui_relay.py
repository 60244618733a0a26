"""The screen of a call linked to an agent: the agent's ``ui.command`` to the call's screen, the
screen's app events back as ``ui.event`` (brisvox.server.ui_relay)."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from websockets.asyncio.client import connect

import brisvox
from brisvox.agent.context import SystemMessage, UserMessage
from brisvox.core.clock import SystemClock
from brisvox.core.errors import ChannelClosed
from brisvox.sdk import Brain, protocol, serve
from brisvox.sdk.testing import BrainDriver
from brisvox.server.ui_relay import UiRelay
from brisvox.sim import Call, Say, ScriptedLlm
from brisvox.transport.rtvi import Action, CallUi, UiContract
from brisvox.transport.rtvi.ui import UiAnswer, UiError
from tests.server.test_rtvi_endpoint import AGENT, ConfirmAnswered, OpenConfirm, collect, rtvi, serving


class ShowMap(Action):  # declared by the brain, not by the server's program
    place: str


CONTRACT = UiContract(actions=(OpenConfirm,), events=(ConfirmAnswered,))


def relay(post: Any = None, screen_post: Any = None) -> tuple[UiRelay, CallUi, list[dict[str, Any]],
                                                               list[protocol.UiEvent]]:
    shown: list[dict[str, Any]] = []
    events: list[protocol.UiEvent] = []

    def to_screen(message: dict[str, Any]) -> bool:
        shown.append(message)
        return True

    screen = CallUi(CONTRACT, screen_post or to_screen, "c1")
    return UiRelay(screen, post or (lambda e: events.append(e) is None)), screen, shown, events


def command(name: str, payload: dict[str, Any]) -> protocol.UiCommand:
    return protocol.UiCommand(type="ui.command", command=name, payload=payload)


def test_an_agents_declared_action_goes_to_the_screen_as_a_local_tools_dispatch_does() -> None:
    r, screen, shown, _ = relay()
    assert r.command(command("open_confirm", {"nonce": "n1", "summary": "Table at nine"})) is None
    assert shown[0]["type"] == "ui-command"
    assert shown[0]["data"] == {"command": "open_confirm", "payload": {"nonce": "n1", "summary": "Table at nine"}}
    assert screen.is_open("n1") and r.shown == 1  # its nonce is open: the tap answering it is taken


@pytest.mark.parametrize(("name", "payload", "code", "field", "says"), [
    ("show_map", {"place": "x"}, "undeclared", "command", "declared: open_confirm"),
    ("open_confirm", {"nonce": "n1"}, "bad_field", "payload.summary", "Field required"),
    ("open_confirm", {"nonce": "n1", "summary": "s", "extra": 1}, "bad_field", "payload.extra", "Extra inputs"),
])
def test_an_action_the_calls_contract_refuses_is_answered_with_its_code_and_field_and_nothing_is_shown(
        name: str, payload: dict[str, Any], code: str, field: str, says: str) -> None:
    r, _, shown, _ = relay()
    error = r.command(command(name, payload))
    assert error is not None and (error.code, error.field, error.command) == (code, field, "ui.command")
    assert says in error.message and shown == []


def test_a_call_without_a_screen_or_a_contract_refuses_every_action() -> None:
    error = UiRelay(None, lambda _e: True).command(command("open_confirm", {"nonce": "n", "summary": "s"}))
    assert error is not None and error.code == "no_screen"
    bare = UiRelay(CallUi(UiContract(), lambda _m: True), lambda _e: True)
    error = bare.command(command("open_confirm", {"nonce": "n", "summary": "s"}))
    assert error is not None and error.code == "undeclared" and "declares no UiContract" in error.message


def test_a_full_screen_queue_is_busy_and_an_ended_call_is_call_ended() -> None:
    r, _, _, _ = relay(screen_post=lambda _m: False)
    error = r.command(command("open_confirm", {"nonce": "n", "summary": "s"}))
    assert error is not None and error.code == "busy"

    def closed(_m: dict[str, Any]) -> bool:
        raise ChannelClosed("rtvi outbox is closed")

    r, _, _, _ = relay(screen_post=closed)
    error = r.command(command("open_confirm", {"nonce": "n", "summary": "s"}))
    assert error is not None and error.code == "call_ended"


def test_an_agents_server_message_goes_to_the_page_and_one_the_screen_refuses_is_answered_with_its_code() -> None:
    r, _, shown, _ = relay()
    assert r.command(protocol.UiMessage(type="ui.message", data={"step": "cooking"})) is None
    assert [(m["type"], m["data"]) for m in shown] == [("server-message", {"step": "cooking"})] and r.sent == 1
    big = r.command(protocol.UiMessage(type="ui.message", data="x" * (64 * 1024)))
    assert big is not None and (big.code, big.field, big.command) == ("bad_field", "data", "ui.message")
    none = UiRelay(None, lambda _e: True).command(protocol.UiMessage(type="ui.message", data=1))
    assert none is not None and (none.code, none.command) == ("no_screen", "ui.message")
    full, _, _, _ = relay(screen_post=lambda _m: False)
    busy = full.command(protocol.UiMessage(type="ui.message", data=1))
    assert busy is not None and busy.code == "busy"


async def test_a_brains_server_message_is_a_ui_message_frame_and_data_that_is_not_json_is_refused_naming_it() -> None:
    brain = Desk()
    with pytest.raises(UiError, match="not serving a call"):
        brain.send_server_message({"step": 1})
    async with BrainDriver(brain) as driver:
        brain.send_server_message({"step": "cooking", "eta": 4.5})
        with pytest.raises(UiError, match=r"data.eta: nan is not a JSON number"):
            brain.send_server_message({"eta": float("nan")})
        await driver.call_tool("opening_hours")  # a round trip: what was sent before it has arrived
    assert [m for m in driver.messages if isinstance(m, protocol.UiMessage)] == [
        protocol.UiMessage(type="ui.message", data={"step": "cooking", "eta": 4.5})]


def test_an_app_event_goes_to_the_agent_and_a_stale_or_untaken_one_stays_with_the_call() -> None:
    r, screen, _, events = relay()
    screen.relay = r.event
    r.command(command("open_confirm", {"nonce": "n1", "summary": "s"}))
    taken = screen.receive("confirm_answered", {"nonce": "n1", "answer": "yes"})
    assert screen.relayed(taken)  # the agent owns its note: the call adds none
    assert events == [protocol.UiEvent(type="ui.event", event="confirm_answered",
                                       payload={"nonce": "n1", "answer": "yes"})]
    stale = screen.receive("confirm_answered", {"nonce": "n1", "answer": "no"})  # that sheet is closed
    assert not screen.relayed(stale) and len(events) == 1
    down = UiRelay(screen, lambda _e: False)  # the link is down or full: the call notes it itself
    assert not down.event(UiAnswer(ConfirmAnswered(nonce="n2", answer="no"), None, "note"))
    screen.relay = None
    assert not screen.relayed(taken)


_json = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=6),
                     lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(max_size=6), kids, max_size=3),
                     max_leaves=10)


@settings(max_examples=300, deadline=None)
@given(st.sampled_from(["open_confirm", "show_map", "x"]),
       st.dictionaries(st.sampled_from(["nonce", "summary", "place", "other"]), _json, max_size=4))
def test_any_ui_command_is_shown_or_answered_with_a_documented_code(name: str, payload: dict[str, Any]) -> None:
    r, _, shown, _ = relay()
    error = r.command(command(name, payload))
    if error is None:
        assert len(shown) == 1 and shown[0]["data"]["command"] == name
    else:
        assert error.code in {"undeclared", "bad_field"} and shown == []
        protocol.parse_server_message(protocol.encode(error))  # a frame the agent's parser reads


# --- a served RTVI call linked to an SDK brain on 127.0.0.1 ---


class ConfirmArgs(BaseModel):
    summary: str


class Desk(Brain):
    ui = UiContract(actions=(OpenConfirm, ShowMap), events=(ConfirmAnswered,))

    def __init__(self) -> None:
        super().__init__()
        self.answers: list[UiAnswer] = []
        self.refusals: list[tuple[str, str | None, str]] = []

    async def on_error(self, error: protocol.ProtocolErrorMessage) -> None:
        self.refusals.append((error.code, error.command, error.field))

    @brisvox.tool.side_effect
    async def confirm_on_screen(self, args: ConfirmArgs) -> str:
        """Put the booking on the user's screen to confirm; returns at once."""
        self.dispatch(OpenConfirm(nonce="sheet-1", summary=args.summary))
        self.dispatch(ShowMap(place="the shop"))  # the server's program does not declare it: refused
        self.send_server_message({"booking": args.summary, "state": "confirming"})  # needs no declaration
        return "The sheet is up."

    @brisvox.tool.read_only
    async def opening_hours(self) -> str:
        """When the shop is open."""
        return "nine to five"

    async def on_app_event(self, answer: UiAnswer) -> None:
        self.answers.append(answer)
        await super().on_app_event(answer)  # the contract's note, as context.update


@pytest.mark.realtime
async def test_a_brains_ui_action_reaches_the_rtvi_page_and_the_tap_reaches_the_brain_with_one_note(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    brains: list[Desk] = []

    def make() -> Desk:
        brains.append(Desk())
        return brains[-1]

    clock = SystemClock()
    llm = ScriptedLlm(clock, [[Call(name="confirm_on_screen", arguments={"summary": "Table for two at nine"})],
                              [Say("It's on your screen.")], [Say("Booked.")]])
    server = await serve(make, "127.0.0.1", 0)
    agent = AGENT + f'\n[agent_link]\nurl = "ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"\n'
    try:
        async with serving(llm=llm, agent=agent, ui=CONTRACT) as url, connect(url, compression=None) as ws:
            await ws.send(rtvi("client-ready", {"version": "2.1.0"}, "r"))
            await collect(ws, "bot-stopped-speaking")  # the greeting
            await ws.send(rtvi("send-text", {"content": "book the nine o'clock", "options": {}}, "s1"))
            messages, _, _ = await collect(ws, "server-message")
            (sheet,) = [m for m in messages if m.type == "ui-command"]
            assert sheet.data == {"command": "open_confirm",
                                  "payload": {"nonce": "sheet-1", "summary": "Table for two at nine"}}
            assert messages[-1].data == {"booking": "Table for two at nine", "state": "confirming"}
            await collect(ws, "bot-stopped-speaking")
            await ws.send(rtvi("ui-event", {"event": "confirm_answered",
                                            "payload": {"nonce": "sheet-1", "answer": "yes"}}, "u1"))
            await ws.send(rtvi("client-message", {"t": "confirm_answered", "d": {"nonce": "sheet-1", "answer": "no"}},
                               "m1"))
            quiet, _, _ = await collect(ws, "server-response")  # the second tap: that sheet is closed
            assert quiet[-1].data == {"t": "confirm_answered", "d": {"accepted": False}}
            await ws.send(rtvi("send-text", {"content": "thanks", "options": {}}, "s2"))
            await collect(ws, "bot-stopped-speaking")
    finally:
        server.close()
        await server.wait_closed()
    (brain,) = brains
    assert [(type(a.event).__name__, a.answers) for a in brain.answers] == [
        ("ConfirmAnswered", OpenConfirm(nonce="sheet-1", summary="Table for two at nine"))]
    notes = [m.text for m in llm.requests[2].messages if isinstance(m, SystemMessage) and "confirm_answered" in m.text]
    assert len(notes) == 1 and '"answer":"yes"' in notes[0]  # the brain's note, once (the call added none)
    assert [m.text for m in llm.requests[2].messages if isinstance(m, UserMessage)][-1] == "thanks"
    assert [refusal for brain in brains for refusal in brain.refusals] == [("undeclared", "ui.command", "command")]
