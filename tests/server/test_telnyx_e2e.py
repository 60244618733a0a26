"""End to end: ``brisvox serve`` with the demo agent (scripted LLM, local models) answers a call
from the Telnyx simulator (tests/transport/telnyx/sim.py) whose media arrives shuffled and
duplicated, paced in real time, PCMU at 8 kHz."""

from __future__ import annotations

import asyncio
import json
import re
from pathlib import Path

from websockets.asyncio.client import connect

from brisvox.audio.g711 import ulaw_decode
from brisvox.transport.telephony import b64decode
from tests._speech import espeak_wav
from tests.server._demo_server import DemoServer, need_models
from tests.server.test_demo_e2e import GREETING_WAIT, REQUEST, voiced_seconds
from tests.transport.telnyx import sim


async def _call(url: str, pcm: bytes) -> tuple[list[tuple[float, bytes]], list[str]]:
    """Play ``pcm`` in 20 ms frames (shuffled, some twice) in real time, echo marks, hang up
    at its end; the audio heard (seconds since the call began) and the events received."""
    caller = sim.Caller(shuffle=True, seed=11)
    heard: list[tuple[float, bytes]] = []
    loop = asyncio.get_running_loop()
    begin = loop.time()
    events: list[str] = []
    async with connect(url, open_timeout=10, close_timeout=5) as ws:
        await ws.send(sim.connected())
        await ws.send(sim.start())

        async def reader() -> None:
            async for msg in ws:
                assert isinstance(msg, str)
                body = json.loads(msg)
                events.append(body["event"])
                assert "stream_id" not in body
                if body["event"] == "media":
                    heard.append((loop.time() - begin, ulaw_decode(b64decode(body["media"]["payload"]))))
                elif body["event"] == "mark":
                    await ws.send(sim.mark(body["mark"]["name"], caller.next_sequence()))

        task = asyncio.ensure_future(reader())
        frames = caller.audio(pcm)
        for i, frame in enumerate(frames):
            await ws.send(frame)
            await asyncio.sleep(max(0.0, begin + i * 0.02 - loop.time()))
        await ws.send(sim.stop(caller.next_sequence()))
        await asyncio.wait_for(task, 30)
    return heard, events


def test_a_telnyx_call_with_shuffled_frames_gets_a_spoken_answer(tmp_path: Path) -> None:
    need_models()
    request = espeak_wav(REQUEST, tmp_path, rate=8000, speed=150, lead=GREETING_WAIT, trail=8.0)
    server = DemoServer("scripted")
    try:
        url = server.url().replace("http://", "ws://") + "/telnyx"
        reply, events = asyncio.run(_call(url, request.pcm))
    finally:
        code = server.stop()
    log = server.log()
    greeting = voiced_seconds(b"".join(pcm for at, pcm in reply if at < GREETING_WAIT), 8000)
    answer = voiced_seconds(b"".join(pcm for at, pcm in reply if at > GREETING_WAIT + 1.0), 8000)
    assert greeting > 1.0 and answer > 1.0, (greeting, answer, events[:20], log)
    assert "mark" in events, log
    ended = re.search(rf"call {re.escape(sim.CALL_CONTROL_ID)} ended \([^)]*\): (\d+) turns", log)
    assert ended is not None and int(ended.group(1)) >= 1, log
    assert code == 0, log
