"""An agent process's commands in calls (simulated calls on virtual time): bot lines, notes, the
offered tools, the end with a farewell and the transfer, each through the engine's own inputs."""

from __future__ import annotations

from brisvox.agent.context import AssistantMessage, SystemMessage, ToolMessage
from brisvox.agent.interrupt import InterruptionPolicy
from brisvox.agent.played import CUT_MARKER
from brisvox.agent.tools import ToolSpec
from brisvox.agent.turn import FixedSilence
from brisvox.core.clock import SimClock
from brisvox.engine import EngineConfig
from brisvox.engine.agent_input import (
    AgentCommand,
    AgentInput,
    BotLine,
    EndWhenSilent,
    Note,
    OfferTools,
    Refusal,
    Transfer,
)
from brisvox.engine.events import BotDone, BotHeard, BotText, CallObserver, EngineEvent
from brisvox.engine.phone import PhonePlan
from brisvox.sim import Call, ScenarioBuilder, ScriptedLlm
from brisvox.sim import Say as Speak
from brisvox.transport.events import StopReason
from tests.engine.harness import OBJ, Counter, SimResult, registry, simulate
from tests.engine.test_phone import Recording

MARK = CUT_MARKER
LONG = " ".join(["and here is one more thing to say about it"] * 8) + "."


class Agent:
    """An AgentInput whose refusals are kept, as the link would send them."""

    def __init__(self) -> None:
        self.refused: list[tuple[str, Refusal]] = []
        self.input = AgentInput(lambda command, why, _message: self.refused.append((command, why)))


def barge_in() -> EngineConfig:
    return EngineConfig(turn=FixedSilence(silence=0.5), interruption=InterruptionPolicy.recommended())


def spoken(result: SimResult) -> list[str]:
    assert result.tts is not None
    return [t for s in result.tts.sessions for t in s.texts.values()]


def cut(text: str) -> bool:
    """Whether ``text`` is LONG cut to what was heard (and marked so)."""
    heard = text.removesuffix(MARK)
    return heard != text and LONG.startswith(heard) and len(heard) < len(LONG) / 2


def said(result: SimResult) -> list[str]:
    return [m.text for m in result.report.context.messages if isinstance(m, AssistantMessage)]


async def test_a_say_while_the_caller_is_silent_is_spoken_in_a_new_epoch_and_kept_in_the_context() -> None:
    clock = SimClock()
    agent = Agent()
    llm = ScriptedLlm(clock, [[Speak("Sure.")]])
    scenario = ScenarioBuilder().pause(4.0).build()
    result = await simulate(clock, scenario, llm, agent=agent.input,
                            commands=((1.0, BotLine("Your order has shipped.")),))
    assert "Your order has shipped." in spoken(result)
    assert said(result) == ["Your order has shipped."]
    assert {epoch for _, epoch in result.audio_at()} == {1}  # the bot's own turn
    assert llm.requests == [] and agent.refused == []


async def test_an_interrupting_say_cuts_the_reply_playing_and_is_spoken_whole() -> None:
    clock = SimClock()
    agent = Agent()
    llm = ScriptedLlm(clock, [[Speak(LONG)]])
    scenario = ScenarioBuilder().pause(0.5).say("tell me everything").pause(6.0).build()
    result = await simulate(clock, scenario, llm, agent=agent.input,
                            commands=((3.0, BotLine("Sorry, a quick update.", interrupt=True)),))
    first, line = said(result)
    assert cut(first)
    assert line == "Sorry, a quick update."
    assert result.report.interrupts == 0  # not a barge-in: the caller said nothing
    assert [epoch for _, epoch in result.clears()] == [1]  # the caller's turn was epoch 0; the line's cleared it


async def test_a_say_that_does_not_interrupt_waits_for_the_reply_to_end() -> None:
    clock = SimClock()
    agent = Agent()
    llm = ScriptedLlm(clock, [[Speak("Let me see, we open at nine on weekdays.")]])
    scenario = ScenarioBuilder().pause(0.5).say("when do you open").pause(7.0).build()
    result = await simulate(clock, scenario, llm, agent=agent.input,
                            commands=((2.2, BotLine("One more thing: we close at five."),),))
    assert said(result) == ["Let me see, we open at nine on weekdays.", "One more thing: we close at five."]
    reply_end = max(at for at, epoch in result.audio_at() if epoch == 0)
    assert min(at for at, epoch in result.audio_at() if epoch == 1) > reply_end


async def test_a_barge_in_on_a_say_cuts_it_and_the_context_keeps_what_was_heard() -> None:
    clock = SimClock()
    agent = Agent()
    seen: list[EngineEvent] = []
    observer = CallObserver(listener=seen.append)
    llm = ScriptedLlm(clock, [[Speak("Okay.")]])
    scenario = ScenarioBuilder().pause(2.5).say("wait stop talking please").pause(3.0).build()
    result = await simulate(clock, scenario, llm, config=barge_in(), agent=agent.input, observer=observer,
                            commands=((0.3, BotLine(LONG)),))
    line, answer = said(result)
    assert cut(line)
    assert answer == "Okay." and result.report.interrupts == 1
    assert [e.text for e in seen if isinstance(e, BotHeard)] == [line.removesuffix(MARK)]


async def test_a_context_update_reaches_the_next_request_without_opening_a_turn() -> None:
    clock = SimClock()
    agent = Agent()
    llm = ScriptedLlm(clock, [[Speak("Welcome back.")]])
    scenario = ScenarioBuilder().pause(1.5).say("hello there").pause(3.0).build()
    result = await simulate(clock, scenario, llm, agent=agent.input,
                            commands=((0.5, Note("The caller is a gold member.")),))
    assert len(llm.requests) == 1 and result.report.turns == 1
    notes = [m.text for m in llm.requests[0].messages if isinstance(m, SystemMessage)]
    assert "The caller is a gold member." in notes


def _two_tools(clock: SimClock) -> tuple[Counter, Counter, object]:
    lookup, book = Counter(clock), Counter(clock)
    tools = registry(lookup=(ToolSpec(name="lookup", description="Look up.", parameters=OBJ), lookup),
                     book=(ToolSpec(name="book", description="Book.", parameters=OBJ), book))
    return lookup, book, tools


async def test_tools_set_narrows_the_offered_tools_and_a_call_to_another_is_answered_unknown_tool() -> None:
    clock = SimClock()
    agent = Agent()
    lookup, book, tools = _two_tools(clock)
    llm = ScriptedLlm(clock, [[Call(name="book", arguments={"day": "monday"})], [Speak("I cannot book that.")]])
    scenario = ScenarioBuilder().pause(1.0).say("book me for monday").pause(3.0).build()
    result = await simulate(clock, scenario, llm, agent=agent.input, tools=tools,  # type: ignore[arg-type]
                            commands=((0.3, OfferTools(("lookup",))),))
    assert [spec.name for spec in llm.requests[0].tools] == ["lookup"]
    answers = [m for m in result.report.context.messages if isinstance(m, ToolMessage)]
    assert book.calls == [] and answers[0].is_error and "unknown_tool" in answers[0].content
    assert lookup.calls == [] and agent.refused == []


async def test_tools_set_naming_a_tool_the_call_lacks_is_refused_and_changes_nothing() -> None:
    clock = SimClock()
    agent = Agent()
    _, _, tools = _two_tools(clock)
    llm = ScriptedLlm(clock, [[Speak("Sure.")]])
    scenario = ScenarioBuilder().pause(1.0).say("hello").pause(2.0).build()
    await simulate(clock, scenario, llm, agent=agent.input, tools=tools,  # type: ignore[arg-type]
                   commands=((0.3, OfferTools(("lookup", "refund"))),))
    assert agent.refused == [("tools.set", Refusal.UNKNOWN_TOOL)]
    assert [spec.name for spec in llm.requests[0].tools] == ["book", "lookup"]


async def test_an_end_with_a_farewell_speaks_it_then_ends_the_call_once_it_has_played() -> None:
    clock = SimClock()
    agent = Agent()
    carrier = Recording(clock)
    llm = ScriptedLlm(clock, [])
    scenario = ScenarioBuilder().pause(8.0).build()
    result = await simulate(clock, scenario, llm, agent=agent.input, phone=PhonePlan(carrier),
                            commands=((0.5, BotLine("Thanks for calling, goodbye!", farewell=True)),))
    assert result.report.stop_reason is StopReason.REQUESTED
    assert said(result) == ["Thanks for calling, goodbye!"]
    last_audio = max(at for at, _ in result.audio_at())
    assert [what for what, _ in carrier.requests] == ["hang_up"] and carrier.requests[0][1] >= last_audio


async def test_a_barge_in_on_the_farewell_calls_the_end_off_and_the_agent_is_told() -> None:
    clock = SimClock()
    agent = Agent()
    carrier = Recording(clock)
    llm = ScriptedLlm(clock, [[Speak("Of course.")]])
    scenario = ScenarioBuilder().pause(2.0).say("wait one more thing please").pause(3.0).build()
    result = await simulate(clock, scenario, llm, config=barge_in(), agent=agent.input, phone=PhonePlan(carrier),
                            commands=((0.3, BotLine(LONG, farewell=True)),))
    assert result.report.stop_reason is StopReason.PEER_HANGUP and carrier.requests == []
    assert agent.refused == [("end", Refusal.CALLED_OFF)]


async def test_a_transfer_goes_through_the_carrier_and_without_one_it_is_refused() -> None:
    clock = SimClock()
    agent = Agent()
    carrier = Recording(clock)
    scenario = ScenarioBuilder().pause(1.0).build()
    await simulate(clock, scenario, ScriptedLlm(clock, []), agent=agent.input, phone=PhonePlan(carrier),
                   commands=((0.3, Transfer("+14155550100")),))
    assert [what for what, _ in carrier.requests] == ["transfer +14155550100"] and agent.refused == []
    plain = Agent()
    await simulate(clock, scenario, ScriptedLlm(clock, []), agent=plain.input,
                   commands=((0.3, Transfer("+14155550100")), (0.4, BotLine("Bye.", farewell=True))))
    assert plain.refused == [("transfer", Refusal.NO_CARRIER), ("end", Refusal.NO_CARRIER)]


async def test_commands_left_when_the_call_ends_are_refused_call_ended() -> None:
    agent = Agent()
    agent.input.put(Note("late"))
    agent.input.close()
    agent.input.put(BotLine("later"))
    assert agent.refused == [("context.update", Refusal.CALL_ENDED), ("say", Refusal.CALL_ENDED)]


def test_a_full_command_queue_refuses_busy() -> None:
    refused: list[Refusal] = []
    agent = AgentInput(lambda _c, why, _m: refused.append(why), capacity=2)
    for n in range(3):
        agent.put(Note(str(n)))
    assert refused == [Refusal.BUSY]


async def test_lines_held_while_the_caller_speaks_past_eight_are_refused_busy_and_the_rest_call_ended() -> None:
    clock = SimClock()
    agent = Agent()
    words = " ".join(["and then I said something more about my order"] * 4)
    scenario = ScenarioBuilder().pause(0.2).say(words, duration=6.0).build()
    result = await simulate(clock, scenario, ScriptedLlm(clock, []), agent=agent.input, linger=0.1,
                            commands=tuple((1.0 + n * 0.1, BotLine(f"Line {n}.")) for n in range(9)))
    assert agent.refused == [("say", Refusal.BUSY)] + [("say", Refusal.CALL_ENDED)] * 8
    assert said(result) == []  # never over the caller


async def test_a_say_overtaken_by_an_interrupting_say_before_it_is_spoken_is_refused_overtaken() -> None:
    clock = SimClock()
    agent = Agent()
    scenario = ScenarioBuilder().pause(4.0).build()
    result = await simulate(clock, scenario, ScriptedLlm(clock, []), agent=agent.input,
                            commands=((1.0, BotLine("First line.", interrupt=True)),
                                      (1.0, BotLine("Second line.", interrupt=True))))
    assert said(result) == ["Second line."]
    assert agent.refused == [("say", Refusal.OVERTAKEN)]  # the agent learns the first line's fate


def test_an_end_without_a_farewell_waits_for_the_bot_to_fall_silent_and_the_tap_hears_every_command() -> None:
    agent = Agent()
    tapped: list[AgentCommand] = []
    agent.input.tap = tapped.append
    agent.input.listen(BotText(epoch=1, at=0.0, round=0, text="Hello"))
    agent.input.put(Note("n"))
    agent.input.put(EndWhenSilent())
    assert not agent.input.ended.is_set()  # the bot speaks: the end waits
    agent.input.listen(BotDone(epoch=1, at=0.5))
    assert agent.input.ended.is_set()
    assert tapped == [Note("n"), EndWhenSilent()]
    silent = Agent()
    silent.input.put(EndWhenSilent())
    assert silent.input.ended.is_set()  # nothing spoke: at once
