"""The conformance driver plays the server's side against a plain brain (remote tools, events, the screen)."""

from __future__ import annotations

import logging

import pytest
from pydantic import BaseModel

import brisvox
from brisvox.core.errors import DeadlineExceeded
from brisvox.sdk import Brain, protocol
from brisvox.sdk.testing import BrainDriver
from brisvox.transport.rtvi.ui import Action, AppEvent, UiAnswer, UiContract


class OpenConfirm(Action):
    nonce: str
    summary: str


class ConfirmAnswered(AppEvent):
    nonce: str
    answer: str


class Day(BaseModel):
    day: str


class Desk(Brain):
    ui = UiContract(actions=(OpenConfirm,), events=(ConfirmAnswered,))

    def __init__(self) -> None:
        super().__init__()
        self.events: list[tuple[str, str | None]] = []
        self.booked: list[str] = []
        self.answers: list[UiAnswer] = []

    @brisvox.tool.read_only
    async def opening_hours(self, args: Day) -> str:
        """When the shop is open on a day."""
        return f"{args.day}: nine to five"

    @brisvox.tool.side_effect
    async def book(self, args: Day) -> str:
        """Book a visit, confirmed on screen."""
        self.booked.append(args.day)
        self.dispatch(OpenConfirm(nonce=f"n-{args.day}", summary=f"a visit on {args.day}"))
        return "on the screen to confirm"

    async def on_event(self, event: protocol.CallEvent) -> None:
        self.events.append((event.kind, event.text))
        if event.text == "crash":
            raise RuntimeError("the brain's bug")

    async def on_app_event(self, answer: UiAnswer) -> None:
        self.answers.append(answer)
        await super().on_app_event(answer)


async def test_the_driver_opens_the_session_and_reads_the_brains_ready() -> None:
    async with BrainDriver(Desk(), call_id="CA1", parameters={"from": "+33"}) as driver:
        assert driver.ready is not None
        assert [t.name for t in driver.ready.tools] == ["opening_hours", "book"]
        assert driver.brain.session is not None and driver.brain.session.call_id == "CA1"
        assert driver.brain.session.parameters == {"from": "+33"}


async def test_user_says_sends_the_servers_events_in_order_and_the_turn_completes() -> None:
    brain = Desk()
    async with BrainDriver(brain) as driver:
        turn = await driver.user_says("hello")
        assert turn.completed
        assert turn.report is None  # a plain brain: the call's model answers
    assert brain.events == [("turn_started", None), ("transcript", "hello"), ("user_turn", "hello"),
                            ("call_ended", None)]


async def test_a_handler_that_raises_is_logged_and_the_turn_is_not_completed(caplog: pytest.LogCaptureFixture) -> None:
    async with BrainDriver(Desk()) as driver:
        turn = await driver.user_says("crash")
        assert not turn.completed
        assert (await driver.user_says("fine")).completed  # the link goes on
    failed = [r for r in caplog.records if "on_event(transcript) failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None


async def test_remote_tools_answer_and_a_side_effect_runs_once_per_key() -> None:
    brain = Desk()
    async with BrainDriver(brain) as driver:
        hours = await driver.call_tool("opening_hours", {"day": "monday"})
        assert (hours.ok, hours.result) == (True, "monday: nine to five")
        first = await driver.call_tool("book", {"day": "friday"}, idempotency_key="call-1/1/t1.0")
        again = await driver.call_tool("book", {"day": "friday"}, idempotency_key="call-1/1/t1.0")
        assert (first.result, again.result) == ("on the screen to confirm",) * 2
        assert brain.booked == ["friday"]
        unknown = await driver.call_tool("nope")
        assert (unknown.ok, unknown.error) == (False, "unknown_tool")
        bad = await driver.call_tool("opening_hours", {"day": 3})
        assert not bad.ok and "day" in bad.error


async def test_a_dispatched_action_is_collected_and_the_answer_to_it_becomes_a_context_update() -> None:
    brain = Desk()
    async with BrainDriver(brain) as driver:
        await driver.call_tool("book", {"day": "friday"})
        commands = await driver.collect_ui_commands(min_count=1)
        assert commands == [{"command": "open_confirm", "payload": {"nonce": "n-friday", "summary": "a visit on friday"}}]
        await driver.send_ui_event("confirm_answered", {"nonce": "n-friday", "answer": "yes"})
        assert [a.answers for a in brain.answers] == [OpenConfirm(nonce="n-friday", summary="a visit on friday")]
        notes = [m.note for m in driver.messages if isinstance(m, protocol.ContextUpdate)]
        assert len(notes) == 1 and "confirm_answered" in notes[0] and "open_confirm" in notes[0]
        await driver.send_ui_event("confirm_answered", {"nonce": "n-friday", "answer": "no"})  # that sheet is closed
        assert len(brain.answers) == 1
        assert await driver.collect_ui_commands(min_count=0) == []  # nothing new since the last collection


async def test_an_app_event_the_contract_refuses_is_logged_and_changes_nothing(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING)
    brain = Desk()
    async with BrainDriver(brain) as driver:
        await driver.send_ui_event("confirm_answered", {"nonce": "x"})  # no answer field
        await driver.send_ui_event("unknown_event", {})
    assert brain.answers == []
    refused = [r.getMessage() for r in caplog.records if "app event refused" in r.getMessage()]
    assert len(refused) == 2 and "answer" in refused[0] and "not declared" in refused[1]


async def test_waiting_for_ui_commands_that_never_come_fails_naming_the_wait() -> None:
    async with BrainDriver(Desk()) as driver:
        with pytest.raises(DeadlineExceeded, match="UI command"):
            await driver.collect_ui_commands(min_count=1)


async def test_a_frame_the_server_would_refuse_fails_the_driver_at_close() -> None:
    brain = Desk()
    with pytest.raises(AssertionError, match="would refuse"):
        async with BrainDriver(brain):
            assert brain._link is not None
            await brain._link.outbox.send('{"type": "say", "text": ""}')


async def test_barge_in_sends_the_turn_and_what_was_heard() -> None:
    brain = Desk()
    async with BrainDriver(brain) as driver:
        await driver.user_says("hi")
        await driver.barge_in(heard="Hello, how can")
    assert brain.events[-3:] == [("turn_started", None), ("bot_heard", "Hello, how can"), ("call_ended", None)]


async def test_a_frame_from_the_server_that_does_not_parse_is_logged_and_the_link_goes_on(
        caplog: pytest.LogCaptureFixture) -> None:
    async with BrainDriver(Desk()) as driver:
        await driver._wire.inbound.put('{"type": "event", "kind": 3}')
        hours = await driver.call_tool("opening_hours", {"day": "monday"})
        assert hours.ok
    refused = [r.getMessage() for r in caplog.records if "from the server was refused" in r.getMessage()]
    assert len(refused) == 1 and "bad_field" in refused[0] and "kind" in refused[0]


async def test_an_action_from_a_brain_without_a_ui_contract_fails_the_tool_saying_why() -> None:
    class Plain(Brain):
        @brisvox.tool.read_only
        async def show(self) -> str:
            """Show something."""
            self.dispatch(OpenConfirm(nonce="n", summary="s"))
            return "shown"

    async with BrainDriver(Plain()) as driver:
        result = await driver.call_tool("show")
    assert not result.ok and "declares no UI contract" in result.error
