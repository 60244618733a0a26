"""A tool's own words in a call: its result line ends the turn with no model round, its
declined line answers the caller's no (docs/TOOLS.md, "Offered now")."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from brisvox.agent.context import AssistantMessage
from brisvox.agent.tools import ToolCallContext, ToolError, ToolKind, ToolSpec
from brisvox.core.clock import SimClock
from brisvox.providers.llm import LlmRequest
from brisvox.sim import Call, Say, ScenarioBuilder, ScriptedLlm
from brisvox.sim.mock_llm import Step
from tests.engine.harness import OBJ, Counter, SimResult, registry, simulate

ONE_TURN = ScenarioBuilder().pause(0.5).say("is friday free").pause(4.0).build()


def said(result: SimResult) -> list[str]:
    return [m.text for m in result.report.context.messages if isinstance(m, AssistantMessage) and m.text]


def slots_line(arguments: Mapping[str, Any], result: Any) -> str:
    return f"Free at {' or '.join(result['times'])}."


LOOKUP = ToolSpec(name="lookup", description="Is a day free?", parameters=OBJ, result_line="{day} is free.")
TIMES = ToolSpec(name="times", description="Free times.", parameters=OBJ, result_line=slots_line)
PLAIN = ToolSpec(name="plain", description="No line.", parameters=OBJ)


async def test_a_round_whose_calls_all_have_result_lines_speaks_them_and_asks_the_model_nothing_more() -> None:
    clock = SimClock()
    lookup, times = Counter(clock), Counter(clock, answer={"times": ["18:00", "21:00"]})
    script = [[Call(name="lookup", arguments={"day": "2026-12-04"}), Call(name="times", arguments={"day": "friday"})],
              [Say("The model's words, never asked for.")]]
    llm = ScriptedLlm(clock, script)
    result = await simulate(clock, ONE_TURN, llm, tools=registry(a=(LOOKUP, lookup), b=(TIMES, times)))
    assert len(llm.requests) == 1  # no round after the results
    assert said(result)[-1] == "Friday 4 December is free. Free at 18:00 or 21:00."
    assert len(lookup.calls) == 1 and len(times.calls) == 1
    result.report.context.validate()  # the results are in the context as usual, for later turns


async def _failing(arguments: dict[str, Any], ctx: ToolCallContext) -> Any:
    raise ToolError("the book is closed")


async def test_a_failed_call_never_speaks_its_success_line_and_the_model_answers() -> None:
    clock = SimClock()
    reg = registry(b=(TIMES, Counter(clock, answer={"times": ["18:00"]})))
    reg.register(LOOKUP, _failing)
    script = [[Call(name="lookup", arguments={"day": "friday"}), Call(name="times", arguments={"day": "friday"})],
              [Say("Sorry, I cannot check that now.")]]
    llm = ScriptedLlm(clock, script)
    result = await simulate(clock, ONE_TURN, llm, tools=reg)
    assert len(llm.requests) == 2
    assert said(result)[-1] == "Sorry, I cannot check that now." and not any("free." in s for s in said(result))


async def test_a_round_with_a_call_that_has_no_line_is_answered_by_the_model() -> None:
    clock = SimClock()
    script = [[Call(name="lookup", arguments={"day": "friday"}), Call(name="plain", arguments={"day": "friday"})],
              [Say("Friday is free.")]]
    llm = ScriptedLlm(clock, script)
    result = await simulate(clock, ONE_TURN, llm, tools=registry(a=(LOOKUP, Counter(clock)), b=(PLAIN, Counter(clock))))
    assert len(llm.requests) == 2 and said(result)[-1] == "Friday is free."


BOOK = ToolSpec(name="book", description="Book a day.", parameters=OBJ, kind=ToolKind.SIDE_EFFECT, confirm=True,
                declined_by=("no", "cancel"), confirm_question="Book {day}?",
                declined_line="All right, {day} is not booked. Anything else?")


async def test_the_callers_no_is_answered_by_the_declined_line_with_nothing_booked_or_looked_up() -> None:
    clock = SimClock()
    book, lookup = Counter(clock), Counter(clock)
    script = [[Call(name="book", arguments={"day": "2026-12-04"})],  # held: the tool's question ends the turn
              [Call(name="lookup", arguments={"day": "2026-12-04"})], [Say("Shall I book it?")]]  # never reached
    llm = ScriptedLlm(clock, script)
    scenario = ScenarioBuilder().pause(0.5).say("book friday").pause(5.0).say("no cancel now").pause(4.0).build()
    result = await simulate(clock, scenario, llm, tools=registry(a=(LOOKUP, lookup), b=(BOOK, book)))
    assert len(llm.requests) == 1  # the no asked the model nothing
    assert said(result)[-2:] == ["Book Friday 4 December?", "All right, Friday 4 December is not booked. Anything else?"]
    assert book.calls == [] and lookup.calls == []


class PrefillingLlm(ScriptedLlm):
    """A scripted model with a prompt cache (``PrefixWarm``): it records what was prefilled."""

    def __init__(self, clock: SimClock, script: list[list[Step]]) -> None:
        super().__init__(clock, script)
        self.prefilled: list[LlmRequest] = []

    async def warm_prefix(self, request: LlmRequest) -> None:
        raise AssertionError("the engine never warms the prefix; the server does")

    async def prefill(self, request: LlmRequest) -> bool:
        self.prefilled.append(request)
        return True


async def test_a_line_that_ended_the_turn_is_prefilled_once_played_so_the_next_request_finds_it_cached() -> None:
    clock = SimClock()
    llm = PrefillingLlm(clock, [[Call(name="lookup", arguments={"day": "friday"})]])
    result = await simulate(clock, ONE_TURN, llm, tools=registry(a=(LOOKUP, Counter(clock))))
    assert len(llm.requests) == 1
    last = llm.prefilled[-1].messages  # after the caller's words at the pause: the context with the line
    assert isinstance(last[-1], AssistantMessage) and last[-1].text == "friday is free."
    assert [m.text for m in last if isinstance(m, AssistantMessage) and m.text] == said(result)
