"""A Telnyx media streaming simulator (bidirectional RTP mode), from Telnyx's documented
message shapes: snake_case, ``stream_id``, numbers as strings.  ``shuffle`` sends media out
of order (seeded swaps within a few frames) and duplicates some frames, as UDP-borne RTP
forwarded over a WebSocket may arrive."""

from __future__ import annotations

import json
import random
from typing import Any

from brisvox.audio.g711 import alaw_encode, ulaw_encode
from brisvox.transport.telephony import b64encode

STREAM_ID = "32de0dea-53cb-4b21-89a4-9e1819c043bc"
CALL_CONTROL_ID = "v3:T02llQxIyaRkhfRKxgAP8nY511EhFLizdvdUKJiSw8d6A9BborherQ"


def connected(token: str | None = None) -> str:
    body: dict[str, Any] = {"event": "connected", "version": "1.0.0"}
    if token is not None:
        body["x-telnyx-streaming-auth-token"] = token
    return json.dumps(body)


def start(call_control_id: str = CALL_CONTROL_ID, encoding: str = "PCMU", sample_rate: int = 8000) -> str:
    return json.dumps({
        "event": "start", "sequence_number": "1", "stream_id": STREAM_ID,
        "start": {"user_id": "3e6f995f-85f7-4705-9741-53b116d28237", "call_control_id": call_control_id,
                  "call_session_id": "ff55a038-6f7d-11ef-9692-02420aef0b1f", "client_state": "aGF2ZSBhIG5pY2UgZGF5ID1d",
                  "from": "+13122011111", "to": "+13122022222",
                  "media_format": {"encoding": encoding, "sample_rate": sample_rate, "channels": 1}}})


def media(payload: bytes, chunk: int, sequence: int) -> str:
    return json.dumps({"event": "media", "sequence_number": str(sequence), "stream_id": STREAM_ID,
                       "media": {"track": "inbound", "chunk": str(chunk), "timestamp": str(chunk * 160),
                                 "payload": b64encode(payload)}})


def dtmf(digit: str, sequence: int) -> str:
    return json.dumps({"event": "dtmf", "stream_id": STREAM_ID, "occurred_at": "2024-09-12T12:00:00.000000Z",
                       "sequence_number": str(sequence), "dtmf": {"digit": digit}})


def mark(name: str, sequence: int) -> str:
    return json.dumps({"event": "mark", "sequence_number": str(sequence), "stream_id": STREAM_ID,
                       "mark": {"name": name}})


def stop(sequence: int, call_control_id: str = CALL_CONTROL_ID) -> str:
    return json.dumps({"event": "stop", "sequence_number": str(sequence), "stream_id": STREAM_ID,
                       "stop": {"user_id": "3e6f995f", "call_control_id": call_control_id}})


def error(code: int, sequence: int) -> str:
    return json.dumps({"event": "error", "sequence_number": str(sequence), "stream_id": STREAM_ID,
                       "payload": {"code": code, "title": "malformed_frame", "detail": "Malformed frame"}})


class Caller:
    """The carrier's side of one stream: numbers every frame, may shuffle and duplicate media."""

    def __init__(self, codec: str = "PCMU", shuffle: bool = False, seed: int = 7) -> None:
        self.encode = ulaw_encode if codec == "PCMU" else alaw_encode
        self.shuffle = shuffle
        self.rng = random.Random(seed)
        self.chunk = 0
        self.sequence = 1
        self.duplicated = 0

    def next_sequence(self) -> int:
        self.sequence += 1
        return self.sequence

    def audio(self, pcm: bytes) -> list[str]:
        """20 ms media frames for ``pcm``, shuffled within 3 frames and 1 in 10 duplicated when asked."""
        law = self.encode(pcm)
        frames = []
        for i in range(0, len(law), 160):
            self.chunk += 1
            frames.append(media(law[i:i + 160], self.chunk, self.next_sequence()))
        if self.shuffle:
            for i in range(0, len(frames) - 1):
                j = min(len(frames) - 1, i + self.rng.randrange(3))
                frames[i], frames[j] = frames[j], frames[i]
            for i in range(len(frames) - 1, -1, -10):
                frames.insert(i, frames[i])
                self.duplicated += 1
        return frames
