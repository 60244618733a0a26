"""Heard slots in a call: the caller's question about a slot is answered through the lookup."""

from __future__ import annotations

from brisvox.agent.tools import SlotKind, ToolSpec
from brisvox.core.clock import SimClock
from brisvox.providers.llm import ToolChoiceMode
from brisvox.sim import Call, Say, ScenarioBuilder, ScriptedLlm
from tests.engine.harness import Counter, registry, simulate

SLOT = {"type": "object", "properties": {
    "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$"},
    "time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$"},
    "party_size": {"type": "integer", "minimum": 1, "maximum": 20}}}
CHECK = ToolSpec(name="check_availability", description="Check a table.", parameters=SLOT,
                 lookup_when_heard={"date": SlotKind.DATE, "time": SlotKind.TIME, "party_size": SlotKind.COUNT})
HOURS = ToolSpec(name="opening_hours", description="The opening hours.")
ASKED = {"date": "2026-01-02", "time": "19:00", "party_size": 2}  # the simulation's day is 2026-01-01


async def test_after_a_slot_question_the_only_offer_is_the_lookup_with_a_call_required() -> None:
    clock = SimClock()
    check = Counter(clock, answer={"free": True})
    hours = Counter(clock, answer="18:00 to 21:00")
    llm = ScriptedLlm(clock, [[Call(name="check_availability", arguments=ASKED)], [Say("Yes, seven is free.")]])
    scenario = ScenarioBuilder().pause(0.5).say("is there a table tomorrow at seven for two").pause(5.0).build()
    await simulate(clock, scenario, llm, tools=registry(c=(CHECK, check), h=(HOURS, hours)))
    first, after = llm.requests[0], llm.requests[1]
    assert [t.name for t in first.tools] == ["check_availability"]
    assert first.tool_choice.mode is ToolChoiceMode.REQUIRED
    assert {k: v["const"] for k, v in first.tools[0].parameters["properties"].items()} == ASKED
    assert {t.name for t in first.described} == {"check_availability", "opening_hours"}  # the prompt is unchanged
    assert check.calls == [ASKED]
    # the answer is in: the next round may talk or call another tool, not look the table up again
    assert after.tool_choice.mode is ToolChoiceMode.AUTO and [t.name for t in after.tools] == ["opening_hours"]


async def test_after_a_greeting_nothing_is_forced() -> None:
    clock = SimClock()
    check = Counter(clock, answer={"free": True})
    llm = ScriptedLlm(clock, [[Say("Hello! How can I help?")]])
    scenario = ScenarioBuilder().pause(0.5).say("hello good evening").pause(4.0).build()
    await simulate(clock, scenario, llm, tools=registry(c=(CHECK, check)))
    assert llm.requests and all(r.tool_choice.mode is ToolChoiceMode.AUTO for r in llm.requests)
    assert check.calls == []
