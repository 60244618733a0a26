"""The sends a tool's value lists under ``delivered`` reach ``Execution.delivered`` from the value itself."""

from __future__ import annotations

from typing import Any

from brisvox.agent.tools._answers import delivered_of
from brisvox.agent.tools.cancel import CancelToken
from brisvox.agent.tools.registry import ToolCallContext, ToolRegistry
from brisvox.agent.tools.results import Outcome
from brisvox.core.clock import SimClock

from ._helpers import RO, SE, call, engine, spec


def _registry(value: Any) -> ToolRegistry:
    async def send(args: dict[str, Any], ctx: ToolCallContext) -> Any:
        return value

    reg = ToolRegistry()
    reg.register(spec("send_sms", SE), send)
    reg.register(spec("look", RO), send)
    return reg


def test_only_an_objects_list_of_strings_counts_as_delivered() -> None:
    assert delivered_of({"delivered": ["sms", 3, "email"]}) == ("sms", "email")
    assert delivered_of({"delivered": "sms"}) == ()
    assert delivered_of('{"delivered": ["sms"]}') == ()  # a string is text for the model, not a record of sends
    assert delivered_of(["sms"]) == ()


async def test_a_side_effects_sends_survive_the_truncation_of_its_result() -> None:
    clock = SimClock()
    value = {"delivered": ["sms to the caller"], "transcript": "x" * 100_000}
    async with engine(_registry(value), clock, max_result_bytes=1024) as eng:
        ex = await eng.execute([call("t1.0", "send_sms", to="+1")], 1, CancelToken())
        ex.mark_delivered()
    assert ex.outcomes == (Outcome.OK_TRUNCATED,)
    assert ex.delivered == (("sms to the caller",),)  # the text the model reads no longer parses


async def test_a_replay_from_the_record_and_a_read_only_result_carry_their_sends() -> None:
    clock = SimClock()
    async with engine(_registry({"delivered": ["email"]}), clock) as eng:
        c = call("t1.0", "send_sms", to="+1")
        (await eng.execute([c], 1, CancelToken())).mark_delivered()
        again = await eng.execute([c, call("t1.1", "look")], 1, CancelToken())
        again.mark_delivered()
    assert again.outcomes[0] is Outcome.RECORDED
    assert again.delivered == (("email",), ("email",))


async def test_a_tool_that_raised_delivered_nothing() -> None:
    clock = SimClock()

    async def fails(args: dict[str, Any], ctx: ToolCallContext) -> Any:
        raise RuntimeError("gateway down")

    reg = ToolRegistry()
    reg.register(spec("send_sms", SE), fails)
    async with engine(reg, clock) as eng:
        ex = await eng.execute([call("t1.0", "send_sms", to="+1")], 1, CancelToken())
        ex.mark_delivered()
    assert ex.results[0].is_error and ex.delivered == ((),)  # a crash: the outcome is unknown, nothing claimed
