"""Custom processing at named points: a hook rewrites typed frames, keeps their epoch, and a
hook that returns the wrong thing fails the call loudly."""

from __future__ import annotations

import dataclasses
import re

import pytest

import brisvox
from brisvox.agent.context import UserMessage
from brisvox.core.clock import SimClock
from brisvox.core.frames import LlmTextFrame, UserTextFrame
from brisvox.engine import CallFailed
from brisvox.sim import Say, ScriptedLlm
from brisvox.testing import AgentTest

CARD = re.compile(r"\b(?:\d[ -]?){13,19}\b")


def redact_cards(frame: UserTextFrame) -> UserTextFrame:
    return dataclasses.replace(frame, text=CARD.sub("[card number]", frame.text))


async def test_a_before_llm_hook_redacts_card_numbers_from_what_the_model_reads_and_keeps() -> None:
    clock = SimClock()
    llm = ScriptedLlm(clock, [[Say("Thanks, noted.")]])
    agent = brisvox.Agent(prompt="p", hooks=[brisvox.Hook(brisvox.HookPoint.BEFORE_LLM, redact_cards)])
    async with AgentTest(agent, llm=llm, clock=clock) as test:
        turn = await test.user_says("my card is 4111 1111 1111 1111, expiry soon")
    turn.expect.said(equals="Thanks, noted.")
    sent = [m.text for m in llm.requests[0].messages if isinstance(m, UserMessage)]
    assert sent == ["my card is [card number], expiry soon"]
    kept = [m.text for m in test.context.messages if isinstance(m, UserMessage)]
    assert kept == ["my card is [card number], expiry soon"]


async def test_an_async_hook_that_forges_the_epoch_still_carries_its_frames_epoch() -> None:
    seen: list[str] = []

    async def observe(frame: LlmTextFrame) -> LlmTextFrame:
        seen.append(frame.text)
        return dataclasses.replace(frame, epoch=frame.epoch + 1000)  # would be ahead of every stage

    agent = brisvox.Agent(prompt="p", hooks=[brisvox.Hook(brisvox.HookPoint.BEFORE_SPEAKING, observe)])
    async with AgentTest(agent, llm=["hello there"]) as test:
        turn = await test.user_says("hi")
    assert "".join(seen) == "hello there" and turn.said == "hello there"
    assert test.context.messages[-1].text == "hello there"


async def test_a_before_speaking_hook_that_changes_the_text_fails_the_call(caplog: pytest.LogCaptureFixture) -> None:
    def shout(frame: LlmTextFrame) -> LlmTextFrame:
        return dataclasses.replace(frame, text=frame.text.upper())

    agent = brisvox.Agent(prompt="p", hooks=[brisvox.Hook(brisvox.HookPoint.BEFORE_SPEAKING, shout)])
    with pytest.raises(CallFailed):
        async with AgentTest(agent, llm=["hello there"]) as test:
            await test.user_says("hi")
    assert "changed the reply's text" in caplog.text


async def test_a_hook_that_returns_another_type_fails_the_call_instead_of_losing_the_turn(
        caplog: pytest.LogCaptureFixture) -> None:
    agent = brisvox.Agent(prompt="p", hooks=[brisvox.Hook(brisvox.HookPoint.AFTER_LISTENING, lambda f: f.text)])
    with pytest.raises(CallFailed) as info:
        async with AgentTest(agent, llm=["never"]) as test:
            await test.user_says("hello")
    assert info.value.report.failure is not None
    assert "returned str, not the UserTextFrame" in caplog.text
