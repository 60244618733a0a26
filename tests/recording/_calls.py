"""A simulated call through the server's session runner with ``[record]`` on."""

from __future__ import annotations

import asyncio
from pathlib import Path

from brisvox.core.clock import SystemClock
from brisvox.engine import Providers
from brisvox.inference.vad import energy_vad
from brisvox.server.agent_file import AgentDefinition, load_agent_file
from brisvox.server.call import EngineCall, engine_runner
from brisvox.server.call_providers import CallProviders
from brisvox.server.metrics import ServerMetrics
from brisvox.server.tools import ToolSet
from brisvox.sim import Call, MockStt, MockTts, Say, ScenarioBuilder, ScriptedLlm
from brisvox.transport import LoopbackTransport


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


async def recorded_call(agent: AgentDefinition, tools: ToolSet, metrics: ServerMetrics | None = None) -> CallProviders:
    """Two turns (the first calls the tool) and a barge-in over the last reply."""
    clock = SystemClock()
    scenario = (ScenarioBuilder().pause(0.4).say("look up the red shoes").pause(2.5).say("thanks")
                .pause(0.9).say("wait one more thing").pause(2.0).build())
    llm = ScriptedLlm(clock, [[Call(name="lookup", arguments={"item": "red shoes"})],
                              [Say("The red shoes are in stock.")],
                              [Say("You are welcome, is there anything else I can help you with today?")],
                              [Say("Sure.")]])
    providers = CallProviders(
        providers=Providers(stt=MockStt.for_scenario(clock, scenario), llm=llm, tts=MockTts(clock), vad=energy_vad),
        llm_label="scripted (test)", vad_label="energy",
    )
    runner = engine_runner(agent, tools, clock, providers, metrics)

    async def no_text(_: str) -> None:
        return None

    async with LoopbackTransport(clock) as transport:
        client = await transport.connect(metadata={"sample_rate": "16000"})
        call = asyncio.ensure_future(runner(EngineCall(await transport.accept(), no_text), asyncio.Event()))
        for pcm in scenario.frames(0.02):
            await client.send_audio(pcm)
            await clock.sleep(0.02)
        await client.hangup()
        await call
    return providers
