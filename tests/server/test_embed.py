"""brisvox.asgi(agent): a call reaches the agent through the app mounted in a Starlette application."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest
import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

import brisvox
from brisvox.audio.wav import WavAudio
from brisvox.core.clock import SystemClock
from brisvox.engine import Providers
from brisvox.inference.vad import energy_vad
from brisvox.server.call_providers import CallProviders
from brisvox.server.embed import AgentApp
from brisvox.server.host import bind_listener
from brisvox.server.settings import Settings
from brisvox.sim import Call, MockStt, MockTts, Say, ScenarioBuilder, ScriptedLlm
from brisvox.transport.websocket.client import ClientOptions, run

runs: list[int] = []


@brisvox.tool.read_only
async def opening_hours(day: str) -> str:
    """When the restaurant is open on a day."""
    runs.append(1)
    return "18:00 to 23:00"


@pytest.mark.realtime
async def test_a_call_reaches_the_agent_through_the_app_mounted_under_a_prefix() -> None:
    clock = SystemClock()
    agent = brisvox.Agent(name="host", prompt="You answer questions.", greeting="Hello!", tools=[opening_hours])
    scenario = ScenarioBuilder().pause(0.4).say("when do you open on friday").pause(2.5).build()
    llm = ScriptedLlm(clock, [[Call(name="opening_hours", arguments={"day": "fri"})],
                              [Say("We open at six.")]])
    providers = CallProviders(Providers(stt=MockStt.for_scenario(clock, scenario), llm=llm, tts=MockTts(clock),
                                        vad=energy_vad), llm_label="scripted (test)", vad_label="energy")
    voice = AgentApp(agent, settings=Settings(port=0), clock=clock, providers=providers)

    async def home(request: object) -> PlainTextResponse:
        return PlainTextResponse("the host application")

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async with voice.lifespan():
            yield

    app = Starlette(routes=[Route("/", home), Mount("/voice", app=voice)], lifespan=lifespan)
    sock = bind_listener("127.0.0.1", 0)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, lifespan="on", ws="websockets-sansio", log_level="warning"))
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    try:
        while not server.started:
            assert not task.done()
            await asyncio.sleep(0.01)
        audio = WavAudio(b"".join(scenario.frames(0.02)), scenario.sample_rate)
        result = await run(ClientOptions(url=f"ws://127.0.0.1:{port}/voice/ws", audio=audio, linger=2.0), clock)
    finally:
        server.should_exit = True
        await asyncio.wait_for(task, 20)
        sock.close()
    assert result.ok, result.failure
    assert result.events[0]["kind"] == "call_info" and result.events[0]["agent"] == "host"
    assert [e["name"] for e in result.events if e["kind"] == "tool_call"] == ["opening_hours"]
    assert "We open at six." in "".join(e["text"] for e in result.events if e["kind"] == "bot_text")
    assert runs == [1]
