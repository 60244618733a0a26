"""A simulated call: the production stages over the loopback transport and the mocks.

Every simulated call ends with a leak check: no task it started may outlive it.
Scenarios that take latency run once per seed of :data:`SEEDS` (seed 0: instant mocks;
others: jittered LLM and TTS latency drawn from that seed, so each run replays exactly).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

from brisvox.agent.flows import Flow, FlowManager
from brisvox.agent.tools import FillerPolicy, ToolCallContext, ToolRegistry, ToolSpec
from brisvox.agent.turn import FixedSilence
from brisvox.core.clock import SimClock
from brisvox.core.errors import ChannelClosed
from brisvox.core.frames import ReplyMode
from brisvox.core.tasks import TaskScope, live_tasks, wait_for_task_baseline
from brisvox.engine import CallReport, EngineConfig, FillerClipStore, Providers, run_call
from brisvox.engine.agent_input import AgentCommand, AgentInput
from brisvox.engine.driver import TurnAnalyzer
from brisvox.engine.events import CallObserver
from brisvox.engine.phone import PhonePlan
from brisvox.inference.energy import EnergyScorer
from brisvox.inference.vad import VadParams, VoiceActivityDetector
from brisvox.providers.llm import LlmProvider
from brisvox.sim import INSTANT, CallerScenario, LatencyProfile, MockStt, MockTts, MockTtsConfig
from brisvox.transport import Heard, LoopbackTransport, TransportSession
from brisvox.transport.events import WireAudioOut, WireClear, WireMark

RATE = 16000

SEEDS = tuple(range(int(os.environ.get("BRISVOX_SCENARIO_SEEDS", "20"))))
"""The seeds each latency-taking scenario runs with (``BRISVOX_SCENARIO_SEEDS`` changes how many)."""


def llm_latency(seed: int) -> LatencyProfile:
    """The scripted model's latency for ``seed`` (0: instant)."""
    if seed == 0:
        return INSTANT
    return LatencyProfile(first_event=0.25, per_event=0.02, jitter=0.6, seed=seed)


def tts_config(seed: int, **options: Any) -> MockTtsConfig:
    """The mock TTS for ``seed`` (0: instant), with ``options`` of :class:`MockTtsConfig`."""
    config = MockTtsConfig(**options)
    if seed == 0:
        return config
    return dataclasses.replace(config, latency=LatencyProfile(connect=0.05, first_event=0.08, jitter=0.6, seed=seed))


@dataclass
class SimResult:
    report: CallReport
    heard: list[Heard] = field(default_factory=list)
    tts: MockTts | None = None  # the provider, for what it was asked to say

    def audio_at(self) -> list[tuple[float, int]]:
        """(time, epoch) of each audio frame the caller received."""
        return [(h.at, h.item.frame.epoch) for h in self.heard if isinstance(h.item, WireAudioOut)]

    def clears(self) -> list[tuple[float, int]]:
        return [(h.at, h.item.epoch) for h in self.heard if isinstance(h.item, WireClear)]


OBJ = {"type": "object", "properties": {"day": {"type": "string"}}, "required": ["day"]}


class Counter:
    """A tool that records its calls (arguments and start times) and takes ``seconds``."""

    def __init__(self, clock: SimClock, seconds: float = 0.0, answer: Any = None) -> None:
        self.clock, self.seconds, self.answer = clock, seconds, answer
        self.calls: list[dict[str, Any]] = []
        self.started: list[float] = []

    async def __call__(self, arguments: dict[str, Any], ctx: ToolCallContext) -> Any:
        self.calls.append(arguments)
        self.started.append(self.clock.now())
        await self.clock.sleep(self.seconds)
        return self.answer if self.answer is not None else {"ok": True, **arguments}


def registry(**tools: tuple[ToolSpec, Counter]) -> ToolRegistry:
    reg = ToolRegistry()
    for spec, tool in tools.values():
        reg.register(spec, tool)
    return reg


def energy_vad(rate: int) -> VoiceActivityDetector:
    return VoiceActivityDetector(EnergyScorer(rate), VadParams.energy())


async def simulate(
    clock: SimClock,
    scenario: CallerScenario,
    llm: LlmProvider,
    *,
    config: EngineConfig | None = None,
    tts: MockTtsConfig | None = None,
    linger: float = 3.0,
    end_of_turn: TurnAnalyzer | None = None,
    tools: ToolRegistry | None = None,
    interim_interval: float = 0.2,
    filler: FillerPolicy | None = None,
    dtmf: tuple[tuple[float, str], ...] = (),
    notes: tuple[tuple[float, str], ...] = (),
    typed: tuple[tuple[float, str, ReplyMode], ...] = (),
    stt: MockStt | None = None,
    observer: CallObserver | None = None,
    clips: FillerClipStore | None = None,
    flow: Flow | FlowManager | None = None,
    phone: PhonePlan | None = None,
    echo_marks: bool = True,
    agent: AgentInput | None = None,
    commands: tuple[tuple[float, AgentCommand], ...] = (),
) -> SimResult:
    """Play ``scenario`` as the caller in real (virtual) time, then hang up after ``linger`` s.
    The caller echoes every mark when it arrives (the loopback plays audio as it comes).
    ``commands``: (seconds from the start, command) put into ``agent`` as an agent's link would."""
    config = config or EngineConfig(turn=FixedSilence(silence=0.5))
    providers = Providers(
        stt=stt or MockStt.for_scenario(clock, scenario, interim_interval=interim_interval),
        llm=llm,
        tts=(speaker := MockTts(clock, tts or MockTtsConfig())),
        vad=energy_vad,
        end_of_turn=end_of_turn,
    )
    heard: list[Heard] = []
    baseline = live_tasks()
    async with LoopbackTransport(clock) as transport, TaskScope("sim") as scope:
        client = await transport.connect(metadata={"sample_rate": str(RATE)})
        link = await transport.accept()
        session = await TransportSession.open(clock, link)
        call = scope.spawn(run_call(session, config, providers, clock, tools=tools, filler=filler, observer=observer,
                                    clips=clips, flow=flow, phone=phone, agent=agent),
                           name="call")

        async def listen() -> None:
            with contextlib.suppress(ChannelClosed):  # the call ended: nothing more to hear
                while True:
                    got = await client.recv()
                    heard.append(got)
                    if isinstance(got.item, WireMark) and echo_marks:
                        await client.echo_mark(got.item.id)  # as a phone does once the audio before it played

        listener = scope.spawn(listen(), name="listener")
        start = clock.now()
        keys = sorted(dtmf)  # (seconds from the start, digit)
        facts = sorted(notes)  # (seconds from the start, a note for the context)
        texts = sorted(typed, key=lambda t: t[0])  # (seconds from the start, a typed message, its reply)
        orders = sorted(commands, key=lambda c: c[0])
        try:
            for i, pcm in enumerate(scenario.frames(0.02)):
                await clock.sleep_until(start + i * 0.02)
                while keys and keys[0][0] <= i * 0.02:
                    await client.send_dtmf(keys.pop(0)[1])
                while facts and facts[0][0] <= i * 0.02:
                    await client.send_note(facts.pop(0)[1])
                while texts and texts[0][0] <= i * 0.02:
                    _, text, reply = texts.pop(0)
                    await client.send_text(text, reply)
                while orders and orders[0][0] <= i * 0.02 and agent is not None:
                    agent.put(orders.pop(0)[1])
                await client.send_audio(pcm, RATE)
            await clock.sleep(linger)
            await client.hangup()
        except ChannelClosed:  # the engine hung up first (the report says so)
            pass
        report = await call
        await asyncio.sleep(0)
        listener.cancel()
    await wait_for_task_baseline(clock, baseline)  # the call left no task behind
    return SimResult(report, heard, speaker)


async def two_turns_with_a_tool_and_a_barge_in(clock: SimClock, observer: CallObserver | None) -> SimResult:
    """A call of two turns: a tool call then a long reply, which the second turn cuts (a barge-in)."""
    from brisvox.agent.interrupt import InterruptionPolicy
    from brisvox.agent.tools import ToolKind
    from brisvox.sim import Call, Say, ScenarioBuilder, ScriptedLlm

    async def lookup(arguments: dict[str, object], ctx: object) -> object:
        return {"free": True}

    reg = ToolRegistry()
    reg.register(ToolSpec(name="check_availability", description="Free tables.", parameters=OBJ,
                          kind=ToolKind.READ_ONLY), lookup)
    llm = ScriptedLlm(clock, [[Call(name="check_availability", arguments={"day": "friday"})],
                              [Say(" ".join(["word"] * 80))], [Say("Sure.")]])
    scenario = (ScenarioBuilder().pause(0.5).say("a table on friday").pause(2.5)
                .say("stop please stop now").pause(3.0).build())
    config = EngineConfig(turn=FixedSilence(silence=0.5), interruption=InterruptionPolicy.recommended())
    return await simulate(clock, scenario, llm, config=config, tools=reg, observer=observer)
