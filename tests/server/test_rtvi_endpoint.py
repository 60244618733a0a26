"""RTVI calls in the real server stack (uvicorn, in-process, 127.0.0.1) with mock providers:
a Python client speaking Pipecat's protobuf frames (our wire module) on ``/rtvi``."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
import os
import shutil
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Literal

import httpx
import numpy as np
import pytest
from pydantic import BaseModel
from starlette.routing import BaseRoute
from websockets.asyncio.client import ClientConnection, connect

import brisvox.tool
from brisvox.agent.context import SystemMessage, UserMessage
from brisvox.audio import write_wav
from brisvox.core.clock import SystemClock
from brisvox.core.frames import ReplyMode, TurnEndReason
from brisvox.engine import Providers
from brisvox.engine import events as ev
from brisvox.inference.vad import energy_vad
from brisvox.server.agent_file import parse_agent_file
from brisvox.server.call import EngineEndpoint, engine_runner
from brisvox.server.call_providers import CallProviders
from brisvox.server.host import ServerParts, serve
from brisvox.server.lifecycle import StopRequests
from brisvox.server.metrics import ServerMetrics
from brisvox.server.rtvi_endpoint import RTVI_PATH, RtviEndpoint, RtviEvents
from brisvox.server.settings import Settings
from brisvox.server.tools import ToolSet
from brisvox.sim import Call, MockStt, MockTts, Say, ScenarioBuilder, ScriptedLlm
from brisvox.transport.rtvi import (
    Action,
    AppEvent,
    InboundAudio,
    InboundMessage,
    UiContract,
    decode_frame,
    encode_audio,
    encode_message,
)
from brisvox.transport.websocket import ServerConfig

AGENT = ('[agent]\nname = "a"\nprompt = "p"\ngreeting = "Hello there."\n\n'
         '[turn]\npolicy = "fixed_silence"\nsilence = 0.5\n')


@contextlib.asynccontextmanager
async def serving(on_client_message: Any = None, stt: MockStt | None = None, llm: ScriptedLlm | None = None,
                  agent: str = AGENT, tools: ToolSet | None = None, ui: UiContract | None = None,
                  routes: tuple[BaseRoute, ...] = (), config: ServerConfig | None = None) -> AsyncIterator[str]:
    clock = SystemClock()
    providers = CallProviders(
        providers=Providers(stt=stt or MockStt(clock), llm=llm or ScriptedLlm(clock, [[Say("Sure.")]] * 4),
                            tts=MockTts(clock), vad=energy_vad),
        llm_label="scripted (test)", vad_label="energy",
    )
    endpoint = EngineEndpoint(clock, ServerConfig(path="/ws"))
    rtvi = RtviEndpoint(clock, config or ServerConfig(), on_client_message=on_client_message, ui=ui,
                        stats=endpoint.stats)  # as brisvox serve wires them: /metrics exports one set
    tools = tools or ToolSet()

    def stop_calls() -> None:
        endpoint.close()
        rtvi.close()

    definition = parse_agent_file(agent, available_tools=tools.names())
    parts = ServerParts(runner=engine_runner(definition, tools, clock, providers, ServerMetrics()),
                        call_endpoint=endpoint, call_routes=((RTVI_PATH, rtvi),), on_stop_calls=stop_calls,
                        extra_routes=routes, transport_stats=endpoint.stats)
    stops = StopRequests()
    ready: asyncio.Future[int] = asyncio.get_running_loop().create_future()
    server = asyncio.ensure_future(serve(Settings(port=0, max_calls=2), parts, clock=clock, stops=stops,
                                         out=io.StringIO(), on_ready=ready.set_result))
    try:
        port = await asyncio.wait_for(ready, 20)
        yield f"ws://127.0.0.1:{port}{RTVI_PATH}"
    finally:
        stops.request("test stop")
        await asyncio.wait_for(server, 30)


def rtvi(type_: str, data: Any = None, id_: str = "c1") -> bytes:
    msg: dict[str, Any] = {"type": type_, "id": id_}
    if data is not None:
        msg["data"] = data
    return encode_message(msg)


async def collect(ws: ClientConnection, until: str, seconds: float = 10.0) -> tuple[list[InboundMessage], bytes, int]:
    """Messages and bot audio until a message of type ``until`` (the client keeps sending silence)."""
    messages: list[InboundMessage] = []
    audio = bytearray()
    rate = 0

    async def read() -> None:
        nonlocal rate
        while True:
            data = await ws.recv()
            assert isinstance(data, bytes), "the server sent a text frame"
            frame = decode_frame(data)
            if isinstance(frame, InboundAudio):
                audio.extend(frame.pcm)
                rate = frame.sample_rate
            else:
                assert isinstance(frame, InboundMessage), f"a frame kind the JS client does not know: {frame!r}"
                messages.append(frame)
                if frame.type == until:
                    return

    async def mic() -> None:
        while True:
            await ws.send(encode_audio(bytes(640), 16000))
            await asyncio.sleep(0.02)

    talking = asyncio.ensure_future(mic())
    try:
        await asyncio.wait_for(read(), seconds)
    finally:
        talking.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await talking
    return messages, bytes(audio), rate


@pytest.mark.realtime
async def test_an_rtvi_client_gets_bot_ready_with_its_id_then_the_greetings_text_and_24khz_audio() -> None:
    async with serving() as url, connect(url, compression=None) as ws:
        with pytest.raises(TimeoutError):  # the bot waits for the client: no greeting before client-ready
            await asyncio.wait_for(ws.recv(), 1.0)
        await ws.send(rtvi("client-ready", {"version": "2.1.0", "about": {"library": "test"}}, "ready-1"))
        messages, audio, rate = await collect(ws, "bot-stopped-speaking")
        types = [m.type for m in messages]
        assert types[0] == "bot-ready"
        ready = messages[types.index("bot-ready")]
        assert ready.id == "ready-1" and ready.data["version"] == "2.1.0"
        texts = [m.data["text"] for m in messages if m.type == "bot-tts-text"]
        assert "".join(texts).strip() == "Hello there."
        assert types.index("bot-llm-started") < types.index("bot-llm-text") < types.index("bot-llm-stopped")
        assert types.index("bot-started-speaking") < types.index("bot-stopped-speaking")
        assert rate == 24000
        assert int(np.abs(np.frombuffer(audio, "<i2")).max()) > 1000  # the bot's voice, not silence
        await ws.send(rtvi("disconnect-bot", id_="bye"))
        await asyncio.wait_for(ws.wait_closed(), 10)
        assert ws.close_code == 1000


@pytest.mark.realtime
async def test_a_client_that_never_says_ready_is_closed_with_a_clear_error_and_counted_in_metrics() -> None:
    async with serving(config=ServerConfig(start_timeout=0.5)) as url:
        async with connect(url, compression=None) as ws:
            last = decode_frame(await asyncio.wait_for(ws.recv(), 10))
            await asyncio.wait_for(ws.wait_closed(), 10)
        assert isinstance(last, InboundMessage) and last.type == "error" and last.data["fatal"] is True
        assert "client-ready" in last.data["error"] and ws.close_code == 1008
        http = url.replace("ws://", "http://").replace(RTVI_PATH, "/metrics")
        async with httpx.AsyncClient(timeout=10) as client:
            metrics = (await client.get(http)).text
        assert 'brisvox_transport_events_total{event="refused_start"} 1.0' in metrics


@pytest.mark.realtime
async def test_unsupported_or_bad_requests_get_an_error_response_with_their_id_and_the_call_goes_on() -> None:
    async def answer(t: str, d: Any) -> Any:
        return {"echo": d, "t": t}

    async with serving(answer) as url, connect(url, compression=None) as ws:
        await ws.send(rtvi("no-such-type", id_="u1"))
        await ws.send(rtvi("dtmf", {"buttons": ["1", "x"]}, "d1"))
        await ws.send(rtvi("client-message", {"t": "ping", "d": {"n": 1}}, "m1"))
        messages, _, _ = await collect(ws, "server-response")
        errors = {m.id: m.data for m in messages if m.type == "error-response"}
        assert set(errors) >= {"u1", "d1"}
        assert "no-such-type" in errors["u1"]["error"] and "buttons" in errors["d1"]["error"]
        response = next(m for m in messages if m.type == "server-response")
        assert response.id == "m1" and response.data == {"t": "ping", "d": {"echo": {"n": 1}, "t": "ping"}}
        await ws.send(b"\xff\xff")  # not a Frame: an error message, the call goes on
        more, _, _ = await collect(ws, "error")
        assert more[-1].data == {"error": "the binary message is not a pipecat Frame",
                                 "message": "the binary message is not a pipecat Frame", "fatal": False}


@pytest.mark.realtime
async def test_send_text_is_a_typed_turn_the_bot_answers_out_loud() -> None:
    async with serving() as url, connect(url, compression=None) as ws:
        await collect(ws, "bot-stopped-speaking")  # the greeting
        await ws.send(rtvi("send-text", {"content": "a table for two", "options": {"audio_response": True}}, "s1"))
        messages, audio, _ = await collect(ws, "bot-stopped-speaking")
        types = [m.type for m in messages]
        assert "error-response" not in types
        assert [m.data["text"] for m in messages if m.type == "user-llm-text"] == ["a table for two"]
        assert types.index("user-llm-text") < types.index("bot-llm-text")
        assert "".join(m.data["text"] for m in messages if m.type == "bot-llm-text").strip() == "Sure."
        assert int(np.abs(np.frombuffer(audio, "<i2")).max()) > 1000


@pytest.mark.realtime
async def test_send_text_without_audio_response_is_answered_in_text_only_and_the_context_keeps_all_of_it() -> None:
    answer = "We have tables at six, seven and eight tonight, and on the terrace too."
    llm = ScriptedLlm(SystemClock(), [[Say(answer)], [Say("Seven it is.")]])
    async with serving(llm=llm) as url, connect(url, compression=None) as ws:
        await ws.send(rtvi("client-ready", {"version": "2.1.0"}, "r"))
        await collect(ws, "bot-stopped-speaking")  # the greeting
        await ws.send(rtvi("send-text", {"content": "what tables", "options": {"audio_response": False}}, "s1"))
        messages, audio, _ = await collect(ws, "bot-llm-stopped")
        types = [m.type for m in messages]
        assert "error-response" not in types and "bot-started-speaking" not in types
        assert not [t for t in types if t.startswith("bot-tts")] and audio == b""  # never synthesized
        assert "".join(m.data["text"] for m in messages if m.type == "bot-llm-text") == answer
        (output,) = [m for m in messages if m.type == "bot-output"]
        assert output.data == {"text": answer, "spoken": False, "will_be_spoken": False}
        assert types.index("bot-llm-started") < types.index("bot-output") < types.index("bot-llm-stopped")
        await ws.send(rtvi("send-text", {"content": "seven"}, "s2"))  # answered out loud
        _, spoken, _ = await collect(ws, "bot-stopped-speaking")
        assert int(np.abs(np.frombuffer(spoken, "<i2")).max()) > 1000
    second = [(type(m).__name__, getattr(m, "text", "")) for m in llm.requests[1].messages[1:]]
    assert second[-3:] == [("UserMessage", "what tables"), ("AssistantMessage", answer), ("UserMessage", "seven")]


class OpenConfirm(Action):
    nonce: str
    summary: str


class ConfirmAnswered(AppEvent):
    nonce: str
    answer: Literal["yes", "no"]


class ConfirmArgs(BaseModel):
    summary: str


@brisvox.tool.side_effect
async def confirm_on_screen(args: ConfirmArgs, ctx: brisvox.ToolContext) -> str:
    """Put the booking on the user's screen to confirm; returns at once."""
    ctx.dispatch(OpenConfirm(nonce="sheet-1", summary=args.summary))
    return "The sheet is up. Wait to be told what they chose."


@pytest.mark.realtime
async def test_a_tool_puts_a_sheet_on_the_screen_and_the_tap_reaches_the_models_context_without_a_turn() -> None:
    clock = SystemClock()
    llm = ScriptedLlm(clock, [[Call(name="confirm_on_screen", arguments={"summary": "Table for two at nine"})],
                              [Say("It's on your screen.")], [Say("Booked.")]])
    tools = ToolSet()
    tools.include(confirm_on_screen)
    agent = AGENT.replace('prompt = "p"', 'prompt = "p"\ntools = ["confirm_on_screen"]')
    ui = UiContract(actions=(OpenConfirm,), events=(ConfirmAnswered,))
    async with serving(llm=llm, agent=agent, tools=tools, ui=ui) as url, connect(url, compression=None) as ws:
        await ws.send(rtvi("client-ready", {"version": "2.1.0"}, "r"))
        await collect(ws, "bot-stopped-speaking")  # the greeting
        await ws.send(rtvi("send-text", {"content": "book the nine o'clock", "options": {}}, "s1"))
        messages, _, _ = await collect(ws, "bot-llm-stopped")
        command = next(m for m in messages if m.type == "ui-command")
        assert command.data == {"command": "open_confirm",
                                "payload": {"nonce": "sheet-1", "summary": "Table for two at nine"}}
        assert "".join(m.data["text"] for m in messages if m.type == "bot-llm-text").strip() == "It's on your screen."
        assert len(llm.requests) == 2  # the tool returned at once: nothing waited on the user
        # a tap on a sheet never opened changes nothing; a bad payload is refused with its id
        await ws.send(rtvi("ui-event", {"event": "confirm_answered", "payload": {"nonce": "other", "answer": "yes"}},
                           "u0"))
        await ws.send(rtvi("ui-event", {"event": "confirm_answered", "payload": {"nonce": "sheet-1"}}, "u1"))
        await ws.send(rtvi("ui-event", {"event": "confirm_answered", "payload": {"nonce": "sheet-1", "answer": "yes"}},
                           "u2"))
        await ws.send(rtvi("client-message", {"t": "confirm_answered", "d": {"nonce": "sheet-1", "answer": "no"}},
                           "m1"))
        quiet, _, _ = await collect(ws, "server-response")
        assert [(m.type, m.id) for m in quiet if m.type in ("error-response", "server-response")] == [
            ("error-response", "u1"), ("server-response", "m1")]
        assert "payload.answer: Field required" in next(m for m in quiet if m.type == "error-response").data["error"]
        assert next(m for m in quiet if m.type == "server-response").data == {
            "t": "confirm_answered", "d": {"accepted": False}}  # the sheet was closed by the first answer
        turn = {"user-llm-text", "bot-llm-started", "bot-llm-text", "bot-tts-text"}
        assert not [m.type for m in quiet if m.type in turn]  # the tap opened no turn and nothing was said
        assert len(llm.requests) == 2
        await ws.send(rtvi("send-text", {"content": "thanks", "options": {}}, "s2"))
        await collect(ws, "bot-stopped-speaking")
    notes = [m.text for m in llm.requests[2].messages if isinstance(m, SystemMessage) and "confirm_answered" in m.text]
    assert len(notes) == 1 and '"answer":"yes"' in notes[0] and "open_confirm" in notes[0]
    assert [m.text for m in llm.requests[2].messages if isinstance(m, UserMessage)][-1] == "thanks"


def test_the_engines_events_become_rtvi_messages_in_order() -> None:
    r = RtviEvents()
    got = [m["type"] for e in (
        ev.TurnStarted(epoch=1, at=0.0), ev.UserTranscript(epoch=1, at=0.1, text="hi", final=False),
        ev.UserTranscript(epoch=1, at=0.4, text="hi there", final=True),
        ev.TurnEnded(epoch=1, at=0.5, reason=TurnEndReason.SILENCE),
        ev.BotText(epoch=1, at=0.6, round=0, text="Sure."), ev.BotText(epoch=1, at=0.7, round=0, text=" Ok."),
        ev.BotDone(epoch=1, at=0.8), ev.BotDone(epoch=1, at=0.9),
    ) for m in r.render(e)]
    assert got == ["user-started-speaking", "user-transcription", "user-transcription", "user-stopped-speaking",
                   "bot-llm-started",
                   "bot-tts-started", "bot-llm-text", "bot-tts-text", "bot-llm-text", "bot-tts-text",
                   "bot-llm-stopped", "bot-tts-stopped"]



def test_a_turns_latencies_become_one_metrics_message_in_seconds_with_the_unmeasured_left_out() -> None:
    (message,) = RtviEvents().render(ev.TurnLatency(
        epoch=1, at=2.0, speech_end_to_audio=0.8, speech_end_to_turn_end=0.3, turn_end_to_audio=0.5,
        turn_end_to_first_token=None, turn_end_reason=TurnEndReason.SILENCE))
    assert message["type"] == "metrics"
    assert message["data"] == {"ttfb": [], "processing": [
        {"processor": "voice_to_voice", "value": 0.8}, {"processor": "turn_detection", "value": 0.3},
        {"processor": "turn_end_to_audio", "value": 0.5}]}


def test_a_text_only_reply_has_no_tts_messages_and_ends_with_one_bot_output_of_all_its_text() -> None:
    r = RtviEvents()
    text = ReplyMode.TEXT
    got = [m for e in (
        ev.BotText(epoch=2, at=0.6, round=0, text="Six", reply=text), ev.BotText(epoch=2, at=0.7, round=0, text=" or seven.",
                                                                              reply=text),
        ev.BotDone(epoch=2, at=0.8), ev.BotText(epoch=3, at=1.0, round=0, text="Ok."), ev.BotDone(epoch=3, at=1.1),
    ) for m in r.render(e)]
    assert [m["type"] for m in got] == ["bot-llm-started", "bot-llm-text", "bot-llm-text", "bot-output",
                                        "bot-llm-stopped", "bot-llm-started", "bot-tts-started", "bot-llm-text",
                                        "bot-tts-text", "bot-llm-stopped", "bot-tts-stopped"]
    assert got[3]["data"] == {"text": "Six or seven.", "spoken": False, "will_be_spoken": False}


JS_DIR = Path(__file__).resolve().parents[1] / "transport" / "rtvi" / "js"


def _node_client() -> list[str]:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: Pipecat's JavaScript client cannot run (install Node 20)")
    if not (JS_DIR / "node_modules" / "@pipecat-ai" / "client-js").is_dir():
        pytest.skip(f"the npm packages are not installed: `npm ci` in {JS_DIR} (`make deps-test` does it)")
    return [node, str(JS_DIR / "rtvi_client.cjs")]


class OrderArgs(BaseModel):
    order: str


@brisvox.tool.read_only
async def track_order(args: OrderArgs, ctx: brisvox.ToolContext) -> str:
    """Show the order's progress on the caller's page."""
    ctx.send_server_message({"order": args.order, "step": "cooking"})
    return "It is being cooked."


@pytest.mark.realtime
@pytest.mark.slow
async def test_pipecats_js_client_gets_bot_ready_the_users_transcript_the_bots_text_its_audio_and_a_server_message(
    tmp_path: Path,
) -> None:
    command = _node_client()
    clock = SystemClock()
    scenario = ScenarioBuilder().pause(1.0).say("a table for four").pause(3.0).build()
    wav = tmp_path / "mic.wav"
    write_wav(wav, b"".join(scenario.frames(0.02)), scenario.sample_rate)
    llm = ScriptedLlm(clock, [[Call(name="track_order", arguments={"order": "A7"})], [Say("Sure.")]])
    tools = ToolSet()
    tools.include(track_order)
    agent = AGENT.replace('prompt = "p"', 'prompt = "p"\ntools = ["track_order"]')
    async with serving(stt=MockStt.for_scenario(clock, scenario), llm=llm, tools=tools, agent=agent) as url:
        proc = await asyncio.create_subprocess_exec(*command, url, str(wav), "7", stdout=asyncio.subprocess.PIPE,
                                                    stderr=asyncio.subprocess.PIPE)
        out, err = await asyncio.wait_for(proc.communicate(), 40)
    lines = [json.loads(line) for line in out.decode().splitlines() if line.startswith("{")]
    assert proc.returncode == 0, err.decode()[-2000:]
    events = [x.get("event") for x in lines]
    assert "botReady" in events, lines
    ready = next(x for x in lines if x.get("event") == "botReady")
    assert ready["data"]["version"] == "2.1.0"
    finals = [x["data"]["text"] for x in lines if x.get("event") == "userTranscript" and x["data"]["final"]]
    assert "a table for four" in " ".join(finals)
    bot_text = "".join(x["data"]["text"] for x in lines if x.get("event") == "botLlmText")
    assert "Hello there." in bot_text and "Sure." in bot_text
    # the tool's server message reaches the client's onServerMessage (the agent declares no UI contract)
    assert [x["data"] for x in lines if x.get("event") == "serverMessage"] == [{"order": "A7", "step": "cooking"}]
    done = next(x for x in lines if x.get("done"))
    assert done.get("done") and done["botPeak"] > 1000 and done["botSamples"] > 24000 // 2
    assert "error" not in events, [x for x in lines if x.get("event") == "error"]


DENSITY_CLIENT = Path(__file__).resolve().parents[2] / "bench" / "pipecat_density_client.py"


@pytest.mark.realtime
@pytest.mark.slow
async def test_the_density_client_pipecat_is_measured_with_gets_a_normal_turn(tmp_path: Path) -> None:
    clock = SystemClock()
    # the client streams silence for about 2 s, then the speech (on a 160 ms boundary)
    scenario = ScenarioBuilder().pause(2.0).say("a table for four").pause(1.0).build()
    pcm = b"".join(scenario.frames(0.02))[2 * 16000 * 2:-16000 * 2]  # the speech alone: the client adds silence
    wav = tmp_path / "speech16.wav"
    write_wav(wav, pcm, 16000)
    out = tmp_path / "density.json"
    async with serving(stt=MockStt.for_scenario(clock, scenario)) as url:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(DENSITY_CLIENT), "-n", "1", "--turns", "1", "--stagger", "0", "--spread", "0",
            "--url", url, "--wav", str(wav), "--server-pid", str(os.getpid()), "--out", str(out),
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
        _, err = await asyncio.wait_for(proc.communicate(), 40)
    assert proc.returncode == 0, err.decode()[-2000:]
    result = json.loads(out.read_text())
    summary = result["summary"]
    assert summary["n_errors"] == 0, summary["errors"]
    assert summary["replies"] == 1
    turn = result["turns"][0]
    assert 0 < turn["v2v"] < 3.0 and turn["bot_audio_s"] > 0
