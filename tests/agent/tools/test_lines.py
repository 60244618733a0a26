"""A tool's own words: result lines (made from the typed value of a success only), declined
lines, and their checks at registration."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from brisvox.agent.context import Context, ToolMessage
from brisvox.agent.tools.engine import ToolEngine
from brisvox.agent.tools.execution import Execution
from brisvox.agent.tools.registry import CONFIRM_PENDING, RegistryError, ToolRegistry
from brisvox.agent.tools.results import Outcome
from brisvox.core.clock import SimClock

from ._helpers import RO, SE, Probe, call, deliver_round, scripted, spec

DAY = {"type": "object", "properties": {"day": {"type": "string"}, "who": {"type": "string"}}}


def booked(arguments: Mapping[str, Any], result: Any) -> str:
    return f"Booked for {arguments['who']}, reference {result['ref']}."


async def test_a_result_line_is_made_from_the_arguments_spoken_and_the_value_returned() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("look", RO, params=DAY, result_line="{day} has {result[left]} left."),
                 scripted(probe, "look", result={"left": 3}))
    async with ToolEngine(reg, "s", clock) as eng:
        ex = await deliver_round(eng, Context(), [call("t1.0", "look", day="2026-12-06")], 1)
    assert ex.lines == ("Sunday 6 December has 3 left.",) and ex.spoken_line() == "Sunday 6 December has 3 left."


async def test_a_held_calls_result_line_is_spoken_when_the_callers_yes_runs_it() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("book", SE, params=DAY, confirm=True, result_line=booked),
                 scripted(probe, "book", result={"ref": "R001"}))
    async with ToolEngine(reg, "s", clock) as eng:
        eng.note_user_turn("book it for Ada")
        held = await deliver_round(eng, Context(), [call("t1.0", "book", who="Ada")], 1)
        assert held.spoken_line() is None  # waiting for the yes: not booked, nothing to say of it
        eng.note_user_turn("yes")
        done = await deliver_round(eng, Context(), [call("t2.0", CONFIRM_PENDING, call_id="t1.0")], 2)
    assert done.spoken_line() == "Booked for Ada, reference R001."


async def test_a_failed_or_line_less_call_leaves_the_round_to_the_model() -> None:
    clock = SimClock()
    probe = Probe(clock)
    reg = ToolRegistry()
    reg.register(spec("look", RO, params=DAY, result_line="{day} is free."), scripted(probe, "look", fail="closed"))
    reg.register(spec("missing", RO, params=DAY, result_line="{who} is free."), scripted(probe, "missing"))
    async with ToolEngine(reg, "s", clock) as eng:
        failed = await deliver_round(eng, Context(), [call("t1.0", "look", day="friday")], 1)
        unmade = await deliver_round(eng, Context(), [call("t2.0", "missing", day="friday")], 2)  # no "who"
    assert failed.outcomes == (Outcome.FAILED,) and failed.spoken_line() is None
    assert unmade.outcomes == (Outcome.OK,) and unmade.spoken_line() is None


def test_a_line_is_spoken_only_for_calls_whose_outcome_is_a_success() -> None:
    class Hooks:
        def on_delivered(self, receipt: object) -> None: ...

        def on_discarded(self, receipt: object) -> None: ...

    results = [ToolMessage(call_id="a", content="{}"), ToolMessage(call_id="b", content="{}")]
    mixed = Execution(Hooks(), epoch=1, results=results, budget_exhausted=False,
                      outcomes=[Outcome.OK, Outcome.TIMED_OUT], lines=["Free.", "Free too."])
    whole = Execution(Hooks(), epoch=1, results=results, budget_exhausted=False,
                      outcomes=[Outcome.OK, Outcome.OK_TRUNCATED], lines=["Free.", "Free too."])
    assert mixed.spoken_line() is None and whole.spoken_line() == "Free. Free too."
    mixed.discard()
    whole.discard()


def test_the_callers_no_returns_the_dropped_calls_declined_line() -> None:
    reg = ToolRegistry()
    reg.register(spec("book", SE, params=DAY, confirm=True, declined_by=("no",), declined_line="Not booking {day}."),
                 scripted(Probe(SimClock()), "book"))
    eng = ToolEngine(reg, "s", SimClock())
    assert eng.note_user_turn("no") is None  # nothing waits: nothing declined


async def test_a_declined_line_is_filled_from_the_dropped_calls_arguments() -> None:
    clock = SimClock()
    reg = ToolRegistry()
    reg.register(spec("book", SE, params=DAY, confirm=True, declined_by=("no",), declined_line="Not booking {day}."),
                 scripted(Probe(clock), "book"))
    async with ToolEngine(reg, "s", clock) as eng:
        eng.note_user_turn("book friday")
        await deliver_round(eng, Context(), [call("t1.0", "book", day="2026-12-04")], 1)
        assert eng.note_user_turn("no, thanks") == "Not booking Friday 4 December."
        assert eng.confirmations.pending() == []


@pytest.mark.parametrize(("kw", "message"), [
    ({"result_line": "{when} is free."}, "result_line names fields that are not its arguments or result: when"),
    ({"result_line": "{day is free."}, "result_line"),
    ({"result_line": 3}, "result_line must be a str.format template or a function"),
    ({"declined_by": ("no",), "declined_line": "Not {result}."}, "declined_line names fields that are not its "
                                                                 "arguments: result"),
    ({"declined_line": "Not booked."}, "declined_line needs declined_by"),
])
def test_a_bad_line_is_refused_at_registration_naming_the_tool_and_the_field(kw: dict[str, Any], message: str) -> None:
    with pytest.raises(RegistryError, match="tool 'book'") as err:
        ToolRegistry().register(spec("book", SE, params=DAY, **kw), scripted(Probe(SimClock()), "book"))
    assert message in str(err.value)
