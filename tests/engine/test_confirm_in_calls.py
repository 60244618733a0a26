"""The confirmation gate in a call: a confirm=True booking runs only after a later user turn."""

from __future__ import annotations

import json

from brisvox.agent.context import ToolMessage
from brisvox.agent.tools import CONFIRM_PENDING, ToolKind, ToolSpec
from brisvox.core.clock import SimClock
from brisvox.sim import Call, Say, ScenarioBuilder, ScriptedLlm
from tests.engine.harness import OBJ, Counter, SimResult, registry, simulate

BOOK = ToolSpec(
    name="book_table", description="Book a table.", parameters=OBJ, kind=ToolKind.SIDE_EFFECT, confirm=True
)
ASK = "Shall I book a table for Friday?"


def results(result: SimResult) -> list[ToolMessage]:
    return [m for m in result.report.context.messages if isinstance(m, ToolMessage)]


async def test_a_gated_booking_runs_once_the_caller_confirms_in_a_later_turn() -> None:
    clock = SimClock()
    book = Counter(clock, answer={"booked": True})
    script = [
        [Call(name="book_table", arguments={"day": "friday"})],
        [Say(ASK)],
        [Call(name=CONFIRM_PENDING, arguments={"call_id": "t0.0"})],
        [Say("Booked.")],
    ]
    llm = ScriptedLlm(clock, script)
    scenario = ScenarioBuilder().pause(0.5).say("book friday").pause(5.0).say("yes please").pause(3.0).build()
    result = await simulate(clock, scenario, llm, tools=registry(b=(BOOK, book)))
    assert len(book.calls) == 1
    gated, confirmed = results(result)
    assert json.loads(gated.content)["status"] == "confirmation_required"
    assert not confirmed.is_error and json.loads(confirmed.content) == {"booked": True}
    result.report.context.validate()


async def test_a_confirmation_in_the_same_user_turn_is_refused_and_nothing_runs() -> None:
    clock = SimClock()
    book = Counter(clock, answer={"booked": True})
    script = [
        [Call(name="book_table", arguments={"day": "friday"})],
        [Call(name=CONFIRM_PENDING, arguments={"call_id": "t0.0"})],
        [Say(ASK)],
    ]
    llm = ScriptedLlm(clock, script)
    scenario = ScenarioBuilder().pause(0.5).say("book friday").pause(5.0).build()
    result = await simulate(clock, scenario, llm, tools=registry(b=(BOOK, book)))
    assert book.calls == []
    refused = results(result)[1]
    assert refused.is_error and "not replied" in refused.content


async def test_a_barge_in_over_the_question_clears_the_pending_request() -> None:
    clock = SimClock()
    book = Counter(clock, answer={"booked": True})
    question = ASK + " It is for two people at eight in the evening, on the terrace, as you asked."
    script = [
        [Call(name="book_table", arguments={"day": "friday"})],
        [Say(question)],
        [Call(name=CONFIRM_PENDING, arguments={"call_id": "t0.0"})],
        [Say("Let me ask again.")],
    ]
    llm = ScriptedLlm(clock, script)
    scenario = ScenarioBuilder().pause(0.5).say("book friday").pause(2.0).say("yes").pause(4.0).build()
    result = await simulate(clock, scenario, llm, tools=registry(b=(BOOK, book)))
    assert result.report.interrupts == 1
    assert book.calls == []
    refused = results(result)[1]
    assert refused.is_error and "no pending request" in refused.content
