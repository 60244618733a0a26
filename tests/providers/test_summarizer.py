"""LlmSummarizer: one model request per summary round, over any LlmProvider."""

from __future__ import annotations

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
    Summarizer,
    Summary,
    SummaryRequest,
    WindowPolicy,
    build_window,
    refresh_summary,
)
from brisvox.core.clock import SimClock
from brisvox.providers.errors import ProviderError
from brisvox.providers.summarizer import LlmSummarizer
from brisvox.sim.mock_llm import Fail, Say, ScriptedLlm


def _request() -> SummaryRequest:
    call = ToolCall(id="t1.0", name="check_availability", arguments={"time": "19:00"})
    return SummaryRequest(
        previous=Summary("Ada wants a table.", 1),
        messages=(
            UserMessage(text="For four at seven"),
            AssistantMessage(text="Let me check.", tool_calls=(call,)),
            ToolMessage(call_id="t1.0", content='{"free": true}'),
        ),
        start=1,
        end=4,
        max_tokens=120,
    )


async def test_a_round_becomes_one_request_with_the_previous_summary_and_the_transcript() -> None:
    llm = ScriptedLlm(SimClock(), [[Say("Ada booked four at seven.")]])
    summarizer = LlmSummarizer(provider=llm)
    assert isinstance(summarizer, Summarizer)
    assert await summarizer.summarize(_request()) == "Ada booked four at seven."
    (sent,) = llm.requests
    assert sent.max_tokens == 120 and sent.tools == ()
    assert isinstance(sent.messages[0], SystemMessage) and "at most 90 words" in sent.messages[0].text
    body = sent.messages[1]
    assert isinstance(body, UserMessage)
    assert "Ada wants a table." in body.text
    assert "Caller: For four at seven" in body.text
    assert "Agent called check_availability." in body.text
    assert 'Tool result: {"free": true}' in body.text
    assert "19:00" not in body.text  # arguments are not sent to the summarizer


async def test_a_provider_error_is_raised_and_an_empty_reply_is_returned_empty() -> None:
    llm = ScriptedLlm(SimClock(), [[Fail()], [Say("   ")]])
    summarizer = LlmSummarizer(provider=llm)
    with pytest.raises(ProviderError):
        await summarizer.summarize(_request())
    assert await summarizer.summarize(_request()) == ""


async def test_it_drives_the_window_refresh() -> None:
    llm = ScriptedLlm(SimClock(), lambda request: [Say("The caller talked about tables.")])
    ctx = Context([SystemMessage(text="prompt")])
    for i in range(12):
        ctx.push_user(f"question {i}")
        ctx.push_assistant(f"answer {i}")
    policy = WindowPolicy(keep_recent_turns=3)
    summary = await refresh_summary(ctx, policy, CharsPerToken(), None, LlmSummarizer(provider=llm))
    assert summary == Summary("The caller talked about tables.", 19)
    assert build_window(ctx, policy, CharsPerToken(), summary).uncovered is None
