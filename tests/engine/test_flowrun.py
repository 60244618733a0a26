"""A conversation flow driving a call through the engine (simulated calls on virtual time)."""

from __future__ import annotations

import json
import re

from brisvox.agent.context import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from brisvox.agent.flows import (
    FLOW_SUMMARY_PREFIX,
    EndCall,
    Flow,
    FlowBuilder,
    Goto,
    Node,
    Reset,
    ResetWithSummary,
    Strategy,
    ToolUse,
)
from brisvox.agent.flows import Say as SayLine
from brisvox.agent.tools import Outcome, ToolKind, ToolRegistry, ToolSpec
from brisvox.agent.turn import FixedSilence
from brisvox.agent.window import WindowPolicy
from brisvox.core.clock import SimClock
from brisvox.engine import EngineConfig
from brisvox.engine.events import CallObserver, EngineEvent, ToolCallSettled, ToolCallStarted
from brisvox.providers.llm import LlmRequest
from brisvox.providers.summarizer import DEFAULT_SUMMARY_INSTRUCTIONS
from brisvox.sim import Call, ScenarioBuilder, ScriptedLlm
from brisvox.sim import Say as Speak
from brisvox.sim.mock_llm import Script
from brisvox.transport.events import StopReason, WireHangupOut
from tests.engine.harness import OBJ, Counter, registry, simulate

_SUMMARY_HEAD = DEFAULT_SUMMARY_INSTRUCTIONS.split("{", 1)[0]

CHECK = ToolSpec(name="check_availability", description="Is a day free?", parameters=OBJ)
BOOK = ToolSpec(name="book_table", description="Book a table.", parameters=OBJ, kind=ToolKind.SIDE_EFFECT)


def _flow(reg: ToolRegistry, *, confirm_strategy: Strategy | None = None) -> Flow:
    confirm = Node(name="confirm", task_messages=("The day is free. Ask the caller to confirm, then book.",),
                   tools=(ToolUse(tool="book_table"),), pre_actions=(SayLine("Good news."),))
    if confirm_strategy is not None:
        confirm = Node(name="confirm", task_messages=confirm.task_messages, tools=confirm.tools,
                       pre_actions=confirm.pre_actions, strategy=confirm_strategy, keep_last_user=True)
    return (
        FlowBuilder()
        .role("You take table bookings.")
        .node(Node(name="collect", task_messages=("Ask for the day, then check it.",),
                   tools=(ToolUse(tool="check_availability", transition=Goto("confirm")),)))
        .node(confirm)
        .initial("collect")
        .build(reg)
    )


def _tool_names(request: LlmRequest) -> list[str]:
    return [spec.name for spec in request.tools]


async def test_a_call_moves_between_two_nodes_on_a_tool_result_offering_only_each_nodes_tools() -> None:
    clock = SimClock()
    check, book = Counter(clock), Counter(clock, answer={"booked": True})
    reg = registry(check=(CHECK, check), book=(BOOK, book))
    friday = {"day": "friday"}
    script = [
        # Turn 1, node "collect": the booking tool is not offered here and is refused unrun.
        [Call(name="book_table", arguments=friday)],
        [Speak("Let me check. "), Call(name="check_availability", arguments=friday)],
        [Speak("Friday is free. Shall I book it?")],  # node "confirm", asked at once
        # Turn 2, node "confirm": the lookup is no longer offered; the booking runs.
        [Call(name="check_availability", arguments=friday), Call(name="book_table", arguments=friday)],
        [Speak("Booked for Friday.")],
    ]
    llm = ScriptedLlm(clock, script)
    scenario = (ScenarioBuilder().pause(0.5).say("a table on friday").pause(5.0)
                .say("yes please book it").pause(5.0).build())
    seen: list[EngineEvent] = []
    result = await simulate(clock, scenario, llm, tools=reg, flow=_flow(reg), observer=CallObserver(listener=seen.append))
    requests = llm.requests
    assert [_tool_names(r) for r in requests] == [
        ["check_availability"], ["check_availability"], ["book_table"], ["book_table"], ["book_table"],
    ]
    prompts = [r.messages[0] for r in requests]
    assert all(isinstance(p, SystemMessage) for p in prompts)
    assert "Ask for the day" in prompts[0].text and "Ask the caller to confirm" in prompts[2].text  # type: ignore[union-attr]
    # Each refused call never ran and was answered tool_not_available; the offered ones ran once.
    assert check.calls == [friday] and book.calls == [friday]
    results = [m for m in result.report.context.messages if isinstance(m, ToolMessage)]
    refused = [json.loads(m.content) for m in results if m.is_error]
    assert [(r["error"], r["tool"]) for r in refused] == [
        ("tool_not_available", "book_table"), ("tool_not_available", "check_availability"),
    ]
    assert result.report.flow_transitions == 1 and result.report.flow_refused_calls == 2
    # Every call, refused or run, is started and settled once in the event stream, with its outcome.
    started = [(e.call_id, e.name) for e in seen if isinstance(e, ToolCallStarted)]
    settled = {e.call_id: (e.name, e.outcome) for e in seen if isinstance(e, ToolCallSettled)}
    assert [name for _, name in started] == ["book_table", "check_availability", "check_availability", "book_table"]
    assert [settled[call_id] for call_id, _ in started] == [
        ("book_table", Outcome.UNKNOWN_TOOL), ("check_availability", Outcome.OK),
        ("check_availability", Outcome.UNKNOWN_TOOL), ("book_table", Outcome.OK),
    ]
    assert len(settled) == len(started) == len([e for e in seen if isinstance(e, ToolCallSettled)])
    # The node's Say line was spoken but is not part of the conversation.
    assert result.tts is not None
    assert any("Good news." in t for session in result.tts.sessions for t in session.texts.values())
    assert not any(getattr(m, "text", "") == "Good news." for m in result.report.context.messages)
    result.report.context.validate()


async def test_a_reset_with_summary_node_is_summarized_by_the_calls_model_and_drops_the_window_summary() -> None:
    clock = SimClock()
    check = Counter(clock, answer={"free": True})
    reg = registry(check=(CHECK, check), book=(BOOK, Counter(clock)))
    flow = _flow(reg, confirm_strategy=ResetWithSummary(summary_input_tokens=500, summary_max_tokens=100))

    def host(request: LlmRequest) -> Script:
        first = request.messages[0]
        if isinstance(first, SystemMessage) and first.text.startswith(_SUMMARY_HEAD):
            body = request.messages[-1]
            assert isinstance(body, UserMessage)
            return [Speak("S: " + " / ".join(re.findall(r"Caller: ([^\n]*)", body.text)))]
        last = next(m for m in reversed(request.messages) if isinstance(m, UserMessage))
        in_collect = isinstance(first, SystemMessage) and "Ask for the day" in first.text
        if in_collect and last.text.startswith("friday") and not any(isinstance(m, ToolMessage) for m in request.messages):
            return [Call(name="check_availability", arguments={"day": "friday"})]
        return [Speak("Fine.")]

    llm = ScriptedLlm(clock, host)
    builder = ScenarioBuilder().pause(0.5)
    for words in ("hello there", "monday maybe", "or tuesday", "friday then"):
        builder.say(words).pause(4.0)
    config = EngineConfig(turn=FixedSilence(silence=0.5), window=WindowPolicy(keep_recent_turns=2))
    result = await simulate(clock, builder.build(), llm, tools=reg, flow=flow, config=config)
    report = result.report
    assert report.summaries >= 1  # the window had a summary before the reset
    assert report.flow_transitions == 1
    turn_requests = [r for r in llm.requests if not (isinstance(r.messages[0], SystemMessage)
                                                      and r.messages[0].text.startswith(_SUMMARY_HEAD))]
    after = turn_requests[-1].messages
    assert [type(m) for m in after] == [SystemMessage, SystemMessage, SystemMessage, UserMessage]  # the date second
    assert "Ask the caller to confirm" in after[0].text  # type: ignore[union-attr]
    assert after[2].text.startswith(FLOW_SUMMARY_PREFIX) and "friday then" in after[2].text  # type: ignore[union-attr]
    assert report.uncovered_requests == 0
    report.context.validate()


async def test_a_node_with_end_call_hangs_up_once_its_first_response_has_played() -> None:
    clock = SimClock()
    reg = registry(check=(CHECK, Counter(clock)), book=(BOOK, Counter(clock)))
    flow = (
        FlowBuilder()
        .node(Node(name="collect", task_messages=("Ask for the day.",),
                   tools=(ToolUse(tool="check_availability", transition=Goto("farewell")),)))
        .node(Node(name="farewell", task_messages=("Say goodbye.",), post_actions=(EndCall(),)))
        .build(reg)
    )
    script = [[Call(name="check_availability", arguments={"day": "friday"})], [Speak("Friday is free. Goodbye!")]]
    llm = ScriptedLlm(clock, script)
    scenario = ScenarioBuilder().pause(0.5).say("is friday free").pause(4.0).say("hello are you there").build()
    result = await simulate(clock, scenario, llm, tools=reg, flow=flow)
    assert result.report.stop_reason is StopReason.REQUESTED  # the engine ended the call, not the caller
    assert result.report.turns == 1 and len(llm.requests) == 2
    said = [m for m in result.report.context.messages if isinstance(m, AssistantMessage) and m.text]
    assert said[-1].text == "Friday is free. Goodbye!"  # played to its end before the hang-up
    assert isinstance(result.heard[-1].item, WireHangupOut)


async def test_a_timed_out_booking_is_withheld_until_its_late_result_arrives_then_offered_again() -> None:
    clock = SimClock()
    slow_book = ToolSpec(name="book_table", description="Book a table.", parameters=OBJ,
                         kind=ToolKind.SIDE_EFFECT, timeout=1.0)
    book = Counter(clock, seconds=3.0, answer={"booked": True})
    reg = registry(book=(slow_book, book))
    flow = FlowBuilder().node(Node(name="book", task_messages=("Book the table.",),
                                   tools=(ToolUse(tool="book_table"),))).build(reg)
    friday = {"day": "friday"}
    script = [
        [Call(name="book_table", arguments=friday)],
        [Speak("It is taking a while.")],  # offered nothing: the booking may still happen
        [Speak("Your table is booked.")],
    ]
    llm = ScriptedLlm(clock, script)
    scenario = (ScenarioBuilder().pause(0.5).say("book friday").pause(6.0)
                .say("is it done").pause(4.0).build())
    result = await simulate(clock, scenario, llm, tools=reg, flow=flow)
    assert [_tool_names(r) for r in llm.requests] == [["book_table"], [], ["book_table"]]
    assert len(book.calls) == 1
    notes = [m for m in result.report.context.messages if isinstance(m, SystemMessage) and "book_table" in m.text]
    assert len(notes) == 1  # the late result reached the context once


async def test_after_a_reset_in_the_same_turn_a_booking_gets_a_fresh_call_id_and_runs() -> None:
    clock = SimClock()
    check = Counter(clock, answer={"free": True})
    book = Counter(clock, answer={"booked": True})
    reg = registry(check=(CHECK, check), book=(BOOK, book))
    flow = _flow(reg, confirm_strategy=Reset())
    friday = {"day": "friday"}
    script = [
        [Call(name="check_availability", arguments=friday)],
        [Call(name="book_table", arguments=friday)],  # the same turn, in the reset context
        [Speak("Booked for Friday.")],
    ]
    llm = ScriptedLlm(clock, script)
    scenario = ScenarioBuilder().pause(0.5).say("book friday if it is free").pause(5.0).build()
    result = await simulate(clock, scenario, llm, tools=reg, flow=flow)
    assert book.calls == [friday]  # a reused id would have been answered as already done
    after_reset = llm.requests[1].messages
    assert [type(m) for m in after_reset] == [SystemMessage, SystemMessage, UserMessage]  # prompt, date, kept words
    calls = [c for m in result.report.context.messages if isinstance(m, AssistantMessage) for c in m.tool_calls]
    assert [(c.name, c.id) for c in calls] == [("book_table", "t0.1")]
