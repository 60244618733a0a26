"""The long-call memory in calls: the window's chained summary through the call's own LLM."""

from __future__ import annotations

import logging
import re

import pytest

from brisvox.agent.context import Context, SystemMessage, UserMessage
from brisvox.agent.turn import FixedSilence
from brisvox.agent.window import SUMMARY_PREFIX, SummaryRequest, WindowPolicy
from brisvox.core.clock import SimClock
from brisvox.core.tasks import TaskScope
from brisvox.engine import EngineConfig
from brisvox.engine.config import SummaryConfig
from brisvox.engine.memory import CallMemory
from brisvox.providers.llm import LlmRequest
from brisvox.providers.summarizer import DEFAULT_SUMMARY_INSTRUCTIONS
from brisvox.sim import MockTtsConfig, Say, ScenarioBuilder, ScriptedLlm
from brisvox.sim.mock_llm import Script
from tests.engine.harness import simulate

_SUMMARY_HEAD = DEFAULT_SUMMARY_INSTRUCTIONS.split("{", 1)[0]


def _is_summary_request(request: LlmRequest) -> bool:
    first = request.messages[0]
    return isinstance(first, SystemMessage) and first.text.startswith(_SUMMARY_HEAD)


def _host(request: LlmRequest) -> Script:
    """The call's model: answers each turn with a short line, and each summary request with the
    codes it has seen (in the previous summary and in the new part of the call)."""
    if _is_summary_request(request):
        body = request.messages[-1]
        assert isinstance(body, UserMessage)
        codes = sorted(set(re.findall(r"code (\d+)", body.text)))
        return [Say("Facts: " + ", ".join(f"code {c}" for c in codes) + "." if codes else "Small talk only.")]
    return [Say("Noted.")]


def _turn_requests(llm: ScriptedLlm) -> dict[int, LlmRequest]:
    """Each caller turn's first request, by the turn number the caller said."""
    out: dict[int, LlmRequest] = {}
    for request in llm.requests:
        if _is_summary_request(request):
            continue
        last = next(m for m in reversed(request.messages) if isinstance(m, UserMessage))
        number = int(last.text.split()[1])
        out.setdefault(number, request)
    return out


async def test_a_fact_from_turn_5_reaches_the_model_at_turn_300_of_a_360_turn_call_through_a_summary() -> None:
    clock = SimClock()
    turns = 360
    builder = ScenarioBuilder().pause(0.5)
    for i in range(1, turns + 1):
        text = f"turn {i} my code 4711 please" if i == 5 else f"turn {i} just chatting"
        builder.say(text, duration=0.8).pause(1.6)
    llm = ScriptedLlm(clock, _host)
    config = EngineConfig(turn=FixedSilence(silence=0.5))
    result = await simulate(clock, builder.build(), llm, config=config, tts=MockTtsConfig(chars_per_second=40.0))
    report = result.report
    assert report.turns == turns
    assert report.summary_failures == 0
    assert report.uncovered_requests == 0  # the summary was always ready when a request needed it
    requests = _turn_requests(llm)
    assert sorted(requests) == list(range(1, turns + 1))
    at_300 = requests[300].messages
    summary = at_300[2]  # after the system prompt and the date
    assert isinstance(summary, SystemMessage) and summary.text.startswith(SUMMARY_PREFIX)
    assert "code 4711" in summary.text
    # Turn 5 itself is not in the request: the fact arrived through the summary alone.
    assert not any(isinstance(m, UserMessage) and "4711" in m.text for m in at_300)
    assert sum(isinstance(m, UserMessage) for m in at_300) == 8  # the window's newest turns
    # The full context still holds every turn.
    assert sum(isinstance(m, UserMessage) for m in report.context.messages) == turns


# --- CallMemory on its own (virtual time) ---------------------------------------------------


class _Summarizer:
    """Answers after ``seconds`` with the caller turns it was given; ``fail`` raises instead."""

    def __init__(self, clock: SimClock, seconds: float = 0.0, fail: bool = False) -> None:
        self.clock, self.seconds, self.fail = clock, seconds, fail
        self.requests: list[SummaryRequest] = []

    async def summarize(self, request: SummaryRequest) -> str:
        self.requests.append(request)
        await self.clock.sleep(self.seconds)
        if self.fail:
            raise ConnectionError("the summary model is down")
        users = [m.text for m in request.messages if isinstance(m, UserMessage)]
        previous = request.previous.text + " " if request.previous is not None else ""
        return previous + " ".join(users)


def _context(turns: int) -> Context:
    ctx = Context([SystemMessage(text="prompt")])
    for i in range(turns):
        ctx.push_user(f"u{i}")
        ctx.push_assistant(f"a{i}")
    return ctx


POLICY = WindowPolicy(max_tokens=4000, keep_recent_turns=3)


async def _settle(clock: SimClock, memory: CallMemory, seconds: float = 60.0) -> None:
    await clock.sleep(seconds)
    assert not memory.refreshing


async def test_after_a_turn_the_summary_covers_what_the_next_request_drops_without_waiting_for_it() -> None:
    clock = SimClock()
    summarizer = _Summarizer(clock, seconds=2.0)
    async with TaskScope("test") as scope:
        memory = CallMemory(POLICY, summarizer, SummaryConfig(), clock, scope)
        ctx = _context(3)
        memory.after_turn(ctx)  # 3 turns + the next one: the first will drop
        assert memory.refreshing and clock.now() == 0.0  # off the hot path
        await _settle(clock, memory)
        ctx.push_user("u3")
        sent = memory.request_messages(ctx)
    assert [m.text for m in sent] == ["prompt", SUMMARY_PREFIX + "u0", "u1", "a1", "u2", "a2", "u3"]
    assert memory.stats.summaries == 1 and memory.stats.uncovered_requests == 0


async def test_a_failed_summary_is_logged_with_its_traceback_and_counted_and_the_gap_is_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    clock = SimClock()
    async with TaskScope("test") as scope:
        memory = CallMemory(POLICY, _Summarizer(clock, fail=True), SummaryConfig(), clock, scope)
        ctx = _context(3)
        with caplog.at_level(logging.INFO, logger="brisvox.engine.memory"):
            memory.after_turn(ctx)
            await _settle(clock, memory)
            ctx.push_user("u3")
            sent = memory.request_messages(ctx)
    assert [m.text for m in sent] == ["prompt", "u1", "a1", "u2", "a2", "u3"]
    assert memory.stats.summary_failures == 1 and memory.stats.uncovered_requests == 1
    failed = [r for r in caplog.records if "could not be refreshed" in r.message]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert any("leaves out 2 earlier messages" in r.message and r.levelno == logging.WARNING for r in caplog.records)


async def test_a_summary_slower_than_its_timeout_is_given_up_on_the_injected_clock() -> None:
    clock = SimClock()
    async with TaskScope("test") as scope:
        memory = CallMemory(POLICY, _Summarizer(clock, seconds=30.0), SummaryConfig(timeout=5.0), clock, scope)
        memory.after_turn(_context(3))
        await clock.sleep(5.5)
        assert not memory.refreshing
    assert memory.stats.summary_failures == 1 and memory.summary is None


async def test_a_summary_follows_its_caller_message_when_an_unheard_reply_before_it_is_removed() -> None:
    clock = SimClock()
    async with TaskScope("test") as scope:
        memory = CallMemory(POLICY, _Summarizer(clock), SummaryConfig(), clock, scope)
        ctx = _context(3)
        memory.after_turn(ctx)
        await _settle(clock, memory)
        ctx.remove(2)  # "a0", inside what the summary covers
        ctx.push_user("u3")
        sent = memory.request_messages(ctx)
    assert [m.text for m in sent] == ["prompt", SUMMARY_PREFIX + "u0", "u1", "a1", "u2", "a2", "u3"]
    assert memory.summary is not None and memory.summary.covers_until == 2


async def test_a_replaced_context_drops_the_summary_and_counts_it() -> None:
    clock = SimClock()
    async with TaskScope("test") as scope:
        memory = CallMemory(POLICY, _Summarizer(clock), SummaryConfig(), clock, scope)
        ctx = _context(3)
        memory.after_turn(ctx)
        await _settle(clock, memory)
        memory.context_replaced()
        ctx.set_messages([SystemMessage(text="new node"), UserMessage(text="u9")])
        sent = memory.request_messages(ctx)
    assert [m.text for m in sent] == ["new node", "u9"]
    assert memory.summary is None and memory.stats.summaries_dropped == 1


async def test_without_a_summarizer_the_window_still_bounds_requests_and_says_so() -> None:
    clock = SimClock()
    async with TaskScope("test") as scope:
        memory = CallMemory(POLICY, None, SummaryConfig(), clock, scope)
        ctx = _context(5)
        memory.after_turn(ctx)
        assert not memory.refreshing
        sent = memory.request_messages(ctx)
    assert [m.text for m in sent] == ["prompt", "u2", "a2", "u3", "a3", "u4", "a4"]
    assert memory.stats.uncovered_requests == 1
