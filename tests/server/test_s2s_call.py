"""Speech-to-speech agents: the ``[s2s]`` section, ``brisvox.Agent(s2s=...)``, and a served call whose
model is a loopback OpenAI Realtime server speaking the documented events."""

from __future__ import annotations

import asyncio
import base64
import json
import math
import struct
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from brisvox import Agent, AgentError
from brisvox.__main__ import main
from brisvox.agent.guards import ThinkBudget
from brisvox.audio.wav import WavAudio
from brisvox.providers import BargeIn, GeminiLive, OpenAI, OpenAIRealtime, S2sPolicy, Stage
from brisvox.server.agent_file import AgentFileError, parse_agent_file
from brisvox.transport.websocket.client import ClientOptions, run
from tests.server._nodes import Node, free_port

S2S_AGENT = """
[agent]
name = "host"
prompt = "You take table bookings."
greeting = "Trattoria, hello!"

[s2s]
provider = "openai-realtime"
api_key_env = "TEST_REALTIME_KEY"
barge_in = "ours"
think_budget = 8.0
options = { model = "gpt-realtime", voice = "marin"{base_url} }
"""


def _file(base_url: str = "") -> str:
    return S2S_AGENT.replace("{base_url}", f', base_url = "{base_url}"' if base_url else "")


def test_an_s2s_section_names_the_model_and_its_policy() -> None:
    d = parse_agent_file(_file())
    assert d.s2s is not None and (d.s2s.stage, d.s2s.provider) == (Stage.S2S, "openai-realtime")
    assert dict(d.s2s.options) == {"model": "gpt-realtime", "voice": "marin"}
    assert d.s2s_policy == S2sPolicy(barge_in=BargeIn.OURS, think_budget=ThinkBudget(8.0))


def test_a_think_budget_of_zero_lets_the_model_wait_for_every_result() -> None:
    d = parse_agent_file(_file().replace("think_budget = 8.0", "think_budget = 0.0"))
    assert d.s2s_policy.think_budget is None


def test_the_cascade_sections_are_refused_beside_an_s2s_model_by_name() -> None:
    with pytest.raises(AgentFileError) as bad:
        parse_agent_file(_file() + '\n[llm]\nprovider = "scripted"\n\n[speculation]\nenabled = true\n')
    messages = [f"{p.key}: {p.message}" for p in bad.value.problems]
    assert any(m.startswith("llm: does not apply to a speech-to-speech agent") for m in messages), messages
    assert any(m.startswith("speculation: does not apply") for m in messages), messages


def test_the_telephony_section_is_refused_beside_an_s2s_model() -> None:
    with pytest.raises(AgentFileError) as bad:
        parse_agent_file(_file() + '\n[telephony]\ntransfer_to = ["+14155550100"]\n')
    messages = [f"{p.key}: {p.message}" for p in bad.value.problems]
    assert messages == ["telephony: does not apply to a speech-to-speech agent ([s2s]): the telephony tools act "
                        "in cascaded calls only; remove [telephony] or [s2s]"]


def test_an_s2s_model_needs_its_key_variable_and_known_options() -> None:
    with pytest.raises(AgentFileError) as bad:
        parse_agent_file('[agent]\nname = "a"\nprompt = "p"\n[s2s]\nprovider = "gemini-live"\n'
                         'options = { temperature = 0.5 }\n')
    problems = {p.key: p.message for p in bad.value.problems}
    assert "needs a key" in problems["s2s.provider"]
    assert problems["s2s.options.temperature"].startswith("unknown option for s2s provider 'gemini-live'")


def test_an_agent_in_python_equals_the_same_agent_from_a_file(tmp_path: Path) -> None:
    f = tmp_path / "host.toml"
    f.write_text(_file())
    built = Agent(name="host", prompt="You take table bookings.", greeting="Trattoria, hello!",
                  s2s=OpenAIRealtime("gpt-realtime", voice="marin", api_key_env="TEST_REALTIME_KEY"),
                  s2s_policy=S2sPolicy(barge_in=BargeIn.OURS, think_budget=ThinkBudget(8.0)))
    assert built == Agent.from_file(f)
    assert built.definition().s2s == Agent.from_file(f).definition().s2s


def test_an_s2s_agent_with_a_cascade_stage_or_a_cascade_provider_is_refused() -> None:
    with pytest.raises(AgentError, match="give it no stt, llm or tts"):
        Agent(prompt="p", s2s=GeminiLive(), llm=OpenAI())
    with pytest.raises(AgentError, match="is not a speech-to-speech provider"):
        Agent(prompt="p", s2s=OpenAI())


def test_check_says_the_model_runs_the_agent(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    f = tmp_path / "host.toml"
    f.write_text(_file())
    assert main(["check", str(f)]) == 0
    assert "s2s openai-realtime (gpt-realtime), barge-in by ours" in capsys.readouterr().out


# --- a served call -------------------------------------------------------------------------------

RATE = 24_000


def _tone(seconds: float) -> bytes:
    n = int(RATE * seconds)
    return struct.pack(f"<{n}h", *(int(8000 * math.sin(2 * math.pi * 440 * i / RATE)) for i in range(n)))


class Realtime:
    """OpenAI Realtime's side: accepts the session, says the greeting when asked, then waits."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        self.authorization: str | None = None

    async def __call__(self, ws: ServerConnection) -> None:
        self.authorization = ws.request.headers.get("Authorization") if ws.request is not None else None
        await ws.send(json.dumps({"type": "session.created", "session": {}}))
        async for raw in ws:
            msg = json.loads(raw)
            if msg["type"] != "input_audio_buffer.append":
                self.received.append(msg)
            if msg["type"] == "session.update":
                await ws.send(json.dumps({"type": "session.updated", "session": {}}))
            elif msg["type"] == "response.create":
                audio = base64.b64encode(_tone(0.6)).decode()
                await ws.send(json.dumps({"type": "response.output_audio.delta", "item_id": "it1", "delta": audio}))
                await ws.send(json.dumps({"type": "response.output_audio_transcript.done", "item_id": "it1",
                                          "transcript": "Trattoria, hello!"}))
                await ws.send(json.dumps({"type": "response.done",
                                          "response": {"id": "r1", "status": "completed", "output": []}}))


@pytest.mark.realtime
def test_a_served_s2s_agent_greets_the_caller_through_its_model_and_hears_a_key_pressed(tmp_path: Path) -> None:
    port = free_port()
    agent = tmp_path / "host.toml"
    agent.write_text(_file(f"ws://127.0.0.1:{port}"))
    node = Node(agent, env={"TEST_REALTIME_KEY": "sk-test-0123456789"})
    vendor = Realtime()

    async def scenario() -> tuple[bool, bytes]:
        async with serve(vendor, "127.0.0.1", port):
            audio = WavAudio(pcm=b"\0\0" * 16000 * 2, sample_rate=16000)
            result = await run(ClientOptions(url=node.url.replace("http://", "ws://") + "/ws", audio=audio,
                                             dtmf="5", linger=0.5, connect_timeout=10.0))
            return result.ok, bytes(result.recording)

    try:
        ok, heard = asyncio.run(scenario())
    finally:
        node.kill()
    assert ok, node.log()
    assert "s2s openai-realtime (gpt-realtime)" in node.log()
    assert vendor.authorization == "Bearer sk-test-0123456789"
    kinds = [m["type"] for m in vendor.received]
    assert kinds[0] == "session.update" and "response.create" in kinds
    key = {"type": "conversation.item.create", "item": {"type": "message", "role": "user", "content": [
        {"type": "input_text", "text": "[the caller pressed the key 5]"}]}}
    assert key in vendor.received, kinds  # the key reached the model as the caller's message ...
    assert "response.create" in kinds[vendor.received.index(key):]  # ... and it was asked to answer
    samples = struct.unpack(f"<{len(heard) // 2}h", heard)
    assert max(abs(s) for s in samples) > 4000  # the model's greeting reached the caller


def test_an_agent_link_beside_an_s2s_model_is_refused_since_nothing_would_open_it() -> None:
    with pytest.raises(AgentFileError) as bad:
        parse_agent_file(_file() + '\n[agent_link]\nurl = "ws://127.0.0.1:9"\n')
    assert any(p.key == "agent_link" and "speech-to-speech" in p.message for p in bad.value.problems)
