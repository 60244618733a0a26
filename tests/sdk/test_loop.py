"""The model-backed brain's own tool loop, driven through the conformance driver on virtual time."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic import BaseModel

import brisvox
from brisvox.agent.context import AssistantMessage, SystemMessage, ToolMessage, UserMessage
from brisvox.core.clock import SystemClock
from brisvox.core.errors import ConfigError
from brisvox.providers.llm import LlmProvider, ToolChoice, ToolChoiceMode
from brisvox.sdk import ModelBrain, needs_result_now, protocol
from brisvox.sdk.loop import FALLBACK_LINE, WATCHDOG_LINE
from brisvox.sdk.testing import BrainDriver, call, scripted
from brisvox.sim.mock_llm import Fail, Pause, Say
from brisvox.transport.rtvi.ui import Action, AppEvent, UiContract


class ShowSection(Action):
    name: str


class SectionRead(AppEvent):
    name: str


class Section(BaseModel):
    name: str


class Coach(ModelBrain):
    ui = UiContract(actions=(ShowSection,), events=(SectionRead,))

    def __init__(self, llm: LlmProvider, **options: Any) -> None:
        super().__init__(llm, system="You are a coach.", **options)
        self.readings = [5.0, 7.0]
        self.slow = 0.0
        self.ran: list[str] = []

    @brisvox.tool.read_only
    async def show(self, args: Section) -> str:
        """Put a section of the screen in front of the user."""
        self.ran.append("show")
        self.dispatch(ShowSection(name=args.name))
        return "shown"

    @needs_result_now
    @brisvox.tool.read_only
    async def weekly_average(self) -> str:
        """The user's average glucose this week, in mmol/L."""
        self.ran.append("weekly_average")
        if self.slow:
            await self.clock.sleep(self.slow)
        return f"{sum(self.readings) / len(self.readings):.1f}"


def results(messages: tuple[Any, ...]) -> list[str]:
    return [m.content for m in messages if isinstance(m, ToolMessage)]


async def test_a_plain_answer_is_said_and_logged_as_one_turn(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="brisvox.sdk.loop")
    model = scripted("Hello there.")
    async with BrainDriver(Coach(model)) as driver:
        assert driver.ready is not None and driver.ready.tools == ()  # its tools are not the call's model's
        turn = await driver.user_says("hi")
    assert turn.completed and turn.said == ("Hello there.",)
    assert turn.report is not None and (turn.report.hops, turn.report.calls, turn.report.speechless) == (0, 0, False)
    request = turn.requests[0]
    assert request.messages == (SystemMessage(text="You are a coach."), UserMessage(text="hi"))
    assert [t.name for t in request.tools] == ["show", "weekly_average"]
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("turn ")]
    assert lines == ["turn 1: hops=0 calls=0 awaited=0 speechless=no"]


async def test_an_unmarked_tools_result_waits_for_the_next_turn() -> None:
    model = scripted(["Opening your meals now.", call("show", name="meals")], "You ate twice.")
    brain = Coach(model)
    async with BrainDriver(brain) as driver:
        turn = await driver.user_says("show my meals")
        assert len(turn.requests) == 1  # not asked again for "shown"
        assert turn.said == ("Opening your meals now.",) and brain.ran == ["show"]
        assert turn.report is not None and (turn.report.calls, turn.report.awaited, turn.report.hops) == (1, 0, 0)
        nxt = await driver.user_says("what did I eat")
    assert results(nxt.requests[0].messages) == ["shown"]  # the model reads it with the next message
    assert nxt.requests[0].messages[-1] == UserMessage(text="what did I eat")


async def test_the_speech_in_front_of_a_call_goes_out_before_the_tool_runs() -> None:
    seen: list[list[str]] = []
    model = scripted(["One moment.", call("show", name="meals"), "Done."])
    brain = Coach(model)
    async with BrainDriver(brain) as driver:
        original = brain.dispatch

        def dispatch(action: BaseModel) -> None:
            seen.append(list(driver.said))
            original(action)

        brain.dispatch = dispatch  # type: ignore[method-assign]
        turn = await driver.user_says("show me")
    assert seen == [["One moment."]]
    assert turn.said == ("One moment.", "Done.")


async def test_a_marked_tool_asks_the_model_again_in_the_same_turn_with_its_result() -> None:
    model = scripted([call("weekly_average")], "Your average is six.")
    async with BrainDriver(Coach(model)) as driver:
        turn = await driver.user_says("how am I doing")
    assert turn.said == ("Your average is six.",)
    assert len(turn.requests) == 2 and results(turn.requests[1].messages) == ["6.0"]
    assert turn.report is not None and (turn.report.hops, turn.report.calls, turn.report.awaited) == (1, 1, 1)


async def test_needs_result_now_marks_a_tool_above_or_below_the_declaration() -> None:
    @brisvox.tool.read_only
    async def below() -> str:
        """Below."""
        return ""

    async def plain() -> str:
        """Above."""
        return ""

    above = brisvox.tool.read_only(needs_result_now(plain))
    assert getattr(needs_result_now(below).function, "__brisvox_needs_result_now__", False)
    assert getattr(above.function, "__brisvox_needs_result_now__", False)
    with pytest.raises(ConfigError, match="needs_result_now"):
        needs_result_now(3)


async def test_max_tool_hops_caps_the_re_asks_and_the_last_one_offers_no_tool(caplog: pytest.LogCaptureFixture) -> None:
    model = scripted(*([[call("weekly_average")]] * 3), "Six.")
    async with BrainDriver(Coach(model, max_tool_hops=2)) as driver:
        turn = await driver.user_says("average?")
    assert len(turn.requests) == 3
    assert [r.tool_choice.mode for r in turn.requests] == [ToolChoiceMode.AUTO, ToolChoiceMode.AUTO, ToolChoiceMode.NONE]
    last = results(turn.requests[2].messages)[-1]
    assert last == "6.0"
    assert turn.report is not None and turn.report.hops == 2
    assert any("max_tool_hops=2" in r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    with pytest.raises(ConfigError, match="max_tool_hops"):
        Coach(model, max_tool_hops=0)


async def test_a_call_on_the_hop_without_tools_is_answered_not_run() -> None:
    model = scripted([call("weekly_average")], [call("weekly_average")], "Six.")
    brain = Coach(model, max_tool_hops=1)
    async with BrainDriver(brain) as driver:
        turn = await driver.user_says("average?")
        nxt = await driver.user_says("and?")
    assert brain.ran == ["weekly_average"]  # the second call came on the last hop: not run
    assert turn.report is not None and turn.report.calls == 1
    assert "tools are off" in results(nxt.requests[0].messages)[-1]


async def test_the_tools_are_read_once_per_turn() -> None:
    reads: list[int] = []

    class Counting(Coach):
        def tools(self) -> list[brisvox.FunctionTool]:
            reads.append(1)
            found = super().tools()
            return found if len(reads) == 1 else [t for t in found if t.name == "show"]

    model = scripted([call("weekly_average")], "Six.", "Bye.")
    async with BrainDriver(Counting(model)) as driver:
        first = await driver.user_says("average?")
        second = await driver.user_says("bye")
    assert len(reads) == 2
    assert [[t.name for t in r.tools] for r in first.requests] == [["show", "weekly_average"]] * 2
    assert [t.name for t in second.requests[0].tools] == ["show"]


async def test_a_slow_tool_is_named_with_its_time_and_still_counts(caplog: pytest.LogCaptureFixture) -> None:
    model = scripted([call("weekly_average")], "Six.")
    brain = Coach(model)
    brain.slow = 0.412
    async with BrainDriver(brain) as driver:
        turn = await driver.user_says("average?")
    warnings = [r.getMessage() for r in caplog.records if "budget" in r.getMessage()]
    assert warnings == ["tool Coach.weekly_average took 412ms, over the 20ms budget; the user waited for it"]
    assert results(turn.requests[1].messages) == ["6.0"]


async def test_a_fast_tool_is_not_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    model = scripted([call("weekly_average")], "Six.")
    async with BrainDriver(Coach(model)) as driver:
        await driver.user_says("average?")
    assert not [r for r in caplog.records if "budget" in r.getMessage()]


async def test_a_speechless_turn_can_respond_again_with_the_tools_off() -> None:
    class Talker(Coach):
        async def on_speechless(self) -> None:
            await self.respond_with(tools=ToolChoice.NONE)

    model = scripted([call("show", name="meals")], "Here are your meals.")
    async with BrainDriver(Talker(model)) as driver:
        turn = await driver.user_says("meals")
    assert turn.said == ("Here are your meals.",)
    assert turn.requests[1].tool_choice is ToolChoice.NONE
    assert turn.report is not None and turn.report.speechless


async def test_the_watchdog_fills_a_silence_of_ten_seconds() -> None:
    model = scripted([Pause(15.0), Say("Finally.")])
    async with BrainDriver(Coach(model)) as driver:
        start = driver.clock.now()
        turn = await driver.user_says("hello?")
        assert driver.clock.now() - start == pytest.approx(15.0, abs=0.1)
    assert turn.said == (WATCHDOG_LINE, "Finally.")


async def test_the_watchdog_stays_quiet_once_the_turn_has_spoken() -> None:
    model = scripted([Say("Hi."), Pause(20.0), call("show", name="x")])
    async with BrainDriver(Coach(model)) as driver:
        turn = await driver.user_says("hello")
        assert WATCHDOG_LINE not in driver.said
    assert turn.said == ("Hi.",)


class SayingCoach(Coach):
    answers_turns = False  # answers each user_turn with says of its own


async def test_a_speechless_turn_of_a_brain_that_says_lines_hears_the_watchdog_line_after_it_ended() -> None:
    model = scripted([call("show", name="meals")])
    async with BrainDriver(SayingCoach(model)) as driver:
        assert driver.ready is not None and not driver.ready.answers_turns
        turn = await driver.user_says("meals")
        assert turn.said == () and turn.report is not None and turn.report.speechless
        await driver.clock.sleep(10.5)
        assert driver.said == [WATCHDOG_LINE]
        assert all(m.reply_to is None for m in driver.messages if isinstance(m, protocol.Say))


async def test_a_speechless_reply_ends_at_once_and_no_watchdog_line_follows_it() -> None:
    model = scripted([call("show", name="meals")])
    async with BrainDriver(Coach(model)) as driver:
        request = await driver.request_reply("meals")
        await driver.event("bot_done")
        assert driver.reply(request) == ()  # ended, nothing said: the call's turn is over
        await driver.clock.sleep(10.5)
        assert driver.said == []


async def test_a_model_failure_is_logged_and_the_caller_hears_the_fallback(caplog: pytest.LogCaptureFixture) -> None:
    model = scripted([Fail()])
    async with BrainDriver(Coach(model)) as driver:
        turn = await driver.user_says("hi")
    assert turn.said == (FALLBACK_LINE,)
    assert turn.report is not None and turn.report.failed and not turn.completed
    assert any(r.levelno == logging.ERROR and "model failed" in r.getMessage() for r in caplog.records)


async def test_a_bug_in_the_turn_is_logged_with_its_traceback_and_the_caller_hears_the_fallback(
        caplog: pytest.LogCaptureFixture) -> None:
    class Buggy(Coach):
        async def on_speechless(self) -> None:
            raise RuntimeError("bug")

    async with BrainDriver(Buggy(scripted([call("show", name="x")]))) as driver:
        turn = await driver.user_says("hi")
    assert turn.said == (FALLBACK_LINE,) and not turn.completed
    failed = [r for r in caplog.records if "turn 1 failed" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None


async def test_a_tool_error_is_a_result_the_model_reads() -> None:
    model = scripted([call("show", nom="meals")], "Sorry.")
    brain = Coach(model)
    async with BrainDriver(brain) as driver:
        await driver.user_says("show")
        nxt = await driver.user_says("well?")
    assert brain.ran == []  # the arguments failed validation: the tool did not run
    result = results(nxt.requests[0].messages)[0]
    assert "tool_failed" in result and "name" in result


async def test_a_call_to_a_tool_not_offered_is_answered_unknown_tool() -> None:
    model = scripted([call("delete_everything")], "ok")
    async with BrainDriver(Coach(model)) as driver:
        await driver.user_says("x")
        nxt = await driver.user_says("y")
    assert "unknown_tool" in results(nxt.requests[0].messages)[0]


async def test_the_caller_speaking_cuts_the_turn_and_the_context_keeps_what_was_heard() -> None:
    # The call flushes the line in front of it; the response then stalls before the call can run.
    model = scripted([Say("The first thing is long."), call("show", name="x"), Pause(30.0), Say("Never said.")],
                     "Sure.")
    brain = Coach(model)
    async with BrainDriver(brain) as driver:
        await driver.request_reply("tell me")  # the turn starts; it is not awaited
        await driver.clock.sleep(1.0)
        assert driver.said == ["The first thing is long."]
        await driver.barge_in(heard="The first")
        turn = await driver.user_says("stop")
    assert "Never said." not in driver.said and brain.ran == []
    assert brain.last_turn is not None and brain.last_turn.completed
    handed = turn.requests[0].messages
    assert AssistantMessage(text="The first") in handed
    assert handed[-1] == UserMessage(text="stop")


async def test_a_cut_reply_of_several_lines_keeps_what_was_heard_across_them() -> None:
    model = scripted([Say("One thing. Another thing. A third thing."), Pause(30.0)], "Sure.")
    brain = Coach(model)
    async with BrainDriver(brain) as driver:
        await driver.request_reply("tell me")
        await driver.clock.sleep(1.0)
        assert driver.said == ["One thing. ", "Another thing. "]  # the third waits for its end
        await driver.barge_in(heard="One thing. Anoth")
        turn = await driver.user_says("stop")
    handed = turn.requests[0].messages
    assert [m.text for m in handed if isinstance(m, AssistantMessage)] == ["One thing. Anoth"]


async def test_an_answer_from_the_screen_reaches_the_model_with_the_next_message() -> None:
    model = scripted(["Opening.", call("show", name="meals")], "You read meals.")
    async with BrainDriver(Coach(model)) as driver:
        turn = await driver.user_says("show meals")
        assert turn.completed
        commands = await driver.collect_ui_commands(min_count=1)
        assert commands == [{"command": "show_section", "payload": {"name": "meals"}}]
        await driver.send_ui_event("section_read", {"name": "meals"})
        nxt = await driver.user_says("done")
    notes = [m.text for m in nxt.requests[0].messages if isinstance(m, SystemMessage)][1:]
    assert len(notes) == 1 and "section_read" in notes[0]
    assert not [m for m in driver.messages if isinstance(m, protocol.ContextUpdate)]  # its own context, not the call's


async def test_a_model_brain_offers_the_call_no_remote_tools_and_closes_its_model() -> None:
    closed: list[bool] = []
    model = scripted("x")

    async def aclose() -> None:
        closed.append(True)

    model.aclose = aclose  # type: ignore[attr-defined]
    async with BrainDriver(Coach(model, clock=SystemClock())):
        pass
    assert closed == [True]


@pytest.mark.realtime
async def test_a_tool_that_blocks_the_loop_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    import time

    class Blocking(Coach):
        @brisvox.tool.read_only
        async def block(self) -> str:
            """Block the loop (what a tool must not do)."""
            time.sleep(0.05)  # noqa: ASYNC251 - blocking the loop is what this tool demonstrates
            return "done"

    async with BrainDriver(Blocking(scripted([call("block")]))) as driver:
        await driver.user_says("go")
    lines = [r.getMessage() for r in caplog.records if "budget" in r.getMessage()]
    assert len(lines) == 1 and lines[0].startswith("tool Blocking.block took ")


async def test_what_was_heard_of_another_turns_reply_leaves_the_brains_reply_whole() -> None:
    model = scripted("One thing. Another thing.", "Sure.")
    brain = Coach(model)
    async with BrainDriver(brain) as driver:
        await driver.user_says("tell me")  # turn 1
        await driver._event("bot_heard", turn=7, text="One")  # another turn's reply (the agent file's model's)
        turn = await driver.user_says("and?")
    handed = turn.requests[0].messages
    assert [m.text for m in handed if isinstance(m, AssistantMessage)] == ["One thing. Another thing."]
