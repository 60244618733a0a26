"""FlowManager on hand-built executions: transitions, strategies, screening, pending decisions, ids, state."""

from __future__ import annotations

import asyncio
import json
import logging

import pytest

from brisvox.agent.context import AssistantMessage, Context, SystemMessage, ToolCall, ToolMessage, UserMessage
from brisvox.agent.flows import (
    FLOW_SUMMARY_PREFIX,
    EndCall,
    FlowConfig,
    FlowError,
    FlowManager,
    Say,
    SummaryOutcome,
)
from brisvox.agent.flows.manager import SUMMARY_MESSAGE_MAX_TOKENS
from brisvox.agent.flows.render import MAX_STATE_VALUE_BYTES
from brisvox.agent.window import CLIP_MARKER, InvalidSummary, Summary, WindowPolicy, build_window
from brisvox.core.clock import SimClock

from ._support import HandExecution, ScriptedSummarizer, err, generic_flow, ok, push_calls

ROUTABLE = ["tool_failed", "timeout", "unknown_outcome", "result_too_large"]
NEVER_ROUTED = [
    "budget_exhausted",
    "stale_turn",
    "interrupted",
    "duplicate_call",
    "invalid_arguments",
    "arguments_too_large",
    "too_many_calls",
    "unknown_tool",
    "store_full",
    "missing_result",
    "tool_not_available",
    "a_kind_added_later",
]


def _started(**summary: object) -> tuple[FlowManager, Context, SimClock]:
    clock = SimClock()
    flow = FlowManager(generic_flow(**summary), clock)
    ctx = Context()
    flow.start(ctx)
    ctx.push_user("hello")
    return flow, ctx, clock


def _check(flow: FlowManager, ctx: Context) -> None:
    ctx.validate()
    assert ctx[0] == SystemMessage(text=flow.system_prompt())


async def _round(
    flow: FlowManager,
    ctx: Context,
    *calls: tuple[str, dict[str, object]],
    answers: list[ToolMessage] | None = None,
    epoch: int = 1,
    summarizer: ScriptedSummarizer | None = None,
    exhausted: bool = False,
):  # type: ignore[no-untyped-def]
    made = push_calls(flow, ctx, epoch, *calls)
    screened = flow.screen(made)
    admitted = screened.take_admitted()
    if answers is None:
        answers = [ok(c.id, {"ok": True}) for c in admitted]
    applied = await flow.apply(ctx, screened, HandExecution(answers, budget_exhausted=exhausted), summarizer)
    _check(flow, ctx)
    return applied, made


def test_start_installs_the_initial_prompt_as_message_0_and_refuses_a_second_start() -> None:
    flow = FlowManager(generic_flow(), SimClock())
    with pytest.raises(FlowError, match="not been started"):
        flow.tool_specs()
    ctx = Context([UserMessage(text="hi")])
    entered = flow.start(ctx)
    assert entered.node == "a" and entered.previous is None
    assert ctx[0] == SystemMessage(text=flow.system_prompt())
    assert flow.system_prompt().startswith("You are a test agent.\n\nNode A.")
    assert ctx[1] == UserMessage(text="hi")
    with pytest.raises(FlowError, match="already"):
        flow.start(ctx)


def test_tool_specs_are_the_current_nodes_tools_in_name_order() -> None:
    flow, _, _ = _started()
    assert [s.name for s in flow.tool_specs()] == [
        "always",
        "book",
        "book_next",
        "check",
        "custom",
        "end",
        "go_append",
        "go_reset",
        "go_summary",
    ]


async def test_an_append_transition_swaps_message_0_and_keeps_the_history() -> None:
    flow, ctx, _ = _started()
    before = ctx.messages
    applied, _ = await _round(flow, ctx, ("go_append", {}))
    assert applied.transition is not None and applied.transition.node == "b"
    assert not applied.context_replaced and applied.respond
    assert flow.current_node == "b"
    assert ctx[0] == SystemMessage(text="You are a test agent.\n\nNode B.")
    assert ctx.messages[1] == before[1] and len(ctx) == 4


async def test_a_reset_transition_leaves_the_prompt_alone_and_reports_the_replaced_context() -> None:
    flow, ctx, _ = _started()
    applied, _ = await _round(flow, ctx, ("go_reset", {}))
    assert applied.context_replaced
    assert ctx.messages == (SystemMessage(text=flow.system_prompt()),)


async def test_reset_with_summary_sends_whole_newest_turns_and_installs_the_summary() -> None:
    flow, ctx, _ = _started(summary_input_tokens=60, summary_max_tokens=50)
    for i in range(5):
        ctx.push_user(f"question number {i} " + "word " * 20)
        ctx.push_assistant(f"answer {i}")
    summarizer = ScriptedSummarizer(["They asked five questions."])
    applied, made = await _round(flow, ctx, ("go_summary", {}), summarizer=summarizer)
    assert applied.transition is not None
    assert applied.transition.summary is SummaryOutcome.SUMMARIZED and applied.context_replaced
    assert ctx.messages == (
        SystemMessage(text=flow.system_prompt()),
        SystemMessage(text=FLOW_SUMMARY_PREFIX + "They asked five questions."),
    )
    (request,) = summarizer.requests
    # The input starts at a user message and holds the latest turn (with the tool call) whole.
    assert isinstance(request.messages[0], UserMessage)
    assert request.messages[-2:] == (AssistantMessage(tool_calls=tuple(made)), ok(made[0].id, {"ok": True}))
    assert request.messages[0].text.startswith("question number 4")
    assert request.max_tokens == 50 and request.previous is None


async def test_the_summary_fallbacks_keep_the_history_and_still_transition() -> None:
    for reply, outcome in [
        (None, SummaryOutcome.NO_SUMMARIZER),
        (RuntimeError("down"), SummaryOutcome.FAILED),
        ("   ", SummaryOutcome.EMPTY),
    ]:
        flow, ctx, _ = _started()
        summarizer = None if reply is None else ScriptedSummarizer([reply])
        applied, _ = await _round(flow, ctx, ("go_summary", {}), summarizer=summarizer)
        assert applied.transition is not None and applied.transition.summary is outcome
        assert applied.transition.fell_back() and not applied.context_replaced
        assert flow.current_node == "s"
        assert ctx[1] == UserMessage(text="hello")


async def test_a_summary_that_does_not_come_within_the_timeout_falls_back_after_exactly_the_timeout() -> None:
    clock = SimClock()
    flow = FlowManager(generic_flow(), clock, FlowConfig(summary_timeout=2.0))
    ctx = Context()
    flow.start(ctx)
    ctx.push_user("hello")
    summarizer = ScriptedSummarizer(["late"], delay=60.0, clock=clock)
    t0 = clock.now()
    applied, _ = await _round(flow, ctx, ("go_summary", {}), summarizer=summarizer)
    assert clock.now() - t0 == pytest.approx(2.0)
    assert applied.transition is not None and applied.transition.summary is SummaryOutcome.TIMED_OUT
    assert flow.current_node == "s" and ctx[1] == UserMessage(text="hello")


async def test_nothing_to_summarize_is_a_plain_reset_and_a_chained_summary_extends_the_first() -> None:
    flow, ctx, _ = _started()
    summarizer = ScriptedSummarizer(["first summary", "second summary"])
    await flow.transition_to(ctx, "s", summarizer)
    assert ctx.messages[1] == SystemMessage(text=FLOW_SUMMARY_PREFIX + "first summary")
    await flow.transition_to(ctx, "b", summarizer)  # Append keeps the summary at message 1
    ctx.push_user("new things")
    ctx.push_assistant("noted")
    entered = await flow.transition_to(ctx, "s", summarizer)
    assert entered.summary is SummaryOutcome.SUMMARIZED
    second = summarizer.requests[1]
    assert second.previous is not None and second.previous.text == "first summary"
    assert [type(m) for m in second.messages] == [UserMessage, AssistantMessage]
    # Nothing new since: carried over without a call.
    entered = await flow.transition_to(ctx, "s", summarizer)
    assert entered.summary is SummaryOutcome.CARRIED_OVER
    assert len(summarizer.requests) == 2
    assert ctx.messages[1] == SystemMessage(text=FLOW_SUMMARY_PREFIX + "second summary")
    flow2 = FlowManager(generic_flow(), SimClock())
    ctx2 = Context()
    flow2.start(ctx2)
    entered = await flow2.transition_to(ctx2, "s", summarizer)
    assert entered.summary is SummaryOutcome.NOTHING_TO_SUMMARIZE and entered.context_replaced


async def test_summarizer_input_messages_are_clipped() -> None:
    flow, ctx, _ = _started(summary_input_tokens=100_000)
    ctx.push_user("long " * 3000)
    ctx.push_assistant("ok")
    summarizer = ScriptedSummarizer(["s"])
    await flow.transition_to(ctx, "s", summarizer)
    clipped = summarizer.requests[0].messages[1]
    assert isinstance(clipped, UserMessage) and clipped.text.endswith(CLIP_MARKER)
    assert ctx.estimator.estimate(clipped) <= SUMMARY_MESSAGE_MAX_TOKENS


async def test_keep_last_user_copies_the_newest_user_message_behind_a_reset() -> None:
    clock = SimClock()
    from brisvox.agent.flows import FlowBuilder, Node, Reset

    from ._support import generic_catalog

    built = (
        FlowBuilder()
        .node(Node(name="a", task_messages=("A",)))
        .node(Node(name="z", task_messages=("Z",), strategy=Reset(), keep_last_user=True))
        .build(generic_catalog())
    )
    flow = FlowManager(built, clock)
    ctx = Context()
    flow.start(ctx)
    ctx.push_user("first")
    ctx.push_assistant("ok")
    ctx.push_user("book it")
    ctx.push_assistant("sure")
    await flow.transition_to(ctx, "z")
    assert ctx.messages == (SystemMessage(text="Z"), UserMessage(text="book it"))


async def test_an_unknown_custom_target_is_rejected_and_nothing_changes() -> None:
    flow, ctx, _ = _started()
    prompt = flow.system_prompt()
    applied, _ = await _round(flow, ctx, ("custom", {}), answers=None)
    # The custom function reads {"ok": true}: no "to" key, so it does not fire.
    assert applied.transition is None
    made = push_calls(flow, ctx, 1, ("custom", {}))
    screened = flow.screen(made)
    applied = await flow.apply(ctx, screened, HandExecution([ok(made[0].id, {"to": "atlantis"})]))
    assert applied.rejected == ("atlantis",)
    assert applied.transition is None and flow.current_node == "a" and flow.system_prompt() == prompt
    _check(flow, ctx)


async def test_a_failed_goto_tool_stays_and_the_first_of_several_transitions_wins() -> None:
    flow, ctx, _ = _started()
    made = push_calls(flow, ctx, 1, ("go_append", {}))
    applied = await flow.apply(ctx, flow.screen(made), HandExecution([err(made[0].id, "tool_failed")]))
    assert applied.transition is None and flow.current_node == "a"
    applied, _ = await _round(flow, ctx, ("go_reset", {}), ("go_append", {}), ("go_summary", {}))
    assert applied.transition is not None and applied.transition.node == "r"
    assert applied.ignored_transitions == 2


@pytest.mark.parametrize("kind", NEVER_ROUTED)
async def test_error_kinds_of_a_tool_that_did_not_run_never_fire_failure_always_or_custom(kind: str) -> None:
    for tool in ("check", "always", "custom", "book"):
        flow, ctx, _ = _started()
        made = push_calls(flow, ctx, 1, (tool, {}))
        applied = await flow.apply(ctx, flow.screen(made), HandExecution([err(made[0].id, kind, tool)]))
        assert applied.transition is None, (kind, tool)
        assert applied.not_routed == 1
        assert flow.current_node == "a"


@pytest.mark.parametrize("kind", ROUTABLE)
async def test_error_kinds_of_a_tool_that_ran_are_routable(kind: str) -> None:
    for tool, target in (("check", "sorry"), ("always", "sorry")):
        flow, ctx, _ = _started()
        made = push_calls(flow, ctx, 1, (tool, {}))
        applied = await flow.apply(ctx, flow.screen(made), HandExecution([err(made[0].id, kind, tool)]))
        assert applied.transition is not None and applied.transition.node == target
        assert applied.transition.post_actions == (EndCall(),)
        assert not applied.respond  # the sorry node waits for the caller


async def test_a_malformed_error_body_is_never_routed() -> None:
    flow, ctx, _ = _started()
    made = push_calls(flow, ctx, 1, ("always", {}))
    bad = ToolMessage(call_id=made[0].id, content="invalid tool call: not json", is_error=True)
    applied = await flow.apply(ctx, flow.screen(made), HandExecution([bad]))
    assert applied.transition is None


async def test_the_budget_exhausted_flag_stops_a_transition_a_success_asks_for() -> None:
    flow, ctx, _ = _started()
    applied, _ = await _round(flow, ctx, ("go_append", {}), exhausted=True)
    assert applied.transition is None and applied.budget_exhausted and flow.current_node == "a"
    applied, _ = await _round(flow, ctx, ("go_append", {}))
    assert applied.transition is not None and applied.transition.node == "b"


async def test_refused_tools_are_answered_in_issue_order_and_unparseable_calls_reach_the_engine() -> None:
    flow, ctx, _ = _started()
    await flow.transition_to(ctx, "b")
    made = push_calls(flow, ctx, 1, ("go_append", {}), ("check", {}), ("go_reset", {}))
    # An unparseable call: not a ToolCall, so the flow passes it on.
    unparsed = type("Invalid", (), {"id": "t1.9", "name": ""})()
    screened = flow.screen([*made, unparsed])
    assert [getattr(c, "id", None) for c in screened.take_admitted()] == [made[0].id, made[2].id, "t1.9"]
    (refusal,) = screened.refused
    body = json.loads(refusal.content)
    assert body["error"] == "tool_not_available" and body["tool"] == "check"
    assert "Available tools: book, end, go_append, go_reset, go_summary." in body["detail"]
    merged, missing, extra = screened.merge(HandExecution([ok(made[2].id, {}), ok(made[0].id, {})]))
    assert [m.call_id for m in merged] == [made[0].id, made[1].id, made[2].id, "t1.9"]
    assert missing == 1 and extra == 0


async def test_too_few_results_are_answered_missing_result_and_extra_ones_dropped_late_notes_after() -> None:
    flow, ctx, _ = _started()
    made = push_calls(flow, ctx, 1, ("check", {}), ("go_append", {}))
    screened = flow.screen(made)
    note = SystemMessage(text="Late tool result: ...")
    execution = HandExecution([ok(made[1].id, {}), ok("t9.9", {})], late_notes=[note])
    applied = await flow.apply(ctx, screened, execution)
    assert applied.missing_results == 1 and applied.extra_results == 1
    assert execution.delivered
    answers = [m for m in ctx.messages if isinstance(m, ToolMessage)]
    assert [m.call_id for m in answers] == [made[0].id, made[1].id]
    assert json.loads(answers[0].content)["error"] == "missing_result"
    # missing_result never routes; the success of go_append does.
    assert applied.transition is not None and applied.transition.node == "b"
    assert ctx.messages[-1] == note
    _check(flow, ctx)


async def test_a_round_cannot_be_applied_twice() -> None:
    flow, ctx, _ = _started()
    made = push_calls(flow, ctx, 1, ("check", {"x": 1}))
    screened = flow.screen(made)
    await flow.apply(ctx, screened, HandExecution([ok(made[0].id, {"ok": False})]))
    with pytest.raises(FlowError, match="already applied"):
        await flow.apply(ctx, screened, HandExecution([ok(made[0].id, {"ok": False})]))


async def test_a_round_screened_before_a_transition_is_stale_after_it() -> None:
    flow, ctx, _ = _started()
    early = flow.screen([ToolCall(id="t1.5", name="go_append")])  # screened before its message is pushed
    await flow.transition_to(ctx, "r")
    ctx.push_assistant("", [ToolCall(id="t1.5", name="go_append")])
    applied = await flow.apply(ctx, early, HandExecution([ok("t1.5", {})]))
    assert applied.stale and applied.transition is None and flow.current_node == "r"
    assert ctx.messages[-1] == ok("t1.5", {})
    # Results whose calls a reset removed are dropped so the context stays valid.
    flow, ctx, _ = _started()
    made = push_calls(flow, ctx, 1, ("check", {}))
    early = flow.screen(made)
    ctx.interrupt_pending_tool_calls()
    await flow.transition_to(ctx, "r")
    applied = await flow.apply(ctx, early, HandExecution([ok(made[0].id, {"ok": True})]))
    assert applied.stale and applied.dropped_results == 1 and flow.current_node == "r"
    assert "checked" not in flow.state
    _check(flow, ctx)


async def test_transition_to_refuses_open_calls_a_foreign_message_0_and_unknown_nodes() -> None:
    flow, ctx, _ = _started()
    with pytest.raises(FlowError, match="unknown node"):
        await flow.transition_to(ctx, "nowhere")
    push_calls(flow, ctx, 1, ("check", {}))
    with pytest.raises(FlowError, match="open"):
        await flow.transition_to(ctx, "b")
    ctx.interrupt_pending_tool_calls()
    ctx.replace(0, SystemMessage(text="someone else's prompt"))
    with pytest.raises(FlowError, match="message 0"):
        await flow.transition_to(ctx, "b")
    assert flow.current_node == "a"


async def test_apply_results_decides_and_returns_the_pre_actions_before_the_summarizer_is_asked() -> None:
    flow, ctx, _ = _started()
    made = push_calls(flow, ctx, 1, ("go_summary", {}))
    summarizer = ScriptedSummarizer(["sum"])
    applied = flow.apply_results(ctx, flow.screen(made), HandExecution([ok(made[0].id, {})]))
    assert applied.pending == "s" and applied.transition is None
    assert flow.pending_transition() == "s"
    assert flow.pending_pre_actions() == (Say("One moment."),)
    assert summarizer.requests == []
    # While pending: no tool is offered and every call is refused.
    assert flow.tool_specs() == [] and not flow.allows_tool("go_append")
    entered = await flow.resume_pending(ctx, summarizer)
    assert entered is not None and entered.node == "s" and flow.pending_transition() is None
    _check(flow, ctx)


async def test_a_dropped_apply_keeps_the_decision_and_offers_no_tool_until_resumed_or_abandoned() -> None:
    clock = SimClock()
    for ending in ("resume", "next_round", "abandon"):
        flow = FlowManager(generic_flow(), clock)
        ctx = Context()
        flow.start(ctx)
        ctx.push_user("book it")
        made = push_calls(flow, ctx, 1, ("go_summary", {}))
        summarizer = ScriptedSummarizer(["s"], delay=5.0, clock=clock)
        task = asyncio.ensure_future(
            flow.apply(ctx, flow.screen(made), HandExecution([ok(made[0].id, {})]), summarizer)
        )
        await clock.sleep(1.0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert flow.pending_transition() == "s" and flow.current_node == "a"
        assert ctx.messages[-1] == ok(made[0].id, {})  # the result is in the context
        assert flow.tool_specs() == []
        summarizer.delay = 0.0
        if ending == "resume":
            await flow.resume_pending(ctx, summarizer)
            assert flow.current_node == "s"
        elif ending == "next_round":
            again = push_calls(flow, ctx, 1, ("go_append", {}))
            screened = flow.screen(again)
            assert screened.take_admitted() == []
            applied = await flow.apply(ctx, screened, HandExecution([]), summarizer)
            assert applied.transition is not None and applied.transition.node == "s"
        else:
            assert flow.abandon_pending() == "s"
            assert flow.current_node == "a" and flow.tool_specs() != []
        _check(flow, ctx)


async def test_a_timed_out_side_effect_tool_is_withheld_until_a_real_result_or_a_node_change() -> None:
    flow, ctx, _ = _started()
    made = push_calls(flow, ctx, 1, ("book", {"slot": 1}))
    await flow.apply(ctx, flow.screen(made), HandExecution([err(made[0].id, "timeout", "book")]))
    assert flow.unsettled_tools() == {"book"}
    assert "book" not in [s.name for s in flow.tool_specs()]
    retry = push_calls(flow, ctx, 1, ("book", {"slot": 1}))
    screened = flow.screen(retry)
    body = json.loads(screened.refused[0].content)
    assert body["error"] == "tool_not_available" and "Do not call it again" in body["detail"]
    await flow.apply(ctx, screened, HandExecution([]))
    # A repeated timeout keeps it withheld; a recorded success releases it and transitions.
    assert flow.apply_recorded_result(made[0], json.dumps({"error": "unknown_outcome"}), True) is None
    assert flow.unsettled_tools() == {"book"}
    assert flow.apply_recorded_result(made[0], json.dumps({"id": "B1"}), False) == "b"
    assert flow.unsettled_tools() == frozenset()
    assert flow.state["booking"] == {"id": "B1"}
    await flow.resume_pending(ctx)
    assert flow.current_node == "b"


async def test_a_tool_failed_late_result_releases_and_a_node_change_clears_withheld_tools() -> None:
    flow, ctx, _ = _started()
    made = push_calls(flow, ctx, 1, ("book", {}))
    await flow.apply(ctx, flow.screen(made), HandExecution([err(made[0].id, "interrupted", "book")]))
    assert flow.unsettled_tools() == {"book"}
    flow.apply_recorded_result(made[0], json.dumps({"error": "tool_failed"}), True)
    assert flow.unsettled_tools() == frozenset()
    made = push_calls(flow, ctx, 1, ("book", {}))
    await flow.apply(ctx, flow.screen(made), HandExecution([err(made[0].id, "unknown_outcome", "book")]))
    assert flow.unsettled_tools() == {"book"}
    await flow.transition_to(ctx, "b")
    assert "book" in [s.name for s in flow.tool_specs()]


async def test_call_ids_continue_after_calls_a_reset_removed_within_the_newest_epoch() -> None:
    flow, ctx, _ = _started()
    ids = []
    for tool in ("book_next", "book_next", "book_next", "book_next", "book_next"):
        applied, made = await _round(flow, ctx, (tool, {}), summarizer=ScriptedSummarizer(["s"]))
        ids.append(made[0].id)
        assert applied.transition is not None
    assert ids == ["t1.0", "t1.1", "t1.2", "t1.3", "t1.4"]
    assert flow.next_tool_call_ids(Context(), 2, 2) == ["t2.0", "t2.1"]
    # An older epoch's leftover does not move the newest epoch's offset.
    flow, ctx, _ = _started()
    ctx.push_assistant("", [ToolCall(id="t0.7", name="check")])
    ctx.push(ok("t0.7", {}))
    ctx.push_user("again")
    await _round(flow, ctx, ("go_reset", {}), epoch=1)
    assert flow.next_tool_call_ids(Context(), 1, 1) == ["t1.1"]
    assert flow.next_tool_call_ids(Context(), 0, 1) == ["t0.0"]
    # A reset that removes an older epoch's calls behind the newest epoch's keeps the offset.
    ctx.push_user("later")
    ctx.push_assistant("", [ToolCall(id="t0.9", name="check")])
    ctx.push(ok("t0.9", {}))
    await flow.transition_to(ctx, "r2")
    assert flow.next_tool_call_ids(Context(), 1, 1) == ["t1.1"]


async def test_late_notes_follow_the_results_and_a_reset_drops_them_with_the_history() -> None:
    flow, ctx, _ = _started()
    made = push_calls(flow, ctx, 1, ("go_append", {}))
    note = SystemMessage(text="Late tool result: booking B7 finished.")
    await flow.apply(ctx, flow.screen(made), HandExecution([ok(made[0].id, {})], late_notes=[note]))
    assert ctx.messages[-2:] == (ok(made[0].id, {}), note)
    made = push_calls(flow, ctx, 1, ("go_reset", {}))
    await flow.apply(ctx, flow.screen(made), HandExecution([ok(made[0].id, {})], late_notes=[note]))
    assert note not in ctx.messages
    _check(flow, ctx)


async def test_screen_and_apply_refuse_use_before_start() -> None:
    flow = FlowManager(generic_flow(), SimClock())
    with pytest.raises(FlowError, match="not been started"):
        flow.screen([ToolCall(id="t0.0", name="check")])
    with pytest.raises(FlowError, match="not been started"):
        await flow.transition_to(Context(), "b")
    with pytest.raises(FlowError, match="not been started"):
        flow.system_prompt()


async def test_captures_merge_arguments_store_results_and_results_keys_cannot_be_shadowed() -> None:
    flow, ctx, _ = _started()
    made = push_calls(flow, ctx, 1, ("check", {"name": "Ada", "checked": "forged"}))
    await flow.apply(ctx, flow.screen(made), HandExecution([ok(made[0].id, {"ok": True})]))
    assert flow.current_node == "b"  # ok=true leads to b; the state is kept across nodes
    await flow.transition_to(ctx, "a")
    assert flow.state["name"] == "Ada"
    assert flow.state["checked"] == {"ok": True}
    assert flow.state_dropped() == 1
    flow.refresh_prompt(ctx)
    assert "Name: Ada." in flow.system_prompt()
    assert "Ada" not in repr(flow)


async def test_an_oversized_capture_removes_the_keys_older_value_and_the_prompt_keeps_the_placeholder() -> (
    None
):
    flow, ctx, _ = _started()
    made = push_calls(flow, ctx, 1, ("check", {}))
    await flow.apply(ctx, flow.screen(made), HandExecution([ok(made[0].id, {"ok": False, "value": "old"})]))
    flow.refresh_prompt(ctx)
    assert "Checked: old." in flow.system_prompt()
    made = push_calls(flow, ctx, 1, ("check", {}))
    big = {"ok": False, "value": "v" * MAX_STATE_VALUE_BYTES}
    await flow.apply(ctx, flow.screen(made), HandExecution([ok(made[0].id, big)]))
    assert "checked" not in flow.state
    flow.refresh_prompt(ctx)
    assert "Checked: {checked.value}." in flow.system_prompt()


async def test_a_kept_window_summary_stays_valid_after_append_and_is_invalid_after_a_reset() -> None:
    flow, ctx, _ = _started()
    for i in range(6):
        ctx.push_user(f"q{i}")
        ctx.push_assistant(f"a{i}")
    kept = Summary("earlier", 4)
    policy = WindowPolicy(keep_recent_turns=2)
    applied, _ = await _round(flow, ctx, ("go_append", {}))
    assert not applied.context_replaced
    build_window(ctx, policy, ctx.estimator, kept)
    applied, _ = await _round(flow, ctx, ("go_reset", {}))
    assert applied.context_replaced
    with pytest.raises(InvalidSummary):
        build_window(ctx, policy, ctx.estimator, kept)
    build_window(ctx, policy, ctx.estimator, None)


async def test_a_summarizing_reset_also_invalidates_a_kept_window_summary_and_drops_a_stale_rounds_results() -> (
    None
):
    flow, ctx, _ = _started()
    for i in range(6):
        ctx.push_user(f"q{i}")
        ctx.push_assistant(f"a{i}")
    kept = Summary("earlier", 4)
    build_window(ctx, WindowPolicy(keep_recent_turns=2), ctx.estimator, kept)
    made = push_calls(flow, ctx, 1, ("check", {}))
    early = flow.screen(made)
    ctx.interrupt_pending_tool_calls()
    entered = await flow.transition_to(ctx, "s", ScriptedSummarizer(["what happened"]))
    assert entered.context_replaced and entered.summary is SummaryOutcome.SUMMARIZED
    with pytest.raises(InvalidSummary):
        build_window(ctx, WindowPolicy(keep_recent_turns=2), ctx.estimator, kept)
    applied = await flow.apply(ctx, early, HandExecution([ok(made[0].id, {"ok": True})]))
    assert applied.stale and applied.dropped_results == 1
    _check(flow, ctx)


async def test_the_node_prompt_survives_the_long_call_window_after_an_append_transition() -> None:
    flow, ctx, _ = _started()
    await flow.transition_to(ctx, "b")
    for i in range(40):
        ctx.push_user(f"turn {i} " + "words " * 15)
        ctx.push_assistant("reply " * 40)
    window = build_window(ctx, WindowPolicy(max_tokens=1000, keep_recent_turns=4), ctx.estimator)
    assert window.context[0] == SystemMessage(text=flow.system_prompt())
    assert "Node B." in flow.system_prompt()


async def test_a_rejected_custom_target_from_a_tool_result_is_not_logged_above_debug(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flow, ctx, _ = _started()
    made = push_calls(flow, ctx, 1, ("custom", {}))
    with caplog.at_level(logging.DEBUG, logger="brisvox.agent.flows"):
        applied = await flow.apply(ctx, flow.screen(made), HandExecution([ok(made[0].id, {"to": "atlantis"})]))
    assert applied.rejected == ("atlantis",)
    assert any(r.levelno == logging.WARNING and "unknown node" in r.getMessage() for r in caplog.records)
    assert all("atlantis" not in r.getMessage() for r in caplog.records if r.levelno > logging.DEBUG)
