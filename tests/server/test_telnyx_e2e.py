"""End to end: ``brisvox serve`` with the demo agent (scripted LLM, local models) answers a call
from the Telnyx simulator (tests/transport/telnyx/sim.py) whose media arrives shuffled and
duplicated, paced in real time, PCMU at 8 kHz.  The simulated phone plays the bot's audio
behind a playout buffer and echoes each mark once the audio before it played; the caller talks
over the answer, and the call's log must show the context kept what the phone played, not
what brisvox sent."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from websockets.asyncio.client import ClientConnection, connect

from brisvox.audio.g711 import ulaw_decode
from brisvox.transport.telephony import b64decode
from tests._speech import espeak_wav
from tests.server._demo_server import DemoServer, need_models
from tests.server._phone_calls import ASK, ASK_TRAIL, BARGE_IN, Playout, assert_context_holds_what_was_played
from tests.server.test_demo_e2e import GREETING_WAIT, voiced_seconds
from tests.transport.telnyx import sim

BUFFER = 1.0
"""Seconds the phone holds the bot's audio before playing it: what brisvox must not count as heard.
Well over :data:`TOLERANCE`, so a context that kept what was sent instead fails."""
TOLERANCE = 0.35
"""Seconds brisvox's heard position may differ from the phone's: the lead it learns from an echo
includes the time the echo waited for its event loop (up to about 0.3 s here, on a loaded machine)."""


class _Phone:
    """The carrier's side of the call: what it received, what it played, the marks it echoed."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.caller = sim.Caller(shuffle=True, seed=11)
        self.loop = asyncio.get_running_loop()
        self.begin = self.loop.time()
        self.playout = Playout(buffer=BUFFER)
        self.pending: list[tuple[float, str]] = []  # (when its audio has played, mark name)
        self.heard: list[tuple[float, bytes]] = []  # the audio received, seconds since the call began
        self.events: list[str] = []
        self.echoed: list[str] = []

    async def read(self) -> None:
        async for msg in self.ws:
            assert isinstance(msg, str)
            body = json.loads(msg)
            self.events.append(body["event"])
            assert "stream_id" not in body
            now = self.loop.time()
            if body["event"] == "media":
                pcm = ulaw_decode(b64decode(body["media"]["payload"]))
                self.heard.append((now - self.begin, pcm))
                self.playout.audio(now, len(pcm) / 2 / 8000)
            elif body["event"] == "mark":
                self.pending.append((self.playout.mark_due(now), body["mark"]["name"]))
            elif body["event"] == "clear":
                self.playout.clear(now)
                self.pending.clear()  # flushed with the audio before them: never echoed

    async def echo(self) -> None:
        while True:
            while self.pending and self.pending[0][0] <= self.loop.time():
                _, name = self.pending.pop(0)
                self.echoed.append(name)
                await self.ws.send(sim.mark(name, self.caller.next_sequence()))
            await asyncio.sleep(0.01)


async def _call(url: str, pcm: bytes) -> _Phone:
    """Play ``pcm`` in 20 ms frames (shuffled, some twice) in real time, hang up at its end."""
    async with connect(url, open_timeout=10, close_timeout=5) as ws:
        phone = _Phone(ws)
        await ws.send(sim.connected())
        await ws.send(sim.start())
        reader = asyncio.ensure_future(phone.read())
        echo = asyncio.ensure_future(phone.echo())
        try:
            for i, frame in enumerate(phone.caller.audio(pcm)):
                await ws.send(frame)
                await asyncio.sleep(max(0.0, phone.begin + i * 0.02 - phone.loop.time()))
            await ws.send(sim.stop(phone.caller.next_sequence()))
            await asyncio.wait_for(reader, 30)
        finally:
            echo.cancel()
            reader.cancel()
            await asyncio.gather(echo, reader, return_exceptions=True)
    return phone


def test_a_telnyx_call_with_shuffled_frames_gets_a_spoken_answer_and_a_barge_in_keeps_what_the_phone_played(
        tmp_path: Path) -> None:
    need_models()
    request = espeak_wav(ASK, tmp_path, rate=8000, speed=150, lead=GREETING_WAIT, trail=ASK_TRAIL)
    barge = espeak_wav(BARGE_IN, tmp_path, rate=8000, speed=150, lead=0.0, trail=7.0)
    # The barge-in lands inside the reply only if the local STT answers within its usual time; on a
    # loaded machine it can come before the reply starts (no cut to see), so the call is placed at most twice.
    for attempt in (1, 2):
        server = DemoServer("scripted")
        try:
            url = server.url().replace("http://", "ws://") + "/telnyx"
            phone = asyncio.run(_call(url, request.pcm + barge.pcm))
            call = server.only_call()
        finally:
            code = server.stop()
        log = server.log()
        if "clear" in phone.events:
            break
        print(f"attempt {attempt}: no barge-in seen\n{log}")
    greeting = voiced_seconds(b"".join(pcm for at, pcm in phone.heard if at < GREETING_WAIT), 8000)
    answer = voiced_seconds(b"".join(pcm for at, pcm in phone.heard if at > GREETING_WAIT + 1.0), 8000)
    assert greeting > 1.0 and answer > 1.0, (greeting, answer, phone.events[:20], log)
    assert phone.echoed and "clear" in phone.events, (phone.events, log)
    ended = re.search(rf"call {re.escape(sim.CALL_CONTROL_ID)} ended \([^)]*\): (\d+) turns, (\d+) interrupts", log)
    assert ended is not None and int(ended.group(1)) >= 1 and int(ended.group(2)) >= 1, log
    # The phone still held up to BUFFER s of the answer at each clear: brisvox learnt that lead
    # from the mark echoes and took it off what it had sent, so the context keeps what was played.
    assert_context_holds_what_was_played(call, phone.playout, tolerance=TOLERANCE)
    assert code == 0, log
