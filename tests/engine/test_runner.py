"""The LLM runner (engine/runner.py): speculation over an unsettled turn, the hang-up, the
call's final record.  Simulated calls on virtual time through the production stages."""

from __future__ import annotations

import json

from brisvox.agent.context import AssistantMessage, Context, SystemMessage, ToolCall, ToolMessage, UserMessage
from brisvox.agent.tools import ToolKind, ToolSpec
from brisvox.agent.turn import FixedSilence
from brisvox.core.clock import SimClock
from brisvox.core.frames import BotLineFrame, Direction, InterruptFrame
from brisvox.core.inbox import Inbox
from brisvox.core.processor import ProcessorContext
from brisvox.core.tasks import TaskScope
from brisvox.engine import EngineConfig, SpeculationMode
from brisvox.engine.agent_input import AgentInput, Refusal
from brisvox.engine.config import LlmConfig, Timeouts
from brisvox.engine.events import BotHeard, CallEvents, CallObserver, EngineEvent
from brisvox.engine.playout import PlayoutBook
from brisvox.engine.runner import LlmRunner
from brisvox.engine.speculate import settled_copy
from brisvox.sim import Call, LatencyProfile, Say, ScenarioBuilder, ScriptedLlm
from tests.engine.harness import OBJ, Counter, registry, simulate

SPECULATE = EngineConfig(turn=FixedSilence(silence=1.0), speculation=SpeculationMode.AT_PAUSE)
BOOK = ToolSpec(name="book_table", description="Book a table.", parameters=OBJ, kind=ToolKind.SIDE_EFFECT,
                timeout=0.5)


def test_a_settled_copy_closes_the_calls_a_barge_in_left_open_and_leaves_the_context_alone() -> None:
    live = Context()
    live.push_user("is friday free")
    live.push_assistant(tool_calls=[ToolCall(id="t0.0", name="check_availability", arguments={"day": "friday"})])
    copy = settled_copy(live)
    copy.push_user("or monday")  # the caller's words may follow the copy
    assert live.has_open_tool_calls() and len(live) == 2
    closed = copy.messages[2]
    assert isinstance(closed, ToolMessage) and closed.call_id == "t0.0" and json.loads(closed.content)["error"] == "interrupted"


async def test_a_speculation_after_a_barge_in_over_a_running_booking_does_not_crash_the_call() -> None:
    # main crashed here: ContextError "a UserMessage follows unanswered tool calls" from the
    # speculative start, which put the caller's new words after the open booking call.
    clock = SimClock()
    book = Counter(clock, seconds=6.0, answer={"booked": "BK-1"})
    slow_book = ToolSpec(name="book_table", description="Book a table.", parameters=OBJ,
                         kind=ToolKind.SIDE_EFFECT, timeout=10.0)
    llm = ScriptedLlm(clock, lambda request: [Call(name="book_table", arguments={"day": "friday"})]
                      if len(request.messages) == 3 else [Say("Monday evening is free.")])
    scenario = (ScenarioBuilder().pause(0.5).say("book friday").pause(2.0)
                .say("or monday").pause(0.5).say("evening").pause(6.0).build())
    result = await simulate(clock, scenario, llm, config=SPECULATE, tools=registry(book=(slow_book, book)))
    messages = result.report.context.messages
    Context(messages)  # valid
    assert result.report.interrupts == 1 and result.report.speculations >= 2
    assert len(book.calls) == 1  # the booking was committed once, then talked over
    users = [m.text for m in messages if isinstance(m, UserMessage)]
    assert users[-1] == "or monday evening"
    said = [m.text for m in messages if isinstance(m, AssistantMessage)]
    assert said[-1] == "Monday evening is free."
    notes = [m.text for m in messages if isinstance(m, SystemMessage) and "BK-1" in m.text]
    assert len(notes) == 1  # the booking's result is in the record once, as a late note


async def test_a_side_effect_that_finishes_late_while_the_bot_speaks_is_in_the_record_after_the_hang_up() -> None:
    # main lost it: the hang-up while the bot spoke failed the pipeline before the stop
    # reached the runner, so the late note never entered the context.
    clock = SimClock()
    book = Counter(clock, seconds=1.0, answer={"booked": "BK-7"})
    long_line = "It is still in progress, " + "and I will tell you as soon as I know, " * 6
    llm = ScriptedLlm(clock, [[Call(name="book_table", arguments={"day": "friday"})], [Say(long_line)]])
    scenario = ScenarioBuilder().pause(0.5).say("book friday").pause(1.2).build()
    result = await simulate(clock, scenario, llm, tools=registry(book=(BOOK, book)), linger=2.5,
                            config=EngineConfig(turn=FixedSilence(silence=0.5)))
    assert len(book.calls) == 1
    texts = [m.content if isinstance(m, ToolMessage) else m.text for m in result.report.context.messages
             if isinstance(m, ToolMessage | SystemMessage)]
    assert sum("BK-7" in t for t in texts) == 1
    (note,) = [m for m in result.report.context.messages if isinstance(m, SystemMessage) and "BK-7" in m.text]
    assert note.text.startswith("Late tool result: the call t0.0 of book_table")


async def test_no_side_effect_starts_after_the_caller_hung_up() -> None:
    # main ran the booking: at the stop the runner let the round finish, and the model's
    # call came after the hang-up.
    clock = SimClock()
    book = Counter(clock, answer={"booked": True})
    llm = ScriptedLlm(clock, [[Call(name="book_table", arguments={"day": "friday"})], [Say("Booked.")]],
                      latency=LatencyProfile(first_event=2.0))
    scenario = ScenarioBuilder().pause(0.5).say("book friday").pause(0.6).build()
    result = await simulate(clock, scenario, llm, tools=registry(book=(BOOK, book)), linger=0.5,
                            config=EngineConfig(turn=FixedSilence(silence=0.5)))
    assert book.calls == []
    answers = [m for m in result.report.context.messages if isinstance(m, ToolMessage)]
    assert len(answers) <= 1 and all(json.loads(m.content)["error"] == "interrupted" for m in answers)


async def test_a_note_waits_for_the_running_tool_and_reaches_its_next_request_and_an_idle_note_opens_no_turn() -> None:
    clock = SimClock()
    book = Counter(clock, seconds=1.0, answer={"booked": "BK-2"})
    spec = ToolSpec(name="book_table", description="Book a table.", parameters=OBJ, kind=ToolKind.SIDE_EFFECT,
                    timeout=5.0)
    llm = ScriptedLlm(clock, [[Call(name="book_table", arguments={"day": "friday"})], [Say("Booked.")]])
    scenario = ScenarioBuilder().pause(0.5).say("book friday").pause(5.0).build()
    # the first note lands while the booking runs (its call is open); the second once the call is idle
    result = await simulate(clock, scenario, llm, tools=registry(book=(spec, book)), linger=0.5,
                            notes=((1.9, "ON SCREEN: the user opened the menu"), (5.0, "ON SCREEN: the user paid")),
                            config=EngineConfig(turn=FixedSilence(silence=0.5)))
    assert len(book.calls) == 1 and book.started[0] < 1.9 + 0.02 < book.started[0] + 1.0
    assert len(llm.requests) == 2  # neither note asked the model anything
    second = llm.requests[1].messages
    assert isinstance(second[-2], ToolMessage) and isinstance(second[-1], SystemMessage)
    assert second[-1].text == "ON SCREEN: the user opened the menu"
    record = result.report.context.messages
    assert isinstance(record[-1], SystemMessage) and record[-1].text == "ON SCREEN: the user paid"
    assert isinstance(record[-2], AssistantMessage) and record[-2].text == "Booked."
    assert result.report.turns == 1


async def test_an_agent_line_whose_round_a_barge_in_cancels_before_it_is_in_the_context_is_refused_overtaken() -> None:
    # The runner started the line's round task, and the interrupt came before that task ran: the
    # line was never said, and the agent is told (main dropped it silently).
    clock = SimClock()
    refused: list[tuple[str, Refusal]] = []
    agent = AgentInput(lambda command, why, _message: refused.append((command, why)))
    seen: list[EngineEvent] = []
    async with TaskScope("runner") as scope:
        runner = LlmRunner(ScriptedLlm(clock, []), Context(), PlayoutBook(), LlmConfig(), Timeouts(), scope,
                           agent=agent, events=CallEvents("c", CallObserver(listener=seen.append)))
        ctx = ProcessorContext("llm-runner", clock, Inbox("llm-runner"))
        await runner.process(BotLineFrame(epoch=1, text="Your order has shipped."), Direction.DOWNSTREAM, ctx)
        ctx.epoch = 2  # as the task loop does at the interrupt, in the same step
        await runner.process(InterruptFrame(new_epoch=2), Direction.DOWNSTREAM, ctx)
        await runner.process(BotLineFrame(epoch=2, text="Sorry, one correction."), Direction.DOWNSTREAM, ctx)
        await clock.sleep(0.1)  # the second line's round runs
        await runner.process(BotLineFrame(epoch=3, text="And goodbye."), Direction.DOWNSTREAM, ctx)
        await runner.finish(clock)  # the call ends before the third line's round ran
    assert refused == [("say", Refusal.OVERTAKEN), ("say", Refusal.CALL_ENDED)]
    # The line that was in the context is told as heard (nothing played here), not refused.
    assert [(e.epoch, e.text) for e in seen if isinstance(e, BotHeard)] == [(2, "")]


async def test_agent_lines_that_arrive_after_a_newer_turn_are_refused_and_a_farewell_calls_its_end_off() -> None:
    clock = SimClock()
    refused: list[tuple[str, Refusal]] = []
    agent = AgentInput(lambda command, why, _message: refused.append((command, why)))
    context = Context()
    async with TaskScope("runner") as scope:
        runner = LlmRunner(ScriptedLlm(clock, []), context, PlayoutBook(), LlmConfig(), Timeouts(), scope,
                           agent=agent)
        ctx = ProcessorContext("llm-runner", clock, Inbox("llm-runner"))
        ctx.epoch = 3  # a barge-in overtook both lines on their way from the turn driver
        await runner.process(BotLineFrame(epoch=2, text="Your order has shipped."), Direction.DOWNSTREAM, ctx)
        await runner.process(BotLineFrame(epoch=2, text="Goodbye.", farewell=True), Direction.DOWNSTREAM, ctx)
        await runner.finish(clock)
    assert refused == [("say", Refusal.OVERTAKEN), ("end", Refusal.CALLED_OFF)]
    assert not any(isinstance(m, AssistantMessage) for m in context.messages)
