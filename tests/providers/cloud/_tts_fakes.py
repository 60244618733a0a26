"""Loopback servers that speak Cartesia's and ElevenLabs' WebSocket TTS protocols.

Each word of text becomes 0.1 s of PCM16 audio (one chunk per word) at the requested
rate, with the vendor's own timestamp shape.  Knobs script the faults the tests need.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.server import ServerConnection

from ._fake_ws import Upgrade

WORD_SECONDS = 0.1


@dataclass
class Knobs:
    silent: bool = False  # never answer
    drop_on_text: int | None = None  # abort the socket at the n-th text message (1-based) of the first connection
    talk_after_cancel: bool = True  # keep sending audio for a cancelled context (the client must drop it)
    error_for: str | None = None  # answer text containing this with an error for its context
    received: list[list[dict[str, Any]]] = field(default_factory=list)  # messages per connection


def pcm(rate: int, seconds: float = WORD_SECONDS) -> str:
    return base64.b64encode(b"\x01\x00" * int(rate * seconds)).decode()


def cartesia_handler(knobs: Knobs):  # type: ignore[no-untyped-def]
    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        got: list[dict[str, Any]] = []
        knobs.received.append(got)
        offsets: dict[str, float] = {}
        texts = 0
        async for raw in ws:
            m = json.loads(raw)
            got.append(m)
            if knobs.silent:
                continue
            cid = m["context_id"]
            if m.get("cancel"):
                if knobs.talk_after_cancel:
                    await ws.send(json.dumps({"type": "chunk", "data": pcm(8000), "done": False, "context_id": cid,
                                              "status_code": 206, "step_time": 1}))
                continue
            rate = m["output_format"]["sample_rate"]
            if m["transcript"]:
                texts += 1
                if len(knobs.received) == 1 and knobs.drop_on_text == texts:
                    ws.transport.abort()
                    return
                if knobs.error_for and knobs.error_for in m["transcript"]:
                    await ws.send(json.dumps({"type": "error", "done": True, "context_id": cid, "status_code": 400,
                                              "title": "Invalid voice", "message": "voice not found",
                                              "error_code": "voice_not_found"}))
                    continue
                words = m["transcript"].split()
                t = offsets.get(cid, 0.0)
                starts = [t + i * WORD_SECONDS for i in range(len(words))]
                await ws.send(json.dumps({"type": "timestamps", "done": False, "status_code": 206, "context_id": cid,
                                          "word_timestamps": {"words": words, "start": starts,
                                                              "end": [s + WORD_SECONDS * 0.8 for s in starts]}}))
                for _ in words:
                    await ws.send(json.dumps({"type": "chunk", "data": pcm(rate), "done": False, "status_code": 206,
                                              "step_time": 2, "context_id": cid}))
                offsets[cid] = t + len(words) * WORD_SECONDS
            if not m["continue"]:
                await ws.send(json.dumps({"type": "done", "done": True, "status_code": 206, "context_id": cid}))

    return handler


def elevenlabs_handler(knobs: Knobs, rate: int):  # type: ignore[no-untyped-def]
    async def handler(ws: ServerConnection, up: Upgrade) -> None:
        got: list[dict[str, Any]] = []
        knobs.received.append(got)
        texts = 0
        async for raw in ws:
            m = json.loads(raw)
            got.append(m)
            if knobs.silent or m.get("close_socket"):
                if m.get("close_socket"):
                    await ws.close()
                    return
                continue
            cid = m.get("context_id")
            if m.get("close_context") and m.get("_cancelled"):
                continue
            if m.get("close_context"):
                await ws.send(json.dumps({"isFinal": True, "contextId": cid}))
                continue
            if m.get("flush"):
                continue
            text = m.get("text", "")
            if text.strip():
                texts += 1
                if len(knobs.received) == 1 and knobs.drop_on_text == texts:
                    ws.transport.abort()
                    return
                # One chunk per word; the word's characters and its trailing space, chunk-relative times.
                for word in text.split(" "):
                    if not word:
                        continue
                    chars = [*word, " "]
                    step = WORD_SECONDS * 1000 / len(chars)
                    align = {"chars": chars, "charStartTimesMs": [round(i * step) for i in range(len(chars))],
                             "charDurationsMs": [round(step)] * len(chars)}
                    await ws.send(json.dumps({"audio": pcm(rate), "isFinal": None, "alignment": align,
                                              "normalizedAlignment": align, "contextId": cid}))

    return handler
