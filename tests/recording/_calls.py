"""Simulated calls through the server's session runners with ``[record]`` on (cascaded and speech-to-speech)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from pathlib import Path

import numpy as np

from brisvox.core.clock import Clock, SystemClock
from brisvox.core.tasks import TaskScope
from brisvox.engine import Providers
from brisvox.inference.vad import energy_vad
from brisvox.providers.s2s import (
    BargeIn,
    S2sAudio,
    S2sConfig,
    S2sEvent,
    S2sInteractionEnded,
    S2sInterrupted,
    S2sReady,
    S2sResponseDone,
    S2sSpeechStarted,
    S2sSpeechStopped,
    S2sToolCall,
    S2sTranscript,
    Speaker,
)
from brisvox.server.agent_file import AgentDefinition, load_agent_file
from brisvox.server.call import EngineCall, engine_runner
from brisvox.server.call_providers import CallProviders
from brisvox.server.metrics import ServerMetrics
from brisvox.server.s2s_call import S2sCallProviders, s2s_runner
from brisvox.server.tools import ToolSet
from brisvox.sim import Call, CallerScenario, MockStt, MockTts, Say, ScenarioBuilder, ScriptedLlm
from brisvox.transport import LoopbackTransport
from brisvox.transport.loopback import LoopbackClient
from tests.engine.s2s_harness import FakeS2s


def recordings(directory: Path) -> list[Path]:
    return sorted(directory.glob("*.jsonl.gz"))


def lookup_tools() -> ToolSet:
    tools = ToolSet()

    @tools.read_only
    async def lookup(item: str) -> str:
        "Look an item up."
        return f"{item}: in stock"

    return tools


def recording_agent(directory: Path, *, keep: int = 10, silence: float = 0.8, record: bool = True) -> AgentDefinition:
    text = ('[agent]\nname = "shop"\nprompt = "p"\ntools = ["lookup"]\n\n'
            f'[turn]\npolicy = "fixed_silence"\nsilence = {silence}\n\n'
            f'[record]\nenabled = {str(record).lower()}\ndir = "{directory}"\nkeep = {keep}\n')
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "agent.toml").write_text(text)
    return load_agent_file(directory / "agent.toml", available_tools={"lookup"})


Act = Callable[[LoopbackClient], Awaitable[None]]


async def through(runner: Callable[[EngineCall, asyncio.Event], Awaitable[None]], play: Act) -> None:
    """One call through a server session runner over a loopback transport at 16 kHz: ``play``
    is the caller's side, then the caller hangs up."""
    clock = SystemClock()

    async def no_text(_: str) -> None:
        return None

    async with LoopbackTransport(clock) as transport:
        client = await transport.connect(metadata={"sample_rate": "16000"})
        call = asyncio.ensure_future(runner(EngineCall(await transport.accept(), no_text), asyncio.Event()))
        await play(client)
        await client.hangup()
        await call


async def scenario_call(agent: AgentDefinition, tools: ToolSet, scenario: CallerScenario, llm: ScriptedLlm,
                        metrics: ServerMetrics | None = None, at: Mapping[float, Act] | None = None) -> CallProviders:
    """The caller plays ``scenario`` (heard by the mock STT) to the cascaded runner, doing ``at[t]`` at ``t`` s."""
    clock = SystemClock()
    providers = CallProviders(
        providers=Providers(stt=MockStt.for_scenario(clock, scenario), llm=llm, tts=MockTts(clock), vad=energy_vad),
        llm_label="scripted (test)", vad_label="energy",
    )

    async def play(client: LoopbackClient) -> None:
        for i, pcm in enumerate(scenario.frames(0.02)):
            for t, act in (at or {}).items():
                if abs(i * 0.02 - t) < 0.01:
                    await act(client)
            await client.send_audio(pcm)
            await clock.sleep(0.02)

    await through(engine_runner(agent, tools, clock, providers, metrics), play)
    return providers


async def recorded_call(agent: AgentDefinition, tools: ToolSet, metrics: ServerMetrics | None = None) -> CallProviders:
    """Two turns (the first calls the tool) and a barge-in over the last reply."""
    scenario = (ScenarioBuilder().pause(0.4).say("look up the red shoes").pause(2.5).say("thanks")
                .pause(0.9).say("wait one more thing").pause(2.0).build())
    llm = ScriptedLlm(SystemClock(), [[Call(name="lookup", arguments={"item": "red shoes"})],
                                      [Say("The red shoes are in stock.")],
                                      [Say("You are welcome, is there anything else I can help you with today?")],
                                      [Say("Sure.")]])
    return await scenario_call(agent, tools, scenario, llm, metrics)


async def keyed_call(agent: AgentDefinition, tools: ToolSet) -> None:
    """A spoken turn, then a key (DTMF 5) and a typed turn that calls the tool, then the hang-up."""
    scenario = ScenarioBuilder().pause(0.4).say("hello there").pause(7.0).build()
    llm = ScriptedLlm(SystemClock(), [[Say("Hello, press a key or type.")], [Say("You pressed five.")],
                                      [Call(name="lookup", arguments={"item": "blue shoes"})],
                                      [Say("The blue shoes are in stock.")]])

    async def key(client: LoopbackClient) -> None:
        await client.send_dtmf("5")

    async def typed(client: LoopbackClient) -> None:
        await client.send_text("what about the blue shoes")

    await scenario_call(agent, tools, scenario, llm, at={3.0: key, 5.0: typed})


class TimedS2s(FakeS2s):
    """A speech-to-speech model that plays its script at fixed times after its session opens,
    whatever it hears (``sent``: what the call sent it, as FakeS2s keeps it)."""

    name = "timed-s2s"

    def __init__(self, clock: Clock, script: list[tuple[float, S2sEvent]]) -> None:
        super().__init__()
        self._clock, self._script = clock, script
        self._scope = TaskScope("timed-s2s")

    async def connect(self, config: S2sConfig) -> FakeS2s:
        session = await super().connect(config)
        self._scope.spawn(self._play(self._clock.now()), name="script")
        return session

    async def _play(self, start: float) -> None:
        for at, event in self._script:
            await self._clock.sleep_until(start + at)
            await self.emit(event)

    async def aclose(self) -> None:
        await super().aclose()
        await self._scope.aclose()


def _speech(seconds: float, item: str, at: float, words: str) -> list[tuple[float, S2sEvent]]:
    """The model speaking ``words`` for ``seconds`` from ``at`` (0.1 s chunks of a tone, 16 kHz)."""
    chunk = b"\x10\x27" * 1600
    return [(at, S2sTranscript(speaker=Speaker.MODEL, text=words, final=False, item_id=item))] + [
        (at + i * 0.1, S2sAudio(pcm=chunk, item_id=item)) for i in range(round(seconds / 0.1))]


def s2s_script() -> list[tuple[float, S2sEvent]]:
    """A turn that calls the tool, the answer, then a reply the caller cuts (the model's barge-in)."""
    return [
        (0.3, S2sReady()),
        (1.0, S2sSpeechStarted(item_id="u1")),
        (2.0, S2sSpeechStopped(item_id="u1")),
        (2.1, S2sTranscript(speaker=Speaker.CALLER, text="look up the red shoes", final=True, item_id="u1")),
        (2.3, S2sToolCall(call_id="c1", name="lookup", arguments={"item": "red shoes"})),
        (2.35, S2sResponseDone(response_id="r1")),
        *_speech(2.0, "a1", 2.6, "The red shoes are in stock."),
        (4.7, S2sResponseDone(response_id="r2")),
        (4.75, S2sInteractionEnded()),
        *_speech(3.0, "a2", 5.0, "Is there anything else I can help you with today?"),
        (6.0, S2sSpeechStarted(item_id="u2")),
        (6.0, S2sInterrupted()),
        (6.05, S2sResponseDone(interrupted=True, response_id="r3")),
        (7.0, S2sSpeechStopped(item_id="u2")),
        (7.1, S2sTranscript(speaker=Speaker.CALLER, text="no thanks", final=True, item_id="u2")),
    ]


S2S_KEY = {"TEST_S2S_KEY": "sk-test-0123456789"}


def s2s_agent(directory: Path, *, barge_in: str = "model") -> AgentDefinition:
    text = ('[agent]\nname = "shop"\nprompt = "p"\ntools = ["lookup"]\n\n'
            f'[s2s]\nprovider = "openai-realtime"\napi_key_env = "TEST_S2S_KEY"\nbarge_in = "{barge_in}"\n\n'
            f'[record]\nenabled = true\ndir = "{directory}"\n')
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "agent.toml").write_text(text)
    return load_agent_file(directory / "agent.toml", available_tools={"lookup"}, environ=S2S_KEY)


async def s2s_recorded_call(agent: AgentDefinition, tools: ToolSet, model: TimedS2s, seconds: float = 8.0,
                            speech: tuple[float, float] | None = None) -> None:
    """The caller sends 20 ms frames at the model's rate for ``seconds``, quiet but for a loud
    tone over ``speech`` (from, to), then hangs up; with ``barge_in = "ours"`` the energy VAD hears."""
    clock = SystemClock()
    ours = agent.s2s_policy.barge_in is BargeIn.OURS
    providers = S2sCallProviders(provider=model, label="timed s2s", rates=(16_000, 16_000),
                                 vad=energy_vad if ours else None, vad_label="energy" if ours else "the model's")
    tone = (np.sin(np.arange(320) * 2 * np.pi * 440 / 16_000) * 12_000).astype("<i2").tobytes()

    async def play(client: LoopbackClient) -> None:
        start = clock.now()
        for i in range(round(seconds / 0.02)):
            loud = speech is not None and speech[0] <= i * 0.02 < speech[1]
            await client.send_audio(tone if loud else b"\x01\x00" * 320)
            await clock.sleep_until(start + (i + 1) * 0.02)

    await through(s2s_runner(agent, tools, clock, providers), play)
