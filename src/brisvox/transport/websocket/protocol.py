"""The generic WebSocket protocol: messages, close codes, error codes, limits.

The normative description is ``docs/WEBSOCKET_PROTOCOL.md``; this module is its code.
Control messages are JSON text frames with a ``type``; audio travels in binary frames
in the call's encoding.  Client messages are untrusted input and are parsed with
pydantic models here; server messages are built by the small functions at the end.
"""

from __future__ import annotations

import enum
import json
import re
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator

from brisvox.audio.codec import AudioEncoding

__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_MARK_ID_BYTES",
    "SUPPORTED_RATES",
    "ClientControl",
    "ClientDtmf",
    "ClientMark",
    "ClientStop",
    "CloseCode",
    "ErrorCode",
    "ProtocolViolation",
    "StartMessage",
    "StopKind",
    "clear_message",
    "error_message",
    "mark_message",
    "parse_control",
    "parse_start",
    "started_message",
    "stop_message",
]

SUPPORTED_RATES = (8000, 16000, 24000, 48000)
MAX_MARK_ID_BYTES = 256
MAX_METADATA_KEYS = 32
MAX_JSON_DEPTH = 8
"""Deepest nesting of arrays and objects a client message may have (``start`` needs 2)."""


class CloseCode(enum.IntEnum):
    NORMAL = 1000  # the call ended (engine hang-up, client stop, client close)
    GOING_AWAY = 1001  # the server shuts down
    PROTOCOL_ERROR = 1002  # a frame the WebSocket layer refuses (bad opcode, invalid UTF-8)
    POLICY = 1008  # invalid or missing start, too many faults, ping/idle timeout, duration, audio flood
    TOO_BIG = 1009  # a message over max_audio_bytes / max_control_bytes
    INTERNAL_ERROR = 1011  # the server could not serve the call (call_failed, internal_error)
    TRY_AGAIN = 1013  # the server cannot take the call now (accept queue full, engine overloaded)


class ErrorCode(enum.Enum):
    # fatal: the server closes the connection after the error message
    INVALID_START = "invalid_start"
    START_TIMEOUT = "start_timeout"
    MESSAGE_TOO_BIG = "message_too_big"
    TOO_MANY_FAULTS = "too_many_faults"
    PING_TIMEOUT = "ping_timeout"
    SERVER_BUSY = "server_busy"
    OVERLOADED = "overloaded"
    PROTOCOL_ERROR = "protocol_error"
    CALL_FAILED = "call_failed"  # the session could not start or failed (FailureKind.CALL_FAILED)
    INTERNAL_ERROR = "internal_error"  # a bug in the server (FailureKind.INTERNAL_ERROR)
    IDLE_TIMEOUT = "idle_timeout"
    MAX_DURATION = "max_duration"
    AUDIO_FLOOD = "audio_flood"
    # non-fatal: counted (at most 16 per call), the call goes on
    MALFORMED_MESSAGE = "malformed_message"
    UNKNOWN_TYPE = "unknown_type"
    SECOND_START = "second_start"
    HALF_SAMPLE = "half_sample"
    MARK_ID_TOO_LONG = "mark_id_too_long"
    OUTPUT_RATE_MISMATCH = "output_rate_mismatch"
    AUDIO_TOO_FAST = "audio_too_fast"


class ProtocolViolation(Exception):
    """A client message that breaks the protocol; ``code`` says which rule; ``too_deep``: the
    JSON nests deeper than :data:`MAX_JSON_DEPTH` (counted on its own by the server)."""

    def __init__(self, code: ErrorCode, message: str, *, too_deep: bool = False) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.too_deep = too_deep


_MetaKey = Annotated[str, StringConstraints(min_length=1, max_length=64)]
_MetaValue = Annotated[str, StringConstraints(max_length=512)]


class StartMessage(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["start"]
    encoding: AudioEncoding = AudioEncoding.PCM16
    sample_rate: int = 16000
    call_id: Annotated[str, StringConstraints(max_length=128)] | None = None
    metadata: dict[_MetaKey, _MetaValue] = Field(default_factory=dict, max_length=MAX_METADATA_KEYS)

    @field_validator("encoding")
    @classmethod
    def _offered(cls, value: AudioEncoding) -> AudioEncoding:
        if value is AudioEncoding.ALAW:
            raise ValueError("encoding 'alaw' is not offered: use 'pcm16' or 'mulaw'")
        return value

    @field_validator("sample_rate")
    @classmethod
    def _rate(cls, value: int) -> int:
        if value not in SUPPORTED_RATES:
            raise ValueError(f"sample_rate {value} is not one of {list(SUPPORTED_RATES)}")
        return value


class ClientDtmf(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    type: Literal["dtmf"]
    digit: Annotated[str, StringConstraints(pattern=r"^[0-9A-D*#]$")]


class ClientMark(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    type: Literal["mark"]
    id: Annotated[str, StringConstraints(min_length=1, max_length=MAX_MARK_ID_BYTES)]


class ClientStop(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)
    type: Literal["stop"]


ClientControl = ClientDtmf | ClientMark | ClientStop
_MODELS: dict[str, type[BaseModel]] = {"dtmf": ClientDtmf, "mark": ClientMark, "stop": ClientStop}


# A string literal (escapes included) or one bracket: strings are skipped whole, so a bracket
# inside a string never counts.  An unterminated string matches nothing and is skipped char
# by char, which json.loads then refuses anyway.
_JSON_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


def _too_deep(text: str, limit: int = MAX_JSON_DEPTH) -> bool:
    """Whether ``text`` nests arrays/objects deeper than ``limit``, decided before parsing:
    the stdlib parser recurses once per level and raises RecursionError near 1000."""
    if text.count("[") + text.count("{") <= limit:
        return False
    depth = 0
    for m in _JSON_TOKENS.finditer(text):
        tok = m.group()
        if tok in "[{":
            depth += 1
            if depth > limit:
                return True
        elif tok in "]}":
            depth -= 1
    return False


def _load(text: str) -> dict[str, Any]:
    if _too_deep(text):
        raise ProtocolViolation(ErrorCode.MALFORMED_MESSAGE,
                                f"the message nests arrays or objects deeper than {MAX_JSON_DEPTH} levels",
                                too_deep=True)
    try:
        obj = json.loads(text)
    except ValueError:
        raise ProtocolViolation(ErrorCode.MALFORMED_MESSAGE, "the message is not valid JSON") from None
    if not isinstance(obj, dict) or not isinstance(obj.get("type"), str):
        raise ProtocolViolation(ErrorCode.MALFORMED_MESSAGE, "a message must be a JSON object with a string 'type'")
    return obj


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err.get("loc", ())) or "message"
    return f"{where}: {err.get('msg', 'invalid')}"


def parse_start(text: str) -> StartMessage:
    """The first client message; raises ProtocolViolation(INVALID_START)."""
    try:
        obj = _load(text)
    except ProtocolViolation as exc:
        raise ProtocolViolation(ErrorCode.INVALID_START, exc.message, too_deep=exc.too_deep) from None
    if obj["type"] != "start":
        raise ProtocolViolation(ErrorCode.INVALID_START, f"the first message must be 'start', got {obj['type']!r}")
    try:
        return StartMessage.model_validate(obj)
    except ValidationError as exc:
        raise ProtocolViolation(ErrorCode.INVALID_START, _first_error(exc)) from None


def parse_control(text: str) -> ClientControl:
    """A control message after start; raises ProtocolViolation (all non-fatal)."""
    obj = _load(text)
    kind = obj["type"]
    if kind == "start":
        raise ProtocolViolation(ErrorCode.SECOND_START, "the call has already started")
    model = _MODELS.get(kind)
    if model is None:
        raise ProtocolViolation(ErrorCode.UNKNOWN_TYPE, f"unknown message type {kind[:40]!r}")
    try:
        return model.model_validate(obj)  # type: ignore[return-value]
    except ValidationError as exc:
        raise ProtocolViolation(ErrorCode.MALFORMED_MESSAGE, _first_error(exc)) from None


# --- server messages -----------------------------------------------------------------------


def started_message(call_id: str, encoding: AudioEncoding, sample_rate: int) -> str:
    return json.dumps({"type": "started", "call_id": call_id, "encoding": encoding.value,
                       "sample_rate": sample_rate})


def clear_message(epoch: int) -> str:
    return f'{{"type":"clear","epoch":{int(epoch)}}}'


def mark_message(mark_id: str) -> str:
    return json.dumps({"type": "mark", "id": mark_id})


class StopKind(enum.Enum):
    ENDED = "ended"
    SHUTDOWN = "shutdown"
    ERROR = "error"


def stop_message(kind: StopKind) -> str:
    return f'{{"type":"stop","reason":"{kind.value}"}}'


def error_message(code: ErrorCode, message: str, *, fatal: bool) -> str:
    return json.dumps({"type": "error", "code": code.value, "message": message, "fatal": fatal})

