"""The long-call window: cut, clipping, summary message, summarizer rounds, errors."""

from __future__ import annotations

import pytest

from brisvox.agent.context import (
    AssistantMessage,
    CharsPerToken,
    Context,
    Message,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from brisvox.agent.window import (
    CLIP_MARKER,
    SUMMARY_PREFIX,
    InvalidSummary,
    InvalidWindowContext,
    Summarizer,
    SummarizerFailed,
    Summary,
    SummaryRequest,
    SummaryTooLarge,
    WindowPolicy,
    build_window,
    clip_message,
    needs_summary,
    refresh_summary,
    turn_starts,
)
from brisvox.core.errors import ConfigError

EST = CharsPerToken()


def _ctx(turns: int, *, words: int = 10, prompt: str = "Be helpful.") -> Context:
    ctx = Context([SystemMessage(text=prompt)])
    for i in range(turns):
        ctx.push(UserMessage(text=f"user {i} " + "word " * words))
        ctx.push(AssistantMessage(text=f"agent {i} " + "reply " * words))
    return ctx


class Fixed:
    def __init__(self, text: str = "short summary") -> None:
        self.text = text
        self.requests: list[SummaryRequest] = []

    async def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        return self.text


def test_the_policy_rejects_zero_budgets_and_defaults_limits_to_a_quarter() -> None:
    with pytest.raises(ConfigError, match="max_tokens"):
        WindowPolicy(max_tokens=0)
    with pytest.raises(ConfigError, match="keep_recent_turns"):
        WindowPolicy(keep_recent_turns=0)
    with pytest.raises(ConfigError, match="max_summary_tokens"):
        WindowPolicy(max_summary_tokens=0)
    p = WindowPolicy(max_tokens=1000)
    assert (p.message_limit, p.summary_limit, p.summary_input_limit) == (250, 250, 1000)


def test_messages_before_the_first_user_message_form_one_turn_and_the_header_is_excluded() -> None:
    msgs: list[Message] = [
        SystemMessage(text="prompt"),
        SystemMessage(text="more"),
        AssistantMessage(text="Hello, how can I help?"),
        UserMessage(text="hi"),
        AssistantMessage(text="yes"),
        UserMessage(text="bye"),
    ]
    assert turn_starts(msgs) == [2, 3, 5]


def test_the_window_keeps_the_recent_turns_and_never_modifies_the_full_context() -> None:
    ctx = _ctx(20)
    before = ctx.messages
    window = build_window(ctx, WindowPolicy(max_tokens=4000, keep_recent_turns=3), EST)
    assert ctx.messages == before
    assert window.kept_turns == 3
    assert window.context.messages == (before[0], *before[-6:])
    assert window.uncovered == range(1, len(before) - 6)
    assert not window.summary_sent


def test_the_budget_shrinks_the_kept_turns_but_never_below_the_latest() -> None:
    ctx = _ctx(10, words=100)
    per_turn = EST.estimate(ctx[1]) + EST.estimate(ctx[2])
    header = EST.estimate(ctx[0])
    policy = WindowPolicy(
        max_tokens=header + 2 * per_turn + 5, keep_recent_turns=8, max_message_tokens=10_000
    )
    window = build_window(ctx, policy, EST)
    assert window.kept_turns == 2
    assert not window.over_budget
    tiny = WindowPolicy(max_tokens=header + 10, keep_recent_turns=8, max_message_tokens=10_000)
    window = build_window(ctx, tiny, EST)
    assert window.kept_turns == 1
    assert window.over_budget
    assert window.context.messages[-1] == ctx.messages[-1]


def test_an_oversized_header_is_sent_whole_and_reported_over_budget() -> None:
    ctx = _ctx(3, prompt="rules " * 400)
    window = build_window(ctx, WindowPolicy(max_tokens=100), EST)
    assert window.context[0] == ctx[0]
    assert window.over_budget
    assert window.kept_turns == 1


def test_a_cut_never_splits_a_tool_call_from_its_results() -> None:
    ctx = _ctx(3)
    ctx.push(UserMessage(text="is there a table"))
    call = ToolCall(id="t4.0", name="check", arguments={"d": 1})
    ctx.push(AssistantMessage(text="Let me check.", tool_calls=(call,)))
    ctx.push(ToolMessage(call_id="t4.0", content="x " * 300))
    ctx.push(AssistantMessage(text="yes"))
    window = build_window(ctx, WindowPolicy(max_tokens=4000, keep_recent_turns=1), EST)
    assert [type(m).__name__ for m in window.context.messages] == [
        "SystemMessage",
        "UserMessage",
        "AssistantMessage",
        "ToolMessage",
        "AssistantMessage",
    ]
    window.context.validate()


def test_a_long_message_is_clipped_with_the_marker_and_the_transcript_keeps_it_whole() -> None:
    ctx = Context([SystemMessage(text="p"), UserMessage(text="çok güzel " * 500)])
    policy = WindowPolicy(max_tokens=1000)
    window = build_window(ctx, policy, EST)
    sent = window.context[1]
    assert isinstance(sent, UserMessage)
    assert sent.text.endswith(CLIP_MARKER)
    assert ctx[1] == UserMessage(text="çok güzel " * 500)
    assert EST.estimate(sent) <= policy.message_limit
    # The longest prefix that fits: one more character would not.
    prefix = sent.text[: -len(CLIP_MARKER)]
    longer = UserMessage(text=ctx[1].text[: len(prefix) + 1] + CLIP_MARKER)  # type: ignore[union-attr]
    assert EST.estimate(longer) > policy.message_limit
    assert window.clipped_messages == 1


def test_tool_call_arguments_are_never_clipped() -> None:
    big = {"notes": "n" * 4000}
    msg = AssistantMessage(
        text="about to book " * 100, tool_calls=(ToolCall(id="t0.0", name="book", arguments=big),)
    )
    clipped = clip_message(msg, 100, EST)
    assert isinstance(clipped, AssistantMessage)
    assert clipped.tool_calls == msg.tool_calls
    assert clipped.text == CLIP_MARKER
    only_args = AssistantMessage(tool_calls=msg.tool_calls)
    assert clip_message(only_args, 100, EST) is only_args


def test_a_40_kb_tool_result_in_the_latest_turn_is_clipped_to_within_budget() -> None:
    ctx = _ctx(5)
    ctx.push(UserMessage(text="what is on the menu"))
    ctx.push(AssistantMessage(tool_calls=(ToolCall(id="t6.0", name="menu"),)))
    content = "şiş kebap ₺120; " * 2600  # about 40 KB of multi-byte text
    assert len(content.encode()) > 40_000
    ctx.push(ToolMessage(call_id="t6.0", content=content))
    policy = WindowPolicy(max_tokens=2000)
    window = build_window(ctx, policy, EST)
    assert not window.over_budget
    assert window.estimated_tokens <= 2000
    result = window.context.messages[-1]
    assert isinstance(result, ToolMessage)
    assert result.content.endswith(CLIP_MARKER)
    prefix = result.content[: -len(CLIP_MARKER)]
    assert content.startswith(prefix)
    prefix.encode("utf-8")  # whole characters only
    assert ctx.messages[-1] == ToolMessage(call_id="t6.0", content=content)


def test_the_summary_goes_right_after_the_header_and_counts_in_the_budget() -> None:
    ctx = _ctx(10)
    summary = Summary("They want a table for four.", 2 * 6 + 1)
    window = build_window(ctx, WindowPolicy(max_tokens=4000, keep_recent_turns=8), EST, summary)
    assert window.context[1] == SystemMessage(text=SUMMARY_PREFIX + summary.text)
    assert window.summary_sent
    assert window.kept_from == 13
    assert window.uncovered is None
    assert window.estimated_tokens == window.context.estimate_tokens()


def test_a_caller_supplied_40_kb_summary_is_clipped_in_the_window_and_left_untouched() -> None:
    ctx = _ctx(10)
    text = "ğ" * 20_000
    summary = Summary(text, 5)
    policy = WindowPolicy(max_tokens=2000, keep_recent_turns=2)
    window = build_window(ctx, policy, EST, summary)
    sent = window.context[1]
    assert isinstance(sent, SystemMessage)
    assert sent.text.startswith(SUMMARY_PREFIX)
    assert sent.text.endswith(CLIP_MARKER)
    assert EST.estimate(sent) <= policy.summary_limit
    assert summary.text == text
    assert window.estimated_tokens <= 2000


def test_a_lagging_summary_leaves_the_newer_dropped_turns_uncovered() -> None:
    ctx = _ctx(10)
    window = build_window(ctx, WindowPolicy(keep_recent_turns=2), EST, Summary("s", 3))
    assert window.kept_from == 17
    assert window.uncovered == range(3, 17)


def test_a_summary_that_covers_more_than_the_cut_drops_those_turns_from_the_window() -> None:
    ctx = _ctx(4)
    window = build_window(ctx, WindowPolicy(keep_recent_turns=8), EST, Summary("s", 5))
    assert window.kept_from == 5
    assert window.context.messages[2:] == ctx.messages[5:]


def test_an_invalid_context_or_a_summary_off_a_turn_start_is_rejected() -> None:
    ctx = _ctx(3)
    with pytest.raises(InvalidSummary, match="covers_until=2"):
        build_window(ctx, WindowPolicy(), EST, Summary("s", 2))
    with pytest.raises(InvalidSummary):
        needs_summary(ctx, WindowPolicy(), EST, Summary("s", 99))
    before = ctx.messages
    ctx._messages.append(ToolMessage(call_id="t9.9", content="orphan"))  # bypasses the push checks
    with pytest.raises(InvalidWindowContext, match="invalid"):
        build_window(ctx, WindowPolicy(), EST)
    assert ctx.messages[:-1] == before


def test_needs_summary_is_none_while_nothing_is_dropped_and_one_round_otherwise() -> None:
    ctx = _ctx(3)
    policy = WindowPolicy(keep_recent_turns=8)
    assert needs_summary(ctx, policy, EST) is None
    ctx = _ctx(30)
    per_turn = EST.estimate(ctx[1]) + EST.estimate(ctx[2])
    policy = WindowPolicy(keep_recent_turns=2, max_summary_input_tokens=3 * per_turn)
    assert needs_summary(ctx, policy, EST) == range(1, 7)
    assert needs_summary(ctx, policy, EST, Summary("s", 7)) == range(7, 13)
    # A round always holds at least one turn, even a turn over the input limit.
    small = WindowPolicy(keep_recent_turns=2, max_summary_input_tokens=1)
    assert needs_summary(ctx, small, EST) == range(1, 3)


async def test_refresh_summary_covers_exactly_the_dropped_turns_over_several_rounds() -> None:
    ctx = _ctx(30)
    per_turn = EST.estimate(ctx[1]) + EST.estimate(ctx[2])
    policy = WindowPolicy(keep_recent_turns=2, max_summary_input_tokens=5 * per_turn)
    summarizer = Fixed()
    assert isinstance(summarizer, Summarizer)
    summary = await refresh_summary(ctx, policy, EST, None, summarizer)
    assert summary == Summary("short summary", 57)
    assert [(r.start, r.end) for r in summarizer.requests] == [
        (1, 11),
        (11, 21),
        (21, 31),
        (31, 41),
        (41, 51),
        (51, 57),
    ]
    assert summarizer.requests[0].previous is None
    assert summarizer.requests[1].previous == Summary("short summary", 11)
    assert needs_summary(ctx, policy, EST, summary) is None


async def test_refresh_summary_passes_clipped_messages_to_the_summarizer() -> None:
    ctx = Context([SystemMessage(text="p"), UserMessage(text="long " * 2000), AssistantMessage(text="ok")])
    ctx.push(UserMessage(text="next"))
    policy = WindowPolicy(max_tokens=400, keep_recent_turns=1)
    summarizer = Fixed()
    await refresh_summary(ctx, policy, EST, None, summarizer)
    sent = summarizer.requests[0].messages[0]
    assert isinstance(sent, UserMessage) and sent.text.endswith(CLIP_MARKER)
    assert EST.estimate(sent) <= policy.message_limit


async def test_a_summary_over_its_limit_is_not_stored_and_the_previous_one_is_kept() -> None:
    ctx = _ctx(20)
    policy = WindowPolicy(max_tokens=1000, keep_recent_turns=2)
    previous = Summary("old", 3)
    with pytest.raises(SummaryTooLarge) as err:
        await refresh_summary(ctx, policy, EST, previous, Fixed("x" * 5000))
    assert err.value.kept == previous
    assert err.value.limit == 250
    window = build_window(ctx, policy, EST, err.value.kept)
    assert window.uncovered is not None
    assert window.estimated_tokens <= 1000


async def test_a_failing_summarizer_reports_the_newest_accepted_summary() -> None:
    ctx = _ctx(30)
    per_turn = EST.estimate(ctx[1]) + EST.estimate(ctx[2])
    policy = WindowPolicy(keep_recent_turns=2, max_summary_input_tokens=5 * per_turn)

    class Flaky:
        calls = 0

        async def summarize(self, request: SummaryRequest) -> str:
            self.calls += 1
            if self.calls == 3:
                raise RuntimeError("provider down")
            return f"round {self.calls}"

    with pytest.raises(SummarizerFailed) as err:
        await refresh_summary(ctx, policy, EST, None, Flaky())
    assert err.value.kept == Summary("round 2", 21)
    assert isinstance(err.value.__cause__, RuntimeError)
