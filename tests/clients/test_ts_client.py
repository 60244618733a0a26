"""Acceptance of the TypeScript client: a Node agent (clients/ts/examples/shop.ts) attached to `brisvox serve`.

``brisvox serve`` runs an agent file whose ``[agent_link]`` points at the Node process, with the
mock STT and TTS and an OpenAI-compatible model served by the test on 127.0.0.1 (it calls the
agent's tools).  A caller speaks over the WebSocket protocol (espeak-ng speech): the model reads
the Node tool's answer, and a side effect the caller barges in on runs once and reaches the
model once.
"""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path
from typing import Any

import pytest

from brisvox.agent.context import ToolCall
from brisvox.agent.tools import CancelToken, ToolCallContext, ToolError
from brisvox.audio import WavAudio
from brisvox.core.clock import SystemClock
from brisvox.core.tasks import TaskScope
from brisvox.inference.models import SILERO_VAD, model_path
from brisvox.server.agent_link import AgentLink, AgentLinkConfig
from brisvox.transport.websocket.client import ClientOptions, run
from tests._process import Watched
from tests._speech import espeak_wav
from tests.clients._node import built, need_client
from tests.providers.cloud._fake_http import FakeHttpServer, RecordedRequest, Response
from tests.providers.cloud._llm_wire import Script, T, call, render_openai
from tests.test_loadtest import _Server

pytestmark = [pytest.mark.realtime, pytest.mark.slow]

AGENT = """\
[agent]
name = "shop"
prompt = "You answer the phone for a shop."

[vad]
min_silence = 0.192

[turn]
policy = "fixed_silence"
silence = 0.4

[window]
enabled = false

[filler]
enabled = false

[stt]
provider = "mock"
options = {{ final_latency = 0.1, text = "hello" }}

[llm]
provider = "vllm"
options = {{ base_url = "{llm}", model = "fake" }}

[tts]
provider = "mock"
options = {{ chars_per_second = 15 }}

[agent_link]
url = "{agent}"
connect_timeout = 2
"""

LONG_LINE = "Booking that for you now, this will take a little while to say out loud."


class FakeModel:
    """The model: asks for the opening hours, reads them back, then books while it speaks a long line."""

    def __init__(self) -> None:
        self.asked = 0
        self.bodies: list[dict[str, Any]] = []

    async def handle(self, request: RecordedRequest, response: Response) -> None:
        if request.path.endswith("/models"):  # the server warms its LLM with a listing
            await response.json_error(200, {"object": "list", "data": []})
            return
        body = request.json()
        self.bodies.append(body)
        last = body["messages"][-1]
        if last["role"] == "tool":
            script = Script([T("Monday, nine to five." if "nine to five" in last["content"] else "Okay.")])
        else:
            self.asked += 1
            if self.asked == 1:
                script = Script(call(0, "call_1", "opening_hours", {"day": "monday"}), tool_use=True)
            elif self.asked == 2:
                script = Script([T(LONG_LINE), *call(0, "call_2", "book", {"day": "monday"})], tool_use=True)
            else:
                script = Script([T("Okay.")])
        await response.start(200)
        for event, data in render_openai(script):
            await response.sse(data, event)


class NodeAgent(Watched):
    """``node examples/shop.js`` on a free port; it prints JSON lines (its port, bookings, events)."""

    def __init__(self, node: str, build: Path, port: int = 0) -> None:
        super().__init__([node, str(build / "examples" / "shop.js"), str(port)],
                         env={**os.environ, "BOOK_SECONDS": "2.5"}, marker='{"listening":')

    def facts(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.lines if line.startswith('{"')]

    def url(self) -> str:
        self.output_once_ready(30)
        return f"ws://127.0.0.1:{self.facts()[0]['listening']}"


def caller_speech(directory: Path) -> WavAudio:
    """A question, then a booking, cut into while the bot answers it, then a last question."""
    parts = [espeak_wav("when do you open on monday", directory, lead=0.5, trail=3.5),
             espeak_wav("book me for monday", directory, lead=0.0, trail=1.5),
             espeak_wav("wait a second", directory, lead=0.0, trail=4.0),
             espeak_wav("are you still there", directory, lead=0.0, trail=3.0)]
    return WavAudio(b"".join(part.pcm for part in parts), parts[0].sample_rate)


async def test_a_node_agents_tool_answers_the_model_and_its_barged_in_side_effect_runs_once(tmp_path: Path) -> None:
    node = need_client()
    build = built()
    if not model_path(SILERO_VAD).exists():
        pytest.skip("models not fetched (brisvox models fetch)")
    speech = caller_speech(tmp_path)
    model = FakeModel()
    agent = NodeAgent(node, build)
    try:
        async with FakeHttpServer(model.handle) as llm:
            path = tmp_path / "agent.toml"
            path.write_text(AGENT.format(llm=llm.base_url + "/v1", agent=agent.url()))
            server = _Server(path)
            try:
                port = await asyncio.to_thread(server.port)  # the loop serves the model meanwhile (warm-up)
                result = await run(ClientOptions(url=f"ws://127.0.0.1:{port}/ws", audio=speech, linger=2.0,
                                                 max_duration=60.0))
            finally:
                server.stop()
    finally:
        agent.stop(10)
    log = "".join(server.lines) + "".join(agent.lines)
    facts = agent.facts()
    assert result.failure is None, log
    # The model read the Node tool's answer (a tool message of the next request).
    tool_messages = [m["content"] for body in model.bodies for m in body["messages"] if m["role"] == "tool"]
    assert any("monday: nine to five" in content for content in tool_messages), (model.bodies, log)
    # The side effect ran once, and its result reached the model once.
    assert [line["booked"] for line in facts if "booked" in line] == ["monday"], log
    assert json.dumps(model.bodies[-1]["messages"]).count("booked") == 1, model.bodies[-1]
    book = [e["outcome"] for e in result.events if e["kind"] == "tool_result" and e["name"] == "book"]
    assert book == ["interrupted", "late_result"], (result.events, log)
    # The agent followed the call: the tools' outcomes, then the call's end.
    settled = [(line["tool"], line["outcome"]) for line in facts if line.get("event") == "tool_settled"]
    assert settled == [("opening_hours", "ok"), ("book", "interrupted"), ("book", "late_result")], log
    assert [line.get("event") for line in facts][-1] == "call_ended"


def _ctx(call_id: str) -> ToolCallContext:
    return ToolCallContext(session="c1", epoch=1, call=ToolCall(id=call_id, name="opening_hours", arguments={}),
                           cancel=CancelToken())


async def test_a_restarted_node_agent_gets_its_link_reopened_by_the_servers_side_and_answers_again() -> None:
    node = need_client()
    build = built()
    clock = SystemClock()
    agent = NodeAgent(node, build)
    restarted: NodeAgent | None = None
    try:
        url = agent.url()
        async with TaskScope("test") as scope:
            link = await AgentLink.open(AgentLinkConfig(url=url, connect_timeout=2.0, reopen_backoff=0.2), clock,
                                        call_id="c1", agent="shop", transport="loopback", parameters={}, scope=scope)
            assert link is not None and link.ready.resume  # the example's brain declares resume
            hours = link.tools_into(None).get("opening_hours")
            assert hours is not None
            assert await hours.tool({"day": "monday"}, _ctx("t1.0")) == "monday: nine to five"
            agent.stop(10)  # the agent process goes away mid-call ...
            restarted = NodeAgent(node, build, int(url.rsplit(":", 1)[1]))  # ... and comes back on its port
            for _ in range(300):
                if link.reopened and not link.lost:
                    break
                await clock.sleep(0.02)
            assert (link.reopened, link.lost) == (1, False), "".join(agent.lines + restarted.lines)
            assert await hours.tool({"day": "friday"}, _ctx("t2.0")) == "friday: nine to five"
            with pytest.raises(ToolError, match="closed on sundays"):
                await hours.tool({"day": "sunday"}, _ctx("t2.1"))
            await link.close()
    finally:
        agent.stop(10)
        if restarted is not None:
            restarted.stop(10)
    assert [f["event"] for f in restarted.facts() if "event" in f] == ["call_ended"]
