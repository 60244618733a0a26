"""2,000 randomized whole calls keep the tool contract (see tests/engine/random_calls.py).

Each seed is a simulated call on virtual time (speculation on or off, barge-ins, tools
against their timeouts, hang-ups); none may crash, run a side effect twice, from a
speculative response or after the hang-up, lose or repeat a finished side effect's result
in the final context, or leave a task.  The seeds run in batches so a failure names its
batch; ``python bench/random_calls.py`` runs 20,000.  On the main branch before the fix,
about one call in seven failed (speculation over an unsettled turn crashed the call, side
effects started after the hang-up, late results missing from the record).
"""

from __future__ import annotations

import dataclasses

import pytest

from brisvox.agent.tools import ToolKind
from tests.engine.random_calls import check, run_random_call

CALLS = 2000
BATCH = 100


@pytest.mark.parametrize("first", range(0, CALLS, BATCH))
async def test_random_calls_keep_the_tool_contract(first: int) -> None:
    failed: dict[int, list[str]] = {}
    for seed in range(first, first + BATCH):
        problems = check(await run_random_call(seed))
        if problems:
            failed[seed] = problems
    assert not failed, f"{len(failed)} of {BATCH} calls broke the contract: {dict(list(failed.items())[:5])}"


async def test_the_checker_reports_each_broken_promise() -> None:
    """The check is not vacuous: a lost result, a second run, a start after the hang-up or
    before the turn was final are each reported."""
    outcome = await run_random_call(5)  # a call with side effects and a late note
    assert check(outcome) == []
    run = next(r for r in outcome.runs if r.kind is ToolKind.SIDE_EFFECT and r.finished)
    lost = dataclasses.replace(run, ref="ref-never-x")
    late = dataclasses.replace(run, key=("other", 9, "t9.0"), started=outcome.hung_up_at + 0.1)
    early = dataclasses.replace(run, key=("other", 8, "t8.0"), epoch=99)
    broken = dataclasses.replace(outcome, runs=[*outcome.runs, run, lost, late, early])
    problems = "\n".join(check(broken))
    assert "ran twice" in problems
    assert "(ref-never-x) is in the final context 0 times" in problems
    assert "started after the hang-up" in problems
    assert "before its turn 99 was final" in problems
