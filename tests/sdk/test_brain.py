"""The SDK's Brain served on 127.0.0.1 and the server's link to it (no engine: the link's own contract)."""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import pytest
from pydantic import BaseModel
from websockets.asyncio.server import Server

import brisvox
from brisvox.agent.context import ToolCall
from brisvox.agent.tools import CancelToken, ToolCallContext, ToolError, ToolKind
from brisvox.core.clock import SystemClock, bounded
from brisvox.core.errors import ChannelClosed, ConfigError, DeadlineExceeded
from brisvox.core.tasks import TaskScope
from brisvox.engine import events as ev
from brisvox.engine.agent_input import BotLine, Refusal
from brisvox.sdk import Brain, protocol, serve
from brisvox.sdk.brain import SEND_TIMEOUT, START_TIMEOUT, serve_wire
from brisvox.server.agent_link import AgentLink, AgentLinkConfig


class Day(BaseModel):
    day: str


class Desk(Brain):
    booked: list[str]

    def __init__(self) -> None:
        super().__init__()
        self.booked = []
        self.events: list[protocol.CallEvent] = []
        self.errors: list[protocol.ProtocolErrorMessage] = []

    @brisvox.tool.read_only(timeout=2.0)
    async def opening_hours(self, args: Day) -> str:
        """When the shop is open on a day."""
        if args.day == "sunday":
            raise ToolError("closed on sundays")
        return f"{args.day}: nine to five"

    @brisvox.tool.side_effect
    async def book(self, args: Day) -> str:
        """Book a visit."""
        self.booked.append(args.day)
        return "booked"

    async def on_event(self, event: protocol.CallEvent) -> None:
        self.events.append(event)

    async def on_error(self, error: protocol.ProtocolErrorMessage) -> None:
        self.errors.append(error)


@asynccontextmanager
async def served(factory: type[Brain] | object) -> AsyncIterator[tuple[Server, str]]:
    server = await serve(factory, "127.0.0.1", 0)  # type: ignore[arg-type]
    try:
        yield server, f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


def ctx(call_id: str, name: str, args: dict[str, str]) -> ToolCallContext:
    return ToolCallContext(session="c1", epoch=1, call=ToolCall(id=call_id, name=name, arguments=args),
                           cancel=CancelToken())


async def open_link(url: str, scope: TaskScope, failures: list[str] | None = None) -> AgentLink | None:
    return await AgentLink.open(AgentLinkConfig(url=url, connect_timeout=2.0, ready_timeout=2.0), SystemClock(),
                                call_id="c1", agent="desk", transport="loopback", parameters={}, scope=scope,
                                on_failure=failures.append if failures is not None else None)


def test_a_sync_tool_is_refused_where_the_brain_declares_it() -> None:
    with pytest.raises(ConfigError, match="async"):
        class Bad(Brain):
            @brisvox.tool.read_only
            def hours(self) -> str:  # type: ignore[type-var]
                """Hours."""
                return "nine"


@pytest.mark.realtime
async def test_the_brains_tools_are_registered_with_their_kinds_and_answer_over_the_link() -> None:
    brains: list[Desk] = []

    def factory() -> Desk:
        brains.append(Desk())
        return brains[-1]

    async with served(factory) as (_, url), TaskScope("test") as scope:
        link = await open_link(url, scope)
        assert link is not None
        registry = link.tools_into(None)
        assert sorted(registry.names()) == ["book", "opening_hours"]
        assert registry.spec("book").kind is ToolKind.SIDE_EFFECT  # type: ignore[union-attr]
        assert registry.spec("opening_hours").description == "When the shop is open on a day."  # type: ignore[union-attr]
        hours = registry.get("opening_hours")
        assert hours is not None
        assert await hours.tool({"day": "monday"}, ctx("t1.0", "opening_hours", {})) == "monday: nine to five"
        with pytest.raises(ToolError, match="closed on sundays"):
            await hours.tool({"day": "sunday"}, ctx("t1.1", "opening_hours", {}))
        link.listen(ev.UserTurn(epoch=1, at=0.0, text="book monday"))
        book = registry.get("book")
        assert book is not None
        same = ctx("t1.2", "book", {})
        first, again = await asyncio.gather(book.tool({"day": "monday"}, same), book.tool({"day": "monday"}, same))
        assert (first, again) == ("booked", "booked")
        assert brains[0].booked == ["monday"]  # one idempotency key: the side effect ran once
        assert brains[0].session is not None and brains[0].session.call_id == "c1"
        await link.close()
    assert [(e.kind, e.text) for e in brains[0].events] == [("user_turn", "book monday"), ("call_ended", None)]


@pytest.mark.realtime
async def test_an_agent_that_cannot_be_reached_is_logged_once_counted_and_leaves_no_link(
        caplog: pytest.LogCaptureFixture) -> None:
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        unused_tcp_port = s.getsockname()[1]
    failures: list[str] = []
    async with TaskScope("test") as scope:
        assert await open_link(f"ws://127.0.0.1:{unused_tcp_port}", scope, failures) is None
    assert failures == ["open"]
    lines = [r for r in caplog.records if "could not open" in r.getMessage()]
    assert len(lines) == 1 and lines[0].exc_info is not None


@pytest.mark.realtime
async def test_a_lost_link_fails_the_waiting_call_and_every_later_one_as_the_agent_being_unavailable(
        caplog: pytest.LogCaptureFixture) -> None:
    started = asyncio.Event()

    class Slow(Brain):
        @brisvox.tool.read_only(timeout=10.0)
        async def wait(self) -> str:
            """Wait."""
            started.set()
            await asyncio.Event().wait()
            return "never"

    caplog.set_level(logging.WARNING)
    failures: list[str] = []
    async with TaskScope("test") as scope:
        async with served(Slow) as (_, url):
            link = await open_link(url, scope, failures)
            assert link is not None
            tool = link.tools_into(None).get("wait")
            assert tool is not None
            waiting = asyncio.ensure_future(tool.tool({}, ctx("t1.0", "wait", {})))
            await started.wait()
        with pytest.raises(ToolError, match="lost"):
            await waiting
        with pytest.raises(ToolError, match="unavailable"):
            await tool.tool({}, ctx("t1.1", "wait", {}))
        await link.close()
    assert failures == ["lost"]
    assert len([r for r in caplog.records if "agent link lost" in r.getMessage()]) == 1


@pytest.mark.realtime
async def test_a_lost_link_of_a_brain_that_declared_resume_is_reopened_and_serves_calls_again() -> None:
    starts: list[protocol.SessionStart] = []

    class Steady(Desk):
        resume = True

        async def on_event(self, event: protocol.CallEvent) -> None:
            if self.session is not None and self.session not in starts:
                starts.append(self.session)

    clock = SystemClock()
    async with TaskScope("test") as scope:
        async with served(Steady) as (_, url):
            config = AgentLinkConfig(url=url, connect_timeout=1.0, reopen_backoff=0.05)
            link = await AgentLink.open(config, clock, call_id="c1", agent="desk", transport="loopback",
                                        parameters={}, scope=scope)
            assert link is not None
            hours = link.tools_into(None).get("opening_hours")
            assert hours is not None
            assert await hours.tool({"day": "monday"}, ctx("t1.0", "opening_hours", {})) == "monday: nine to five"
            port = int(url.rsplit(":", 1)[1])
        # The agent process restarts on the same port.
        server = await serve(Steady, "127.0.0.1", port)
        try:
            for _ in range(200):
                if link.reopened and not link.lost:
                    break
                await clock.sleep(0.02)
            assert (link.reopened, link.lost) == (1, False)
            assert await hours.tool({"day": "friday"}, ctx("t2.0", "opening_hours", {})) == "friday: nine to five"
            link.listen(ev.UserTurn(epoch=2, at=0.0, text="hi"))
            await link.close()
        finally:
            server.close()
            await server.wait_closed()
    assert [s.resume for s in starts] == [True]  # the second session said it resumes


def kept_in(brains: list[Desk]) -> Callable[[], Desk]:
    """A brain factory that keeps each brain it makes in ``brains``."""

    def factory() -> Desk:
        brains.append(Desk())
        return brains[-1]

    return factory


@pytest.mark.realtime
async def test_the_agents_end_waits_for_the_bot_to_be_silent_and_its_commands_go_to_the_call() -> None:
    brains: list[Desk] = []
    clock = SystemClock()
    async with served(kept_in(brains)) as (_, url), TaskScope("test") as scope:
        link = await open_link(url, scope)
        assert link is not None
        link.listen(ev.BotText(epoch=1, at=0.0, round=0, text="Monday, nine to five."))
        await brains[0].end()
        await brains[0].say_line("Hello.", interrupt=True)  # read after the end: one socket, in order
        for _ in range(100):
            if len(link.input.commands):
                break
            await clock.sleep(0.01)
        assert link.input.commands.try_recv() == BotLine("Hello.", interrupt=True)  # for run_call(agent=)
        assert not link.ended.is_set()  # the bot is still speaking
        link.listen(ev.BotDone(epoch=1, at=0.5))
        assert link.ended.is_set()
        await link.close()


@pytest.mark.realtime
async def test_a_command_the_call_cannot_carry_out_is_answered_with_an_error_naming_it_the_brain_is_told_and_both_log_once(
        caplog: pytest.LogCaptureFixture) -> None:
    brains: list[Desk] = []
    clock = SystemClock()
    async with served(kept_in(brains)) as (_, url), TaskScope("test") as scope:
        link = await open_link(url, scope)
        assert link is not None
        link.input.close()  # the call has ended
        await brains[0].say_line("Hello.")
        for _ in range(100):
            if brains[0].errors:
                break
            await clock.sleep(0.01)
        await link.close()
    assert [(e.command, e.code) for e in brains[0].errors] == [("say", "call_ended")]
    told = [r.getMessage() for r in caplog.records if "the server refused" in r.getMessage()]
    assert told == ["brain: call c1: the server refused say: call_ended"]
    assert link.commands_refused == 1
    assert len([r for r in caplog.records if "was not carried out" in r.getMessage()]) == 1


def test_every_refusal_of_the_engine_is_an_error_code_of_the_protocol() -> None:
    assert {r.value for r in Refusal} <= {c.value for c in protocol.ErrorCode}


def test_the_engines_events_map_onto_the_protocols_event_kinds_and_the_rest_stay_on_the_server() -> None:
    from brisvox.agent.tools import Outcome
    from brisvox.server.agent_link import event_message

    seen = [event_message(e) for e in (
        ev.TurnStarted(epoch=2, at=0.0), ev.UserTranscript(epoch=2, at=0.0, text="hi", final=False),
        ev.UserTranscript(epoch=2, at=0.0, text="hi there", final=True), ev.UserTurn(epoch=2, at=0.0, text="hi there"),
        ev.BotHeard(epoch=2, at=0.0, round=0, text="Hel", played=0.2), ev.BotDone(epoch=2, at=0.0),
        ev.ToolCallSettled(epoch=2, at=0.0, call_id="t2.0", name="book", outcome=Outcome.LATE_RESULT, content="x",
                           is_error=False),
        ev.TtsFirstAudio(epoch=2, at=0.0))]
    assert [(m.kind, m.turn, m.text, m.tool, m.outcome) if m else None for m in seen] == [
        ("turn_started", 2, None, None, None), None, ("transcript", 2, "hi there", None, None),
        ("user_turn", 2, "hi there", None, None), ("bot_heard", 2, "Hel", None, None), ("bot_done", 2, None, None, None),
        ("tool_settled", 2, None, "book", "late_result"), None]


class MemoryWire:
    """A link whose sends can be made to hang (a peer that stopped reading)."""

    def __init__(self) -> None:
        self.inbound: asyncio.Queue[str | None] = asyncio.Queue()
        self.sent: list[str] = []
        self.stuck = False
        self.aborted = False

    async def send(self, frame: str) -> None:
        if self.stuck:
            await asyncio.Event().wait()
        self.sent.append(frame)

    async def recv(self) -> str | None:
        return await self.inbound.get()

    def abort(self) -> None:
        self.aborted = True
        self.inbound.put_nowait(None)


START = protocol.SessionStart(type="session.start", v=1, call_id="c1", agent="a", transport="loopback")


async def test_a_frame_that_does_not_go_out_within_the_send_deadline_loses_the_link(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = SystemClock()
    wire = MemoryWire()
    brain = Brain(clock=clock)
    wire.inbound.put_nowait(protocol.encode(START))
    async with TaskScope("test") as scope:
        session = scope.spawn(serve_wire(brain, wire), name="session")
        while not wire.sent:
            await clock.sleep(0.01)
        assert protocol.parse_agent_message(wire.sent[0]).type == "ready"
        wire.stuck = True
        started = clock.now()
        await brain.say_line("hello")  # queued: the writer is the one that waits
        await bounded(clock, 30.0, asyncio.shield(session), "the session to end")
        assert clock.now() - started == pytest.approx(SEND_TIMEOUT, abs=0.05)
    assert wire.aborted
    lost = [r for r in caplog.records if "the link is lost" in r.getMessage()]
    assert len(lost) == 1 and lost[0].exc_info is not None
    with pytest.raises(ChannelClosed):
        await brain.say_line("again")


async def test_a_server_that_never_sends_session_start_is_given_up_on() -> None:
    clock = SystemClock()
    started = clock.now()
    with pytest.raises(DeadlineExceeded, match=r"session\.start"):
        await serve_wire(Brain(clock=clock), MemoryWire())
    assert clock.now() - started == pytest.approx(START_TIMEOUT)


@pytest.mark.realtime
async def test_a_model_brain_served_over_websocket_answers_a_turn_request_with_its_reply_lines() -> None:
    import websockets

    from brisvox.sdk import ModelBrain
    from brisvox.sdk.testing import scripted

    def factory() -> ModelBrain:
        return ModelBrain(scripted("Nine to five."), system="You run a shop.")

    async with served(factory) as (_, url), websockets.connect(url) as ws:
        await ws.send(protocol.encode(START))
        ready = protocol.parse_agent_message(await bounded(SystemClock(), 5.0, ws.recv(), "ready"))
        assert isinstance(ready, protocol.Ready) and ready.tools == () and ready.answers_turns
        await ws.send(protocol.encode(protocol.CallEvent(type="event", kind="user_turn", turn=1, text="hours?")))
        await ws.send(protocol.encode(protocol.TurnRequest(type="turn.request", id="t1", turn=1, text="hours?")))
        say = protocol.parse_agent_message(await bounded(SystemClock(), 5.0, ws.recv(), "say"))
        end = protocol.parse_agent_message(await bounded(SystemClock(), 5.0, ws.recv(), "the reply's end"))
    assert say == protocol.Say(type="say", text="Nine to five.", reply_to="t1")
    assert end == protocol.Say(type="say", text="", reply_to="t1", final=True)


class _ScriptWire:
    """One link's frames from the server, then its end; what the brain sends is kept."""

    def __init__(self, frames: list[str]) -> None:
        self.frames = list(frames)
        self.sent: list[str] = []

    async def send(self, frame: str) -> None:
        self.sent.append(frame)

    async def recv(self) -> str | None:
        await asyncio.sleep(0.01)  # the brain's tasks run between the server's frames
        return self.frames.pop(0) if self.frames else None

    def abort(self) -> None:
        self.frames.clear()


async def test_a_side_effect_retried_on_a_reopened_link_of_the_same_call_runs_once() -> None:
    from brisvox.sdk.brain import _Results

    def link(resume: bool) -> _ScriptWire:
        start = protocol.SessionStart(type="session.start", v=1, call_id="c1", agent="desk", transport="loopback",
                                      resume=resume)
        call = protocol.ToolCallRequest(type="tool.call", id=f"r{int(resume)}", name="book", arguments={"day": "monday"},
                                        idempotency_key="c1/1/t1.0", timeout=2.0)
        return _ScriptWire([protocol.encode(start), protocol.encode(call)])

    memory, brains = _Results(), [Desk(), Desk()]  # serve makes a new brain for the reopened link
    first, second = link(False), link(True)
    await serve_wire(brains[0], first, memory)
    await serve_wire(brains[1], second, memory)
    assert (brains[0].booked, brains[1].booked) == (["monday"], [])  # the retry got the first run's result
    answers = [protocol.parse_agent_message(f) for f in second.sent]
    assert [(a.id, a.result) for a in answers if isinstance(a, protocol.ToolResult)] == [("r1", "booked")]
