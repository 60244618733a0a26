"""Flows against the real ToolEngine: the restaurant example and the review-fix rounds.

Every step checks ``Context.validate()`` and that message 0 is the flow's prompt.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import pytest

from brisvox.agent.context import Context, SystemMessage, ToolCall, UserMessage
from brisvox.agent.flows import (
    FLOW_SUMMARY_PREFIX,
    Applied,
    EndCall,
    FlowManager,
    Say,
    SummaryOutcome,
)
from brisvox.agent.flows.example import Language, Restaurant, restaurant_flow, restaurant_tools
from brisvox.agent.tools.cancel import CancelToken
from brisvox.agent.tools.engine import ToolEngine
from brisvox.agent.tools.registry import ToolRegistry
from brisvox.agent.tools.spec import ToolKind, ToolSpec
from brisvox.core.clock import SimClock

from ._support import ScriptedSummarizer, generic_flow

DATE = "2026-12-24"


def _check(manager: FlowManager, ctx: Context) -> None:
    ctx.validate()
    assert ctx[0] == SystemMessage(text=manager.system_prompt())


class Counters:
    def __init__(self) -> None:
        self.runs: dict[str, list[str]] = {}


class Runner:
    """The runner protocol of docs/FLOWS.md, one LLM round at a time."""

    def __init__(
        self, manager: FlowManager, engine: ToolEngine, ctx: Context, summarizer: Any = None
    ) -> None:
        self.manager, self.engine, self.ctx, self.summarizer = manager, engine, ctx, summarizer
        self.cancel = CancelToken()

    def calls(self, epoch: int, *calls: tuple[str, dict[str, Any]]) -> list[ToolCall]:
        ids = self.manager.next_tool_call_ids(self.ctx, epoch, len(calls))
        made = [ToolCall(id=i, name=n, arguments=a) for i, (n, a) in zip(ids, calls, strict=True)]
        self.ctx.push_assistant("", made)
        return made

    async def round(self, epoch: int, *calls: tuple[str, dict[str, Any]]) -> Applied:
        return await self.apply(epoch, self.calls(epoch, *calls))

    async def apply(self, epoch: int, made: Sequence[Any]) -> Applied:
        screened = self.manager.screen(made)
        execution = await self.engine.execute(screened.take_admitted(), epoch, self.cancel)
        applied = await self.manager.apply(self.ctx, screened, execution, self.summarizer)
        _check(self.manager, self.ctx)
        return applied


def _restaurant_registry(restaurant: Restaurant) -> ToolRegistry:
    registry = ToolRegistry()
    for spec, fn in restaurant_tools(restaurant):
        registry.register(spec, fn)
    return registry


def _slot(time: str, party: int = 4) -> dict[str, Any]:
    return {"date": DATE, "time": time, "party_size": party}


@dataclass
class Call:
    """One simulated call: the flow, its context, a real engine and the runner over them."""

    clock: SimClock
    manager: FlowManager
    ctx: Context
    engine: ToolEngine
    run: Runner
    restaurant: Restaurant
    counters: Counters


@asynccontextmanager
async def restaurant_call(
    language: Language = Language.EN, summarizer: Any = None, first: str | None = None
) -> AsyncIterator[Call]:
    clock = SimClock()
    restaurant = Restaurant()
    registry = _restaurant_registry(restaurant)
    async with _call(clock, registry, restaurant_flow(language, registry), summarizer, first) as (
        manager,
        ctx,
        engine,
        run,
    ):
        yield Call(clock, manager, ctx, engine, run, restaurant, Counters())


@asynccontextmanager
async def generic_call(
    book_seconds: float = 0.0, summarizer: Any = None, first: str | None = "hi"
) -> AsyncIterator[Call]:
    clock = SimClock()
    counters = Counters()
    registry = _generic_registry(counters, clock, book_seconds=book_seconds)
    async with _call(clock, registry, generic_flow(registry), summarizer, first) as (
        manager,
        ctx,
        engine,
        run,
    ):
        yield Call(clock, manager, ctx, engine, run, Restaurant(), counters)


@asynccontextmanager
async def _call(
    clock: SimClock, registry: ToolRegistry, flow: Any, summarizer: Any, first: str | None
) -> AsyncIterator[tuple[FlowManager, Context, ToolEngine, Runner]]:
    manager = FlowManager(flow, clock)
    ctx = Context()
    entered = manager.start(ctx)
    assert entered.node == flow.initial
    if first is not None:
        ctx.push_user(first)
    async with ToolEngine(registry, "call-1", clock) as engine:
        yield manager, ctx, engine, Runner(manager, engine, ctx, summarizer)


def _generic_registry(counters: Counters, clock: SimClock, *, book_seconds: float = 0.0) -> ToolRegistry:
    registry = ToolRegistry()

    def make(name: str) -> Any:
        async def tool(args: dict[str, Any], ctx: Any) -> Any:
            counters.runs.setdefault(name, []).append(ctx.call.id)
            if name == "book" and book_seconds:
                await clock.sleep(book_seconds)
            return {"ok": True, "to": "b"}

        return tool

    strict = {"type": "object", "properties": {"x": {"type": "integer"}}, "required": ["x"]}
    for name in ("go_append", "go_reset", "go_summary", "check", "always", "custom", "end"):
        registry.register(ToolSpec(name=name, description=name, parameters=strict), make(name))
    for name in ("book", "book_next"):
        spec = ToolSpec(name=name, description=name, parameters=strict, kind=ToolKind.SIDE_EFFECT)
        registry.register(spec.with_timeout(1.0) if name == "book" else spec, make(name))
    return registry


# ---------------------------------------------------------------------------------------------
# The restaurant example


@pytest.mark.parametrize("language", list(Language))
async def test_a_reservation_goes_greeting_confirm_done_with_state_in_the_prompts(language: Language) -> None:
    summarizer = ScriptedSummarizer(["Ada wants a table for four at 19:00 on 2026-12-24."])
    async with restaurant_call(language, summarizer, "A table for four tomorrow at seven, please.") as call:
        manager, ctx, run = call.manager, call.ctx, call.run
        applied = await run.round(1, ("check_availability", _slot("19:00")))
        assert applied.transition is not None and applied.transition.node == "confirm"
        wait = {Language.EN: "One moment please.", Language.TR: "Bir dakika lütfen."}[language]
        assert applied.transition.pre_actions == (Say(wait),)
        assert applied.transition.summary is SummaryOutcome.SUMMARIZED and applied.context_replaced
        assert "19:00" in manager.system_prompt() and DATE in manager.system_prompt()
        # The summarizer saw the caller's turn and the check, whole.
        (request,) = summarizer.requests
        assert request.messages[0] == UserMessage(text="A table for four tomorrow at seven, please.")
        assert [type(m).__name__ for m in request.messages] == [
            "UserMessage",
            "AssistantMessage",
            "ToolMessage",
        ]
        assert json.loads(request.messages[-1].content)["free"] is True  # type: ignore[union-attr]
        assert request.previous is None and request.max_tokens == 300
        # keep_last_user: the context is request-shaped.
        assert ctx.messages[1:] == (
            SystemMessage(text=FLOW_SUMMARY_PREFIX + "Ada wants a table for four at 19:00 on 2026-12-24."),
            UserMessage(text="A table for four tomorrow at seven, please."),
        )
        assert [s.name for s in manager.tool_specs()] == ["end_call", "make_reservation"]
        ctx.push_assistant("The table is free. May I have your name?")
        ctx.push_user("Ada Lovelace.")
        applied = await run.round(2, ("make_reservation", {"name": "Ada Lovelace", **_slot("19:00")}))
        assert applied.transition is not None and applied.transition.node == "done"
        assert applied.transition.post_actions == (EndCall(),)
        assert "Ada Lovelace" in manager.system_prompt() and "R001" in manager.system_prompt()
        assert ctx.messages == (
            SystemMessage(text=manager.system_prompt()),
            UserMessage(text="Ada Lovelace."),
        )
        assert [s.name for s in manager.tool_specs()] == ["end_call"]
    assert len(call.restaurant.bookings) == 1


async def test_a_busy_slot_goes_to_alternatives_keeping_history_and_back_to_confirm() -> None:
    async with restaurant_call(summarizer=ScriptedSummarizer(), first="Eight o'clock for two.") as call:
        applied = await call.run.round(1, ("check_availability", _slot("20:00", 2)))
        assert applied.transition is not None and applied.transition.node == "alternatives"
        assert not applied.context_replaced
        assert call.ctx[1] == UserMessage(text="Eight o'clock for two.")  # Append kept the history
        assert '["18:00", "19:00", "21:00"]' in call.manager.system_prompt()
        call.ctx.push_assistant("Eight is full; six, seven or nine?")
        call.ctx.push_user("Nine then.")
        applied = await call.run.round(2, ("check_availability", _slot("21:00", 2)))
        assert applied.transition is not None and applied.transition.node == "confirm"


async def test_a_booking_lost_to_a_race_returns_to_alternatives_with_one_booking_in_total() -> None:
    async with restaurant_call(summarizer=ScriptedSummarizer(), first="Seven for four.") as call:
        await call.run.round(1, ("check_availability", _slot("19:00")))
        assert call.manager.current_node == "confirm"
        call.restaurant.book("Someone else", DATE, "19:00", 2)  # a second session books the slot first
        call.ctx.push_user("Book it for Ada.")
        applied = await call.run.round(2, ("make_reservation", {"name": "Ada", **_slot("19:00")}))
        assert applied.transition is not None and applied.transition.node == "alternatives"
    assert [b.name for b in call.restaurant.bookings] == ["Someone else"]


@pytest.mark.parametrize("start", ["greeting", "alternatives", "confirm"])
async def test_the_global_end_call_leads_to_farewell_from_any_node(start: str) -> None:
    async with restaurant_call(summarizer=ScriptedSummarizer()) as call:
        if start != "greeting":
            await call.manager.transition_to(call.ctx, start, call.run.summarizer)
        call.ctx.push_user("Bye.")
        applied = await call.run.round(1, ("end_call", {}))
        assert applied.transition is not None and applied.transition.node == "farewell"
        assert applied.transition.post_actions == (EndCall(),)


async def test_refused_tools_never_run_and_unparseable_calls_still_reach_the_engine() -> None:
    from brisvox.agent.assemble import CallError, CallErrorKind, InvalidCall
    from brisvox.agent.context import AssistantMessage, ToolMessage

    async with restaurant_call(first="Just book anything.") as call:
        manager, ctx = call.manager, call.ctx
        made = call.run.calls(
            1, ("make_reservation", {"name": "X", **_slot("19:00")}), ("check_availability", _slot("20:00"))
        )
        screened = manager.screen(made)
        assert [c.id for c in screened.take_admitted()] == [made[1].id]
        execution = await call.engine.execute(screened.take_admitted(), 1, call.run.cancel)
        await manager.apply(ctx, screened, execution)
        answers = [m for m in ctx.messages if isinstance(m, ToolMessage)]
        assert [m.call_id for m in answers] == [made[0].id, made[1].id]  # issue order
        assert json.loads(answers[0].content)["error"] == "tool_not_available"
        assert call.restaurant.bookings == []
        # An unparseable call goes to the engine, which answers it; it never routes.
        await manager.transition_to(ctx, "greeting")
        bad = InvalidCall(
            id=manager.next_tool_call_ids(ctx, 1, 1)[0],
            index=0,
            name="check_availability",
            raw_arguments="{not json",
            error=CallError(CallErrorKind.INVALID_JSON, "bad"),
        )
        ctx.push(AssistantMessage(tool_calls=(bad.recorded_call(),)))
        applied = await call.run.apply(1, [bad])
        assert applied.transition is None
        assert json.loads(ctx.messages[-1].content)["error"] == "invalid_tool_call"  # type: ignore[union-attr]


async def test_a_transitioning_booking_runs_once_and_a_replay_of_its_id_returns_the_record() -> None:
    async with restaurant_call(summarizer=ScriptedSummarizer(), first="Seven for four.") as call:
        await call.run.round(1, ("check_availability", _slot("19:00")))
        call.ctx.push_user("Ada.")
        made = call.run.calls(2, ("make_reservation", {"name": "Ada", **_slot("19:00")}))
        first = await call.run.apply(2, made)
        assert first.transition is not None and first.transition.node == "done"
        replay = await call.engine.execute(made, 2, call.run.cancel)
        assert json.loads(replay.results[0].content)["status"] == "confirmed"
        replay.discard()
        assert not call.manager.allows_tool("make_reservation")  # the left node's tool is refused now
    assert len(call.restaurant.bookings) == 1


@pytest.mark.parametrize("ending", ["resume", "next_round", "abandon"])
async def test_a_dropped_apply_mid_summary_offers_no_booking_until_resumed_and_books_once(
    ending: str,
) -> None:
    import asyncio

    async with restaurant_call(first="Seven for four.") as call:
        manager, ctx, run = call.manager, call.ctx, call.run
        run.summarizer = ScriptedSummarizer(["Ada, four, 19:00."], delay=3.0, clock=call.clock)
        made = run.calls(1, ("check_availability", _slot("19:00")))
        screened = manager.screen(made)
        execution = await call.engine.execute(screened.take_admitted(), 1, run.cancel)
        task = asyncio.ensure_future(manager.apply(ctx, screened, execution, run.summarizer))
        await call.clock.sleep(1.0)
        task.cancel()  # a barge-in drops apply while the summary is being made
        with pytest.raises(asyncio.CancelledError):
            await task
        _check(manager, ctx)
        assert manager.pending_transition() == "confirm" and manager.tool_specs() == []
        run.summarizer.delay = 0.0
        if ending == "resume":
            await manager.resume_pending(ctx, run.summarizer)
        elif ending == "next_round":
            # The model asks for the booking anyway: refused whole, then the node is entered.
            applied = await run.round(1, ("make_reservation", {"name": "Ada", **_slot("19:00")}))
            assert applied.refused == 1 and applied.transition is not None
        else:
            manager.abandon_pending()
            assert manager.current_node == "greeting"
        if ending != "abandon":
            assert manager.current_node == "confirm"
            ctx.push_user("Ada.")
            applied = await run.round(2, ("make_reservation", {"name": "Ada", **_slot("19:00")}))
            assert applied.transition is not None and applied.transition.node == "done"
    assert len(call.restaurant.bookings) == (0 if ending == "abandon" else 1)


# ---------------------------------------------------------------------------------------------
# A generic flow over real tools: the review-fix rounds


@pytest.mark.parametrize("tool", ["check", "always", "custom"])
async def test_stale_turn_answers_from_the_real_engine_never_fire_failure_always_or_custom(tool: str) -> None:
    async with generic_call() as call:
        call.ctx.push_user("newer turn")
        newer = call.run.calls(2, ("check", {"x": 0}))
        (await call.engine.execute(newer, 2, call.run.cancel)).append_to(call.ctx)
        # The engine has seen epoch 2, so a round of epoch 1 is stale.
        applied = await call.run.round(1, (tool, {"x": 1}))
        assert json.loads(call.ctx.messages[-1].content)["error"] == "stale_turn"  # type: ignore[union-attr]
        assert applied.transition is None and call.manager.current_node == "a"


@pytest.mark.parametrize("tool", ["check", "always", "custom", "book"])
async def test_a_real_invalid_arguments_answer_never_fires_failure_always_custom_or_a_side_effect_binding(
    tool: str,
) -> None:
    async with generic_call() as call:
        applied = await call.run.round(1, (tool, {"x": "not a number"}))
        assert json.loads(call.ctx.messages[-1].content)["error"] == "invalid_arguments"  # type: ignore[union-attr]
        assert applied.transition is None and call.manager.current_node == "a"
        assert call.counters.runs == {}
        # A call that did run routes: Always fires on a real success.
        applied = await call.run.round(1, ("always", {"x": 1}))
        assert applied.transition is not None and applied.transition.node == "sorry"


async def test_the_budget_exhausted_flag_of_the_real_engine_stops_a_transition() -> None:
    async with generic_call() as call:
        for _ in range(3):
            await call.run.round(1, ("check", {}))  # malformed rounds spend the budget
        applied = await call.run.round(1, ("go_append", {"x": 1}))
        assert applied.budget_exhausted and applied.transition is None
        assert call.manager.current_node == "a"
        assert call.counters.runs.get("go_append") is None


async def test_a_timed_out_side_effect_tool_is_withheld_refused_on_retry_and_released_by_its_late_result() -> (
    None
):
    async with generic_call(book_seconds=5.0, first="book it") as call:
        manager, ctx = call.manager, call.ctx
        made = call.run.calls(1, ("book", {"x": 1}))
        applied = await call.run.apply(1, made)
        assert json.loads(ctx.messages[-1].content)["error"] == "timeout"  # type: ignore[union-attr]
        assert applied.transition is None
        assert manager.unsettled_tools() == {"book"}
        assert "book" not in [s.name for s in manager.tool_specs()]
        retry = await call.run.round(1, ("book", {"x": 1}))
        assert retry.refused == 1
        assert json.loads(ctx.messages[-1].content)["error"] == "tool_not_available"  # type: ignore[union-attr]
        await call.clock.sleep(5.0)
        (note,) = call.engine.take_late_notes()
        ctx.push(note.message())
        assert manager.apply_recorded_result(made[0], note.content, note.is_error) == "b"
        assert manager.unsettled_tools() == frozenset()
        await manager.resume_pending(ctx)
        _check(manager, ctx)
        assert manager.current_node == "b"
    assert len(call.counters.runs["book"]) == 1


async def test_five_side_effect_calls_across_resets_in_one_turn_all_run_with_distinct_ids() -> None:
    async with generic_call(summarizer=ScriptedSummarizer(["one", "two"]), first="go") as call:
        path = []
        for i in range(5):
            # Different arguments: an identical SideEffect call in the same turn is already_done.
            applied = await call.run.round(1, ("book_next", {"x": i}))
            assert applied.transition is not None
            path.append(applied.transition.node)
        assert path == ["r", "s", "r2", "r3", "r"]
        assert call.manager.next_tool_call_ids(Context(), 2, 1) == ["t2.0"]
    assert call.counters.runs["book_next"] == ["t1.0", "t1.1", "t1.2", "t1.3", "t1.4"]
