"""RTVI messages: what the client sends (typed, validated) and what the server sends (builders).

Every message is JSON ``{"label": "rtvi-ai", "type": ..., "id": ..., "data": ...}`` inside a
protobuf ``MessageFrame`` (:mod:`brisvox.transport.rtvi.wire`).  The protocol version we
speak is :data:`PROTOCOL_VERSION` (``@pipecat-ai/client-js`` 1.13 sends 2.1.0); a client on
another major version gets ``bot-ready`` all the same and a warning in the log, as Pipecat's
own server does.  docs/RTVI.md lists the messages.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from brisvox.core.frames import ReplyMode
from brisvox.transport.rtvi.wire import InboundMessage

__all__ = [
    "PROTOCOL_VERSION",
    "ClientMessage",
    "ClientReady",
    "DisconnectBot",
    "DtmfKeys",
    "RtviRequest",
    "RtviViolation",
    "SendText",
    "UiEvent",
    "bot_ready",
    "compatible",
    "error",
    "error_response",
    "message",
    "parse_request",
    "server_response",
]

PROTOCOL_VERSION = "2.1.0"

_message_ids = itertools.count(1)  # the ids of the messages the server starts

_Short = Annotated[str, StringConstraints(max_length=128)]
_Text = Annotated[str, StringConstraints(max_length=4096)]


class RtviViolation(Exception):
    """A client message the server cannot act on; the client gets ``error-response`` naming why."""

    def __init__(self, request_id: str | None, message: str) -> None:
        super().__init__(message)
        self.request_id = request_id
        self.message = message


class _Data(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class _ReadyData(_Data):
    version: _Short = "0.0.0"


class _ClientMessageData(_Data):
    t: _Short
    d: Any = None


class _SendTextOptions(_Data):
    run_immediately: bool = True
    audio_response: bool = True


class _SendTextData(_Data):
    content: _Text
    options: _SendTextOptions = Field(default_factory=_SendTextOptions)


class _DtmfData(_Data):
    buttons: Annotated[list[Annotated[str, StringConstraints(pattern=r"^[0-9*#A-D]$")]],
                       Field(min_length=1, max_length=32)]


class _UiEventData(_Data):
    event: _Short
    payload: Any = None


@dataclass(frozen=True, slots=True)
class ClientReady:
    id: str | None
    version: str


@dataclass(frozen=True, slots=True)
class DisconnectBot:
    id: str | None


@dataclass(frozen=True, slots=True, repr=False)
class ClientMessage:
    """An application message; the server answers ``server-response`` (same ``id`` and ``t``)."""

    id: str | None
    t: str
    d: Any

    def __repr__(self) -> str:
        return f"ClientMessage(id={self.id!r}, t={self.t!r})"


@dataclass(frozen=True, slots=True, repr=False)
class SendText:
    """A typed turn; ``reply`` TEXT for ``audio_response: false`` (the answer is shown, not
    spoken); ``run_immediately`` as the client sent it (only True is supported)."""

    id: str | None
    content: str
    reply: ReplyMode
    run_immediately: bool = True

    def __repr__(self) -> str:
        return f"SendText(id={self.id!r}, <{len(self.content)} chars>, reply={self.reply.value})"


@dataclass(frozen=True, slots=True)
class DtmfKeys:
    id: str | None
    buttons: tuple[str, ...]


@dataclass(frozen=True, slots=True, repr=False)
class UiEvent:
    """An app event from the page (``ui-event``): ``event`` names it, ``payload`` is untrusted."""

    id: str | None
    event: str
    payload: Any

    def __repr__(self) -> str:
        return f"UiEvent(id={self.id!r}, event={self.event!r})"


RtviRequest = ClientReady | DisconnectBot | ClientMessage | SendText | DtmfKeys | UiEvent


def _validate(model: type[_Data], msg: InboundMessage) -> Any:
    try:
        return model.model_validate(msg.data if msg.data is not None else {})
    except ValidationError as exc:
        err = exc.errors()[0]
        where = ".".join(str(p) for p in err.get("loc", ())) or "data"
        raise RtviViolation(msg.id, f"{msg.type}: data.{where}: {err.get('msg', 'invalid')}") from None


def parse_request(msg: InboundMessage) -> RtviRequest:
    """The typed client message; raises :class:`RtviViolation` for an unknown type or bad data."""
    if msg.type == "client-ready":
        return ClientReady(msg.id, _validate(_ReadyData, msg).version)
    if msg.type == "disconnect-bot":
        return DisconnectBot(msg.id)
    if msg.type == "client-message":
        cm = _validate(_ClientMessageData, msg)
        return ClientMessage(msg.id, cm.t, cm.d)
    if msg.type == "send-text":
        st = _validate(_SendTextData, msg)
        return SendText(msg.id, st.content, ReplyMode.SPOKEN if st.options.audio_response else ReplyMode.TEXT,
                        st.options.run_immediately)
    if msg.type == "dtmf":
        if isinstance(msg.data, dict) and "button" in msg.data and "buttons" not in msg.data:
            # protocol < 2.1: one {button} message per key
            return DtmfKeys(msg.id, tuple(_validate(_DtmfData, InboundMessage(
                msg.type, msg.id, {"buttons": [msg.data["button"]]})).buttons))
        return DtmfKeys(msg.id, tuple(_validate(_DtmfData, msg).buttons))
    if msg.type == "ui-event":
        ui = _validate(_UiEventData, msg)
        return UiEvent(msg.id, ui.event, ui.payload)
    raise RtviViolation(msg.id, f"message type {msg.type[:64]!r} is not supported by this server")


def compatible(client_version: str) -> bool:
    """Whether a client's protocol version shares our major version."""
    return client_version.split(".", 1)[0] == PROTOCOL_VERSION.split(".", 1)[0]


def message(type_: str, data: Any = None, id_: str | None = None) -> dict[str, Any]:
    """One server message (``id``: a fresh one unless it answers a request)."""
    # a counter, not uuid4 (a system call for 16 random bytes, per message): a server message's id
    # only has to differ from the others' (clients match responses by their own request's id)
    out: dict[str, Any] = {"type": type_, "id": id_ if id_ is not None else f"b{next(_message_ids):x}"}
    if data is not None:
        out["data"] = data
    return out


def bot_ready(request_id: str | None, about: dict[str, Any]) -> dict[str, Any]:
    return message("bot-ready", {"version": PROTOCOL_VERSION, "about": about}, request_id)


def error_response(request_id: str | None, text: str) -> dict[str, Any]:
    return message("error-response", {"error": text, "fatal": False}, request_id)


def error(text: str, *, fatal: bool) -> dict[str, Any]:
    return message("error", {"error": text, "message": text, "fatal": fatal})


def server_response(request_id: str | None, t: str, d: Any) -> dict[str, Any]:
    return message("server-response", {"t": t, "d": d}, request_id)

