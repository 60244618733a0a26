"""Pipecat's protobuf frames on the RTVI WebSocket: pure encode and decode.

One WebSocket binary message holds one ``pipecat.Frame`` (``frames.proto``).  The server
sends only the two kinds ``@pipecat-ai/websocket-transport`` knows, ``audio`` and
``message`` (any other kind makes the client throw "Unknown frame kind"); it accepts
``audio`` (PCM16LE mono), ``message`` (RTVI JSON) and, for Pipecat's own Python clients,
``text`` and ``transcription``.  Inbound bytes are untrusted: :func:`decode_frame` either
returns a typed frame or raises :class:`WireError` naming what was wrong.
"""

from __future__ import annotations

import enum
import json
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import DecodeError

from brisvox.core.errors import InvalidInput
from brisvox.transport.rtvi import frames_pb2

__all__ = [
    "MAX_RTVI_JSON_DEPTH",
    "InboundAudio",
    "InboundFrame",
    "InboundMessage",
    "InboundText",
    "WireError",
    "WireErrorKind",
    "decode_frame",
    "encode_audio",
    "encode_message",
]

MAX_RTVI_JSON_DEPTH = 16
"""Deepest nesting of arrays and objects an inbound RTVI message may have."""


class WireErrorKind(enum.Enum):
    NOT_PROTOBUF = "not_protobuf"  # the bytes do not parse as a pipecat.Frame
    EMPTY = "empty"  # a Frame with no kind set
    BAD_AUDIO = "bad_audio"  # odd byte count, a rate of 0, or more than one channel
    BAD_MESSAGE = "bad_message"  # a MessageFrame whose data is not an RTVI JSON object


class WireError(InvalidInput):
    """An inbound frame the server refuses; ``kind`` says which rule it broke."""

    def __init__(self, kind: WireErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message


@dataclass(frozen=True, slots=True)
class InboundAudio:
    pcm: bytes  # PCM16LE mono
    sample_rate: int


@dataclass(frozen=True, slots=True)
class InboundMessage:
    """An RTVI message: ``{"label": "rtvi-ai", "type": ..., "id": ..., "data": ...}``."""

    type: str
    id: str | None
    data: Any


@dataclass(frozen=True, slots=True)
class InboundText:
    """A TextFrame or TranscriptionFrame from a Python Pipecat client: text the user typed or said."""

    text: str


InboundFrame = InboundAudio | InboundMessage | InboundText


def encode_audio(pcm: bytes, sample_rate: int) -> bytes:
    """One audio Frame (PCM16LE mono at ``sample_rate``)."""
    frame = frames_pb2.Frame()
    frame.audio.audio = pcm
    frame.audio.sample_rate = sample_rate
    frame.audio.num_channels = 1
    return bytes(frame.SerializeToString())


def encode_message(message: dict[str, Any]) -> bytes:
    """One message Frame carrying ``message`` as RTVI JSON (the ``label`` is added)."""
    frame = frames_pb2.Frame()
    frame.message.data = json.dumps({"label": "rtvi-ai", **message}, separators=(",", ":"), ensure_ascii=False)
    return bytes(frame.SerializeToString())


def _depth_over(obj: Any, limit: int) -> bool:
    stack: list[tuple[Any, int]] = [(obj, 0)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict | list):
            if depth >= limit:
                return True
            stack.extend((v, depth + 1) for v in (item.values() if isinstance(item, dict) else item))
    return False


def _decode_message(data: str) -> InboundMessage:
    # json.loads recurses once per level: a nesting bomb is refused by a bracket count first
    if data.count("[") + data.count("{") > 4096:
        raise WireError(WireErrorKind.BAD_MESSAGE, "the RTVI message holds too many arrays or objects")
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        raise WireError(WireErrorKind.BAD_MESSAGE, "the RTVI message is not valid JSON") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise WireError(WireErrorKind.BAD_MESSAGE, "an RTVI message must be a JSON object with a string 'type'")
    if _depth_over(obj, MAX_RTVI_JSON_DEPTH):
        raise WireError(WireErrorKind.BAD_MESSAGE,
                        f"the RTVI message nests deeper than {MAX_RTVI_JSON_DEPTH} levels")
    msg_id = obj.get("id")
    if msg_id is not None and not isinstance(msg_id, str | int):
        raise WireError(WireErrorKind.BAD_MESSAGE, "an RTVI message 'id' must be a string")
    return InboundMessage(obj["type"], None if msg_id is None else str(msg_id), obj.get("data"))


def decode_frame(data: bytes) -> InboundFrame:
    """The typed frame in one binary WebSocket message; raises :class:`WireError`."""
    frame = frames_pb2.Frame()
    try:
        frame.ParseFromString(data)
    except (DecodeError, RecursionError, ValueError):
        raise WireError(WireErrorKind.NOT_PROTOBUF, "the binary message is not a pipecat Frame") from None
    kind = frame.WhichOneof("frame")
    if kind == "audio":
        audio = frame.audio
        if len(audio.audio) % 2:
            raise WireError(WireErrorKind.BAD_AUDIO, f"{len(audio.audio)} bytes of PCM16 hold a half sample")
        if audio.sample_rate == 0:
            raise WireError(WireErrorKind.BAD_AUDIO, "an audio frame needs a sample_rate")
        if audio.num_channels > 1:
            raise WireError(WireErrorKind.BAD_AUDIO, f"audio must be mono, got {audio.num_channels} channels")
        return InboundAudio(audio.audio, audio.sample_rate)
    if kind == "message":
        return _decode_message(frame.message.data)
    if kind == "text":
        return InboundText(frame.text.text)
    if kind == "transcription":
        return InboundText(frame.transcription.text)
    raise WireError(WireErrorKind.EMPTY, "the Frame carries no text, audio, transcription or message")
