"""Pipecat's own JavaScript client in headless Chromium against the server on 127.0.0.1.

The page (tests/transport/rtvi/js/page/app.js, bundled here with esbuild) is served by the
same server, so it is a same-origin page to the access guard.  Chromium's fake microphone
plays a WAV of the caller (silence, "a table for four", silence); the client uses its
WavMediaManager (the default one loads a script from the internet).  One call: the client
gets bot-ready, the caller's words cut the (long) greeting short (a barge-in: the bot stops
at once, the model's context keeps only the part sent before the cut), the user's transcript
and the bot's text arrive as RTVI events, the bot's audio arrives non-silent at the player, a
UI action (a tool's sheet) reaches the page, and the page's app event (its answer) reaches the
model's context without a turn.
"""

from __future__ import annotations

import asyncio
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Route

from brisvox.agent.context import AssistantMessage, SystemMessage
from brisvox.audio import read_wav, write_wav
from brisvox.core.clock import SystemClock
from brisvox.core.frames import WordTiming
from brisvox.server.tools import ToolSet
from brisvox.sim import Call, MockStt, MockSttConfig, MockTtsConfig, Say, ScriptedLlm
from brisvox.sim.scenario import SpokenUtterance
from brisvox.transport.rtvi import UiContract
from tests.server.test_rtvi_endpoint import AGENT, ConfirmAnswered, OpenConfirm, confirm_on_screen, serving

JS_DIR = Path(__file__).resolve().parents[1] / "transport" / "rtvi" / "js"
CHROMIUM = "/usr/bin/chromium"


def _tools_or_skip() -> tuple[str, Path]:
    chromium = shutil.which("chromium") or (CHROMIUM if Path(CHROMIUM).exists() else None)
    if chromium is None:
        pytest.skip("chromium is not installed (Debian: apt-get install chromium; `make test` installs it)")
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed: the page cannot be bundled nor Chromium driven (install Node 20)")
    esbuild = JS_DIR / "node_modules" / ".bin" / "esbuild"
    if not esbuild.exists() or not (JS_DIR / "node_modules" / "playwright-core").is_dir():
        pytest.skip(f"the npm packages are not installed: `npm ci` in {JS_DIR} (`make deps-test` does it)")
    return chromium, esbuild


def _bundle(esbuild: Path, tmp_path: Path) -> bytes:
    """The page's script: app.js and Pipecat's client bundled by esbuild."""
    bundle = tmp_path / "app.js"
    subprocess.run([str(esbuild), str(JS_DIR / "page" / "app.js"), "--bundle", "--format=iife", "--log-level=error",
                    f"--outfile={bundle}"], check=True, cwd=JS_DIR, timeout=120)
    return bundle.read_bytes()


def _microphone(tmp_path: Path, clock: SystemClock) -> tuple[Path, MockStt]:
    """The caller's WAV: espeak-ng saying the words between silences (Chromium's noise
    suppression eats the simulator's tone bursts), so the server's VAD hears a real turn.
    The STT is scripted: its words are heard within the first 0.6 s of audio it is sent (how
    much audio reaches the server before the speech depends on when Chromium's fake device
    starts), and the VAD's end of the speech finalizes them."""
    speech = tmp_path / "speech.wav"
    subprocess.run(["espeak-ng", "-w", str(speech), WORDS], check=True, timeout=30)
    voice = read_wav(speech)
    silence = bytes(2 * int(voice.sample_rate * 1.5))
    wav = tmp_path / "mic.wav"
    write_wav(wav, silence + voice.pcm + silence * 4, voice.sample_rate)
    words = WORDS.split()
    timings = tuple(WordTiming(word=w, start=0.05 + 0.15 * i, end=0.05 + 0.15 * (i + 1)) for i, w in enumerate(words))
    utterance = SpokenUtterance(text=WORDS, start=0.05, end=timings[-1].end, words=timings)
    return wav, MockStt(clock, MockSttConfig(utterances=(utterance,)))


WORDS = "a table for four"
GREETING = "Hello there. Thank you for calling the restaurant, we are always glad to hear from you."
GREETING_SAMPLES = int(len(GREETING) / MockTtsConfig().chars_per_second * 24000)  # the mock TTS's speed, 24 kHz


@pytest.mark.realtime
@pytest.mark.slow
async def test_pipecats_client_in_chromium_hears_the_bot_sees_its_words_and_answers_a_sheet(tmp_path: Path) -> None:
    chromium, esbuild = _tools_or_skip()
    if shutil.which("espeak-ng") is None:
        pytest.skip("espeak-ng is not installed (Debian: apt-get install espeak-ng; `make test` installs it)")
    script = _bundle(esbuild, tmp_path)

    async def page(request: Request) -> Response:
        return HTMLResponse('<!doctype html><meta charset="utf-8"><title>rtvi</title><script src="/app.js"></script>')

    async def app_js(request: Request) -> Response:
        return Response(script, media_type="text/javascript")

    clock = SystemClock()
    wav, stt = _microphone(tmp_path, clock)
    llm = ScriptedLlm(clock, [[Call(name="confirm_on_screen", arguments={"summary": "four"})],
                              [Say("It's on your screen.")], [Say("You are welcome.")]])
    tools = ToolSet()
    tools.include(confirm_on_screen)
    agent = AGENT.replace('prompt = "p"', 'prompt = "p"\ntools = ["confirm_on_screen"]').replace("Hello there.", GREETING)
    ui = UiContract(actions=(OpenConfirm,), events=(ConfirmAnswered,))
    routes = (Route("/page", page), Route("/app.js", app_js))
    async with serving(stt=stt, llm=llm, agent=agent, tools=tools, ui=ui,
                       routes=routes) as url:
        page_url = url.replace("ws://", "http://").replace("/rtvi", "/page")
        proc = await asyncio.create_subprocess_exec(
            "node", str(JS_DIR / "browser_client.cjs"), page_url, str(wav), "9", chromium,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE, cwd=JS_DIR)
        out, err = await asyncio.wait_for(proc.communicate(), 90)
    result = json.loads(out.decode().strip().splitlines()[-1])
    assert proc.returncode == 0 and "fatal" not in result, (result, err.decode()[-2000:])
    events = result["events"]
    kinds = [e["event"] for e in events]
    assert "botReady" in kinds and "connected" in kinds, result
    assert next(e for e in events if e["event"] == "botReady")["data"]["version"] == "2.1.0"
    finals = [e["data"]["text"] for e in events if e["event"] == "userTranscript" and e["data"]["final"]]
    assert "a table for four" in " ".join(finals), result
    said = "".join(e["data"]["text"] for e in events if e["event"] == "botLlmText")
    assert GREETING in said and "It's on your screen." in said and "You are welcome." in said, result
    # the caller's words cut the greeting: the bot stopped at once, long before its audio ran out
    barge = next(e for e in events if e["event"] == "userStartedSpeaking")
    stopped = next(e for e in events if e["event"] == "botStoppedSpeaking")
    assert kinds.index("botStartedSpeaking") < kinds.index("userStartedSpeaking") < kinds.index("botStoppedSpeaking")
    assert stopped["at"] - barge["at"] < 500 and stopped["data"]["samples"] < GREETING_SAMPLES * 0.7, (barge, stopped)
    greeting = llm.requests[0].messages[2]
    assert isinstance(greeting, AssistantMessage) and len(greeting.text) < len(GREETING), greeting  # the heard part
    command = next(e["data"] for e in events if e["event"] == "uiCommand")
    assert command["command"] == "open_confirm" and command["payload"]["summary"] == "four"
    assert result["bot"]["peak"] > 1000 and result["bot"]["samples"] > 24000 // 2  # the bot's voice, not silence
    assert "botStartedSpeaking" in kinds and "error" not in kinds, result
    # the tap reached the model's context as a note, with the page's next message (send-text)
    last = llm.requests[-1].messages
    assert any(isinstance(m, SystemMessage) and "confirm_answered" in m.text and '"answer":"yes"' in m.text
               for m in last), last
    assert len(llm.requests) == 3  # the tool round, its answer, the typed "thanks": the tap asked nothing
