"""The 60-minute call: 360 turns fed one by one, the summary refreshed and the window built after each."""

from __future__ import annotations

import random
from dataclasses import dataclass, field

import pytest

from brisvox.agent.context import (
    AssistantMessage,
    CharsPerToken,
    Context,
    SystemMessage,
    ToolCall,
    ToolMessage,
    UserMessage,
)
from brisvox.agent.window import (
    SUMMARY_PREFIX,
    SummarizerFailed,
    Summary,
    SummaryRequest,
    SummaryTooLarge,
    WindowPolicy,
    build_window,
    header_end,
    needs_summary,
    refresh_summary,
)
from brisvox.core.clock import run_virtual

PROMPT = "You are the booking assistant of a small restaurant. Be brief and friendly."
TURNS = 360
EST = CharsPerToken()
_VOCABULARY = (
    "table tonight seven people window quiet garden birthday menu vegetarian parking "
    "please thanks maybe later tomorrow morning evening friday saturday booking name "
    "phone number allergy nuts fish wine dessert terrace inside outside price"
)
WORDS = tuple(_VOCABULARY.split(" "))


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def feed_turn(ctx: Context, i: int, rng: random.Random) -> None:
    """One turn: about 15 words from the caller, 40 from the agent, a tool call every tenth turn."""
    ctx.push(UserMessage(text=f"u{i}: " + _words(rng, 15)))
    if i % 10 == 9:
        call = ToolCall(
            id=f"t{i}.0", name="check_availability", arguments={"date": "2026-12-24", "people": 4}
        )
        ctx.push(AssistantMessage(tool_calls=(call,)))
        ctx.push(ToolMessage(call_id=call.id, content='{"free": true, "time": "19:00"}'))
    ctx.push(AssistantMessage(text=_words(rng, 40)))


@dataclass
class ScriptedSummarizer:
    """Keeps a short summary; records every request; grows its text when asked to."""

    grow: bool = False
    max_input_tokens: int | None = None
    requests: list[SummaryRequest] = field(default_factory=list)
    returned: list[Summary] = field(default_factory=list)
    down: bool = False

    async def summarize(self, request: SummaryRequest) -> str:
        if self.down:
            raise ConnectionError("summarizer unavailable")
        size = sum(EST.estimate(m) for m in request.messages)
        if self.max_input_tokens is not None and size > self.max_input_tokens:
            raise ValueError(f"input of {size} tokens is over {self.max_input_tokens}")
        self.requests.append(request)
        users = [m.text.split(":")[0] for m in request.messages if isinstance(m, UserMessage)]
        if self.grow:
            base = request.previous.text if request.previous else ""
            text = (base + " " + " ".join(f"{u} asked about a table" for u in users)).strip()
        else:
            text = f"The caller has made {request.end} messages so far; latest turns {','.join(users[-3:])}."
        self.returned.append(Summary(text, request.end))
        return text


def _user_tags(messages: object) -> list[str]:
    return [m.text.split(":")[0] for m in messages if isinstance(m, UserMessage)]  # type: ignore[attr-defined]


def _check_window(ctx: Context, policy: WindowPolicy, summary: Summary | None, *, exact_cover: bool) -> int:
    window = build_window(ctx, policy, EST, summary)
    sent = window.context
    sent.validate()
    assert not window.over_budget
    assert window.estimated_tokens == sent.estimate_tokens()
    assert window.estimated_tokens <= policy.max_tokens
    assert sent[0] == SystemMessage(text=PROMPT)
    last_user = next(m for m in reversed(ctx.messages) if isinstance(m, UserMessage))
    assert next(m for m in reversed(sent.messages) if isinstance(m, UserMessage)) == last_user
    # Tool calls are whole: every call in the window is answered in the window and vice versa.
    calls = {c.id for m in sent.messages if isinstance(m, AssistantMessage) for c in m.tool_calls}
    answers = {m.call_id for m in sent.messages if isinstance(m, ToolMessage)}
    assert calls == answers
    h = header_end(ctx.messages)
    if summary is not None and summary.covers_until > h:
        assert sent[1] == SystemMessage(text=SUMMARY_PREFIX + summary.text)
        summarized = _user_tags(ctx.messages[h : summary.covers_until])
    else:
        summarized = []
    if exact_cover:
        assert window.uncovered is None
        assert summarized + _user_tags(sent.messages) == _user_tags(ctx.messages)
    return window.estimated_tokens


def _run_call(policy: WindowPolicy, summarizer: ScriptedSummarizer) -> tuple[Summary | None, list[int]]:
    async def main() -> tuple[Summary | None, list[int]]:
        rng = random.Random(7)
        ctx = Context([SystemMessage(text=PROMPT)])
        summary: Summary | None = None
        used = []
        for i in range(TURNS):
            feed_turn(ctx, i, rng)
            before = summary
            first_request = len(summarizer.requests)
            summary = await refresh_summary(ctx, policy, EST, summary, summarizer)
            # Each call of this turn received the summary the call before it returned.
            previous = before
            for k in range(first_request, len(summarizer.requests)):
                request = summarizer.requests[k]
                assert request.previous == previous
                assert request.start == (previous.covers_until if previous else 1)
                assert request.max_tokens == policy.summary_limit
                previous = summarizer.returned[k]
            assert previous == summary
            used.append(_check_window(ctx, policy, summary, exact_cover=True))
        assert ctx.messages[0] == SystemMessage(text=PROMPT)
        assert len(_user_tags(ctx.messages)) == TURNS
        return summary, used

    return run_virtual(main)


def test_a_sixty_minute_call_keeps_eight_recent_turns_within_4000_tokens() -> None:
    policy = WindowPolicy(max_tokens=4000, keep_recent_turns=8)
    summarizer = ScriptedSummarizer()
    summary, _ = _run_call(policy, summarizer)
    assert summary is not None
    rng = random.Random(7)
    full = Context([SystemMessage(text=PROMPT)])
    for i in range(TURNS):
        feed_turn(full, i, rng)
    assert len(_user_tags(full.messages[1 : summary.covers_until])) == TURNS - 8


def test_a_sixty_minute_call_fills_a_4000_token_window_by_the_budget_alone() -> None:
    policy = WindowPolicy(max_tokens=4000, keep_recent_turns=100_000)
    _, used = _run_call(policy, ScriptedSummarizer())
    assert max(used) <= 4000
    # Once the call is longer than the budget, the window is filled to at least 3500 tokens.
    assert min(used[100:]) >= 3500


def test_a_sixty_minute_call_fits_a_tighter_1200_token_window() -> None:
    policy = WindowPolicy(max_tokens=1200, keep_recent_turns=8)
    _, used = _run_call(policy, ScriptedSummarizer())
    assert max(used) <= 1200


def test_a_summarizer_that_keeps_growing_is_rejected_at_its_limit_and_replaces_nothing() -> None:
    policy = WindowPolicy(max_tokens=1200, keep_recent_turns=4)
    summarizer = ScriptedSummarizer(grow=True)

    async def main() -> None:
        rng = random.Random(3)
        ctx = Context([SystemMessage(text=PROMPT)])
        summary: Summary | None = None
        rejected = 0
        for i in range(TURNS):
            feed_turn(ctx, i, rng)
            try:
                summary = await refresh_summary(ctx, policy, EST, summary, summarizer)
            except SummaryTooLarge as e:
                rejected += 1
                assert e.limit == policy.summary_limit
                assert e.tokens > policy.summary_limit
                # The rejected text replaces nothing: the kept summary is the last accepted one.
                assert (
                    e.kept is None
                    or EST.estimate(SystemMessage(text=SUMMARY_PREFIX + e.kept.text)) <= e.limit
                )
                assert e.kept is None or e.kept.text != summarizer.returned[-1].text
                summary = e.kept
            window = build_window(ctx, policy, EST, summary)
            assert window.estimated_tokens <= policy.max_tokens
            assert not window.over_budget
            window.context.validate()
            if summary is not None:
                assert window.context[1] == SystemMessage(text=SUMMARY_PREFIX + summary.text)
        assert rejected > 0
        # Later turns are dropped uncovered once the summary can no longer grow.
        final = build_window(ctx, policy, EST, summary)
        assert final.uncovered is not None

    run_virtual(main)


def test_a_summarizer_limited_to_200_tokens_catches_up_after_an_outage_in_several_rounds() -> None:
    policy = WindowPolicy(max_tokens=1200, keep_recent_turns=4, max_summary_input_tokens=200)
    summarizer = ScriptedSummarizer(max_input_tokens=200)

    async def main() -> None:
        rng = random.Random(5)
        ctx = Context([SystemMessage(text=PROMPT)])
        summary: Summary | None = None
        summarizer.down = True
        for i in range(60):
            feed_turn(ctx, i, rng)
            if needs_summary(ctx, policy, EST, summary) is not None:
                with pytest.raises(SummarizerFailed) as failed:
                    await refresh_summary(ctx, policy, EST, summary, summarizer)
                assert failed.value.kept is None
        assert build_window(ctx, policy, EST, summary).uncovered is not None
        summarizer.down = False
        summary = await refresh_summary(ctx, policy, EST, summary, summarizer)
        assert len(summarizer.requests) > 5
        for request in summarizer.requests:
            assert sum(EST.estimate(m) for m in request.messages) <= 200
        window = build_window(ctx, policy, EST, summary)
        assert window.uncovered is None
        assert window.estimated_tokens <= policy.max_tokens

    run_virtual(main)
