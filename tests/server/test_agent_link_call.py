"""Acceptance of the agent protocol: an SDK brain on 127.0.0.1 and an engine call run by ``brisvox serve``'s runner.

The call hears a scripted caller (mock STT) and answers with a scripted model; the brain's
tools are registered next to the agent file's, so the tool engine's rules apply to them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TypeVar

import pytest

import brisvox
from brisvox.agent.context import ToolMessage
from brisvox.core.clock import SystemClock
from brisvox.engine import Providers
from brisvox.inference.vad import energy_vad
from brisvox.sdk import Brain, protocol, serve
from brisvox.server.agent_file import parse_agent_file
from brisvox.server.call import EngineCall, engine_runner
from brisvox.server.call_providers import CallProviders
from brisvox.server.metrics import ServerMetrics
from brisvox.server.tools import ToolSet
from brisvox.sim import Call, MockStt, MockTts, Say, ScenarioBuilder, ScriptedLlm
from brisvox.sim.scenario import CallerScenario
from brisvox.transport import LoopbackTransport
from tests.sdk.test_brain import Day


class Shop(Brain):
    def __init__(self) -> None:
        super().__init__()
        self.booked: list[str] = []
        self.events: list[protocol.CallEvent] = []

    @brisvox.tool.read_only(timeout=2.0)
    async def opening_hours(self, args: Day) -> str:
        """When the shop is open on a day."""
        return f"{args.day}: nine to five"

    @brisvox.tool.side_effect(timeout=3.0)
    async def book(self, args: Day) -> str:
        """Book a visit (slow: the caller barges in while it runs)."""
        await asyncio.sleep(1.0)  # the agent process's own work, on its own time
        self.booked.append(args.day)
        return "booked"

    async def on_event(self, event: protocol.CallEvent) -> None:
        self.events.append(event)


BrainT = TypeVar("BrainT", bound=Brain)


async def no_text(_: str) -> None:
    return None


async def run_call(url: str, scenario: CallerScenario, llm: ScriptedLlm, clock: SystemClock,
                   until_done: bool = False, metrics: ServerMetrics | None = None) -> None:
    """One call of the caller ``scenario``; ``until_done``: the caller stops talking once the call has ended."""
    agent = parse_agent_file(f'[agent]\nname = "shop"\nprompt = "p"\n\n[turn]\npolicy = "fixed_silence"\n'
                             f'silence = 0.4\n\n[agent_link]\nurl = "{url}"\nconnect_timeout = 2\n')
    providers = CallProviders(
        providers=Providers(stt=MockStt.for_scenario(clock, scenario), llm=llm, tts=MockTts(clock), vad=energy_vad),
        llm_label="scripted (test)", vad_label="energy")
    runner = engine_runner(agent, ToolSet(), clock, providers, metrics)
    async with LoopbackTransport(clock) as transport:
        client = await transport.connect(metadata={"sample_rate": "16000"})
        call = asyncio.ensure_future(runner(EngineCall(await transport.accept(), no_text), asyncio.Event()))
        for pcm in scenario.frames(0.02):
            if until_done and call.done():
                break
            await client.send_audio(pcm)
            await clock.sleep(0.02)
        await client.hangup()
        await call


def kept_in(brains: list[BrainT], make: Callable[[], BrainT]) -> Callable[[], BrainT]:
    """A brain factory that keeps each brain it makes in ``brains``."""

    def factory() -> BrainT:
        brains.append(make())
        return brains[-1]

    return factory


async def call_brains(brain: Callable[[], Brain], scenario: CallerScenario, llm: ScriptedLlm,
                      clock: SystemClock) -> None:
    """One call of ``scenario`` with ``brain`` served on 127.0.0.1 for its link."""
    server = await serve(brain, "127.0.0.1", 0)
    try:
        await run_call(f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}", scenario, llm, clock)
    finally:
        server.close()
        await server.wait_closed()


def tool_results(llm: ScriptedLlm) -> list[str]:
    return [m.content for r in llm.requests for m in r.messages if isinstance(m, ToolMessage)]


@pytest.mark.realtime
@pytest.mark.slow
async def test_the_answer_comes_from_the_brains_tool_and_a_barged_in_side_effect_runs_and_is_reported_once() -> None:
    clock = SystemClock()
    brains: list[Shop] = []

    scenario = (ScenarioBuilder().pause(0.3).say("when do you open on monday").pause(2.0)
                .say("book me for monday").pause(0.9).say("wait a second").pause(1.5)
                .say("are you still there").pause(1.5).build())
    llm = ScriptedLlm(clock, [
        [Call(name="opening_hours", arguments={"day": "monday"})], [Say("Monday, nine to five.")],
        [Say("Booking that for you now, this will take a little while to say out loud."),
         Call(name="book", arguments={"day": "monday"})],
    ] + [[Say("Okay.")]] * 6)
    await call_brains(kept_in(brains, Shop), scenario, llm, clock)
    brain = brains[0]
    assert brain.session is not None and brain.session.agent == "shop"
    assert any("monday: nine to five" in content for content in tool_results(llm))  # the model read the brain's answer
    assert brain.booked == ["monday"]  # the side effect ran once
    settled = [(e.tool, e.outcome) for e in brain.events if e.kind == "tool_settled"]
    assert settled.count(("opening_hours", "ok")) == 1
    # Cut by the barge-in while it ran, it kept running; its result reached the model once, as a late note.
    assert [s for s in settled if s[0] == "book"] == [("book", "interrupted"), ("book", "late_result")]
    last = llm.requests[-1].messages
    assert sum("booked" in (m.content if isinstance(m, ToolMessage) else m.text) for m in last) == 1
    assert [e.kind for e in brain.events][-1] == "call_ended"


@pytest.mark.realtime
@pytest.mark.slow
async def test_an_agent_killed_mid_call_leaves_the_call_talking_under_the_agent_file() -> None:
    clock = SystemClock()
    metrics = ServerMetrics()
    scenario = (ScenarioBuilder().pause(0.3).say("when do you open on monday").pause(2.0)
                .say("and on tuesday").pause(2.5).build())
    llm = ScriptedLlm(clock, [
        [Call(name="opening_hours", arguments={"day": "monday"})], [Say("Monday, nine to five.")],
        [Call(name="opening_hours", arguments={"day": "tuesday"})], [Say("I cannot look that up right now.")],
    ])
    answered = asyncio.Event()

    class Once(Shop):
        async def on_event(self, event: protocol.CallEvent) -> None:
            if event.kind == "tool_settled":
                answered.set()

    server = await serve(Once, "127.0.0.1", 0)

    async def killer() -> None:
        await answered.wait()
        server.close()  # the agent process goes away after its first answer: its connections close
        await server.wait_closed()

    killing = asyncio.ensure_future(killer())
    try:
        await run_call(f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}", scenario, llm, clock,
                       metrics=metrics)
    finally:
        killing.cancel()
        await asyncio.gather(killing, return_exceptions=True)
    results = [m.content for m in llm.requests[-1].messages if isinstance(m, ToolMessage)]
    assert "monday: nine to five" in results[0]
    assert len(results) == 2 and "unavailable" in results[1]  # answered tool_failed, the call went on
    assert len(llm.requests) == 4  # and the model was asked again after the failure
    assert 'brisvox_agent_link_failures_total{kind="lost"} 1.0' in metrics.render().decode()


@pytest.mark.realtime
@pytest.mark.slow
async def test_the_agents_end_stops_the_call_once_its_answer_has_played() -> None:
    clock = SystemClock()

    class Closer(Shop):
        async def on_event(self, event: protocol.CallEvent) -> None:
            await super().on_event(event)
            if event.kind == "bot_done":
                await self.end()

    brains: list[Closer] = []

    def factory() -> Closer:
        brains.append(Closer())
        return brains[-1]

    scenario = ScenarioBuilder().pause(0.3).say("when do you open on monday").pause(8.0).build()
    llm = ScriptedLlm(clock, [[Call(name="opening_hours", arguments={"day": "monday"})],
                              [Say("Monday, nine to five. Goodbye.")]])
    server = await serve(factory, "127.0.0.1", 0)
    try:
        started = clock.now()
        await run_call(f"ws://127.0.0.1:{server.sockets[0].getsockname()[1]}", scenario, llm, clock,
                       until_done=True)
        took = clock.now() - started
    finally:
        server.close()
        await server.wait_closed()
    assert took < scenario.duration - 2.0  # ended by the agent, not by the caller's hang-up
    kinds = [e.kind for e in brains[0].events]
    assert kinds.index("bot_done") < kinds.index("call_ended")


def test_the_agent_file_sets_the_links_reopen_attempts_within_their_range() -> None:
    from brisvox.server.agent_file import AgentFileError

    base = '[agent]\nname = "shop"\nprompt = "p"\n\n[agent_link]\nurl = "ws://127.0.0.1:9"\n'
    link = parse_agent_file(base + "reopen_attempts = 12\n").agent_link
    assert link is not None and link.reopen_attempts == 12
    default = parse_agent_file(base).agent_link
    assert default is not None and default.reopen_attempts == 5
    with pytest.raises(AgentFileError) as bad:
        parse_agent_file(base + "reopen_attempts = 101\n")
    assert any("reopen_attempts" in p.key for p in bad.value.problems)


@pytest.mark.realtime
@pytest.mark.slow
async def test_a_brains_say_line_is_spoken_in_the_call_and_the_model_reads_it_as_the_bots_words() -> None:
    from brisvox.agent.context import AssistantMessage

    clock = SystemClock()

    class Teller(Shop):
        async def on_event(self, event: protocol.CallEvent) -> None:
            await super().on_event(event)
            if event.kind == "bot_done" and event.turn == 0:
                await self.say_line("Also, we are closed on public holidays.")

    brains: list[Teller] = []

    scenario = (ScenarioBuilder().pause(0.3).say("when do you open on monday").pause(4.0)
                .say("thanks a lot").pause(2.0).build())
    llm = ScriptedLlm(clock, [[Say("Nine to five.")], [Say("You are welcome.")]])
    await call_brains(kept_in(brains, Teller), scenario, llm, clock)
    said = [m.text for m in llm.requests[-1].messages if isinstance(m, AssistantMessage)]
    assert said == ["Nine to five.", "Also, we are closed on public holidays."]
    done = [e.turn for e in brains[0].events if e.kind == "bot_done"]
    assert done[:2] == [0, 1]  # the line was a turn of its own, played out before the caller's next
