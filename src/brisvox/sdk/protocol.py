"""The agent protocol, v1: the messages between a brisvox call and an agent process.

Pure: no asyncio, no sockets, no clock.  Both sides use it (the server's link,
:mod:`brisvox.server.agent_link`, and the SDK, :mod:`brisvox.sdk.brain`).  Every message
is one JSON object in one WebSocket text frame with a ``type``; docs/AGENT_PROTOCOL.md is
the reference.  :func:`parse_agent_message` / :func:`parse_server_message` turn a frame
into a frozen model or raise :class:`ProtocolError` naming the bad field; they raise
nothing else for any input.
"""

from __future__ import annotations

import enum
import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, TypeAdapter, ValidationError

from brisvox.core.errors import BrisvoxError

__all__ = [
    "MAX_MESSAGE_BYTES",
    "PROTOCOL_VERSION",
    "AgentMessage",
    "CallEvent",
    "ContextUpdate",
    "End",
    "ErrorCode",
    "ProtocolError",
    "ProtocolErrorMessage",
    "Ready",
    "RemoteToolKind",
    "RemoteToolSpec",
    "Say",
    "ServerMessage",
    "SessionStart",
    "ToolCallRequest",
    "ToolResult",
    "ToolsSet",
    "Transfer",
    "TurnRequest",
    "UiCommand",
    "UiEvent",
    "UiMessage",
    "encode",
    "parse_agent_message",
    "parse_server_message",
    "say_refusal",
]

PROTOCOL_VERSION = 1
MAX_MESSAGE_BYTES = 1 << 20
"""A frame over this many bytes is refused (``too_large``) before it is parsed."""

_NAME = r"^[A-Za-z0-9_-]{1,64}$"
_UI_NAME = r"^[a-z][a-z0-9_]{0,63}$"  # the name of a UI action or app event (brisvox.transport.rtvi.ui)


class ErrorCode(enum.Enum):
    """Why a frame was refused (the ``code`` of a :class:`ProtocolError` and of an ``error`` message)."""

    TOO_LARGE = "too_large"
    NOT_JSON = "not_json"
    NOT_OBJECT = "not_object"
    BAD_FIELD = "bad_field"
    VERSION = "version"
    UNEXPECTED = "unexpected"  # a valid message at a moment it has no meaning (a result for no call)
    # A valid command the call could not carry out (``command`` names it; the engine's Refusal):
    BUSY = "busy"  # too many commands (or bot lines) waiting
    CALL_ENDED = "call_ended"  # the call ended first
    CALLED_OFF = "called_off"  # the caller spoke over the farewell: the call goes on
    UNKNOWN_TOOL = "unknown_tool"  # tools.set named a tool the call does not have
    NO_CARRIER = "no_carrier"  # transfer (or end with a farewell) on a call without a phone carrier / line
    CARRIER_FAILED = "carrier_failed"  # the carrier refused or did not answer the transfer
    NO_SCREEN = "no_screen"  # ui.command on a call without a screen (not an RTVI call)
    UNDECLARED = "undeclared"  # ui.command naming an action the call's UI contract does not declare
    OVERTAKEN = "overtaken"  # say: a newer turn (a barge-in, an interrupting say) came before a word of it


class ProtocolError(BrisvoxError):
    """A frame that is not a valid message: ``code`` says why, ``field`` names the bad field (dotted)."""

    def __init__(self, code: ErrorCode, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}" if field else message)
        self.code = code
        self.field = field


class _Message(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RemoteToolKind(enum.Enum):
    READ_ONLY = "read_only"
    SIDE_EFFECT = "side_effect"


class RemoteToolSpec(_Message):
    """A tool the agent offers: the server registers it next to the agent file's tools."""

    name: Annotated[str, Field(pattern=_NAME)]
    description: Annotated[str, Field(max_length=4096)]
    parameters: dict[str, Any]
    kind: Literal["read_only", "side_effect"] = "read_only"
    timeout: Annotated[float, Field(gt=0, le=120)] = 5.0
    repeatable: StrictBool = False


# --- agent -> server ---------------------------------------------------------------------------


class Ready(_Message):
    """The agent's answer to ``session.start``: its tools, whether a lost link should be reopened,
    and whether the agent answers the caller's turns itself (``answers_turns``: the server sends
    it a ``turn.request`` for each model request of the call instead of running its own model)."""

    type: Literal["ready"]
    v: Literal[1]
    tools: Annotated[tuple[RemoteToolSpec, ...], Field(max_length=128)] = ()
    resume: StrictBool = False
    answers_turns: StrictBool = False


class ToolResult(_Message):
    """The outcome of one ``tool.call``: ``result`` (any JSON) when ``ok``, else ``error`` (read by the model)."""

    type: Literal["tool.result"]
    id: Annotated[str, Field(min_length=1, max_length=128)]
    ok: StrictBool
    result: Any = None
    error: Annotated[str, Field(max_length=4096)] = ""


class Say(_Message):
    """A bot line.  Without ``reply_to``: a line of its own (a bot turn).  With ``reply_to``: a piece
    of the agent's reply to that ``turn.request``, spoken as the model's text would be; ``final``
    ends the reply (its ``text`` may then be empty).  The server refuses an empty ``text`` that ends
    nothing, ``final`` without ``reply_to`` and ``interrupt`` with it (docs/AGENT_PROTOCOL.md)."""

    type: Literal["say"]
    text: Annotated[str, Field(max_length=4096)]
    interrupt: StrictBool = False
    reply_to: Annotated[str, Field(min_length=1, max_length=128)] | None = None
    final: StrictBool = False


def say_refusal(say: Say, answers_turns: bool) -> ProtocolError | None:
    """Why the server refuses ``say`` as sent (None: it is a valid line or reply line).

    The parser checks each field; these are the rules between the fields and the agent's mode
    (``ready.answers_turns``), checked by the server's link (and the conformance driver)."""
    if say.reply_to is None:
        if say.final:
            return ProtocolError(ErrorCode.BAD_FIELD, "final", "final ends a reply: it needs reply_to")
        if not say.text:
            return ProtocolError(ErrorCode.BAD_FIELD, "text", "a line needs text")
        return None
    if not answers_turns:
        return ProtocolError(ErrorCode.UNEXPECTED, "reply_to",
                               "a reply needs answers_turns in ready: this agent does not answer the turns")
    if say.interrupt:
        return ProtocolError(ErrorCode.BAD_FIELD, "interrupt", "a reply line cannot interrupt")
    if not say.text and not say.final:
        return ProtocolError(ErrorCode.BAD_FIELD, "text", "a reply line needs text unless it is final")
    return None


class ContextUpdate(_Message):
    type: Literal["context.update"]
    note: Annotated[str, Field(min_length=1, max_length=16384)]


class ToolsSet(_Message):
    type: Literal["tools.set"]
    names: Annotated[tuple[Annotated[str, Field(pattern=_NAME)], ...], Field(max_length=128)]


class End(_Message):
    type: Literal["end"]
    farewell: Annotated[str, Field(max_length=4096)] = ""


class UiCommand(_Message):
    """A typed UI action for the caller's screen (RTVI ``ui-command``): ``command`` is the action's
    name, ``payload`` its fields (:mod:`brisvox.transport.rtvi.ui`)."""

    type: Literal["ui.command"]
    command: Annotated[str, Field(pattern=_UI_NAME)]
    payload: dict[str, Any]


class UiMessage(_Message):
    """A free-form message for the caller's page (RTVI ``server-message``, the JS client's
    ``onServerMessage``): ``data`` is any JSON (at most 64 KiB encoded)."""

    type: Literal["ui.message"]
    data: Any = None


class Transfer(_Message):
    """Transfer the call (through its carrier) to ``to``: a phone number or SIP URI the carrier takes."""

    type: Literal["transfer"]
    to: Annotated[str, Field(min_length=1, max_length=256)]


AgentMessage = Ready | ToolResult | Say | ContextUpdate | ToolsSet | End | Transfer | UiCommand | UiMessage
_AGENT = TypeAdapter[AgentMessage](Annotated[AgentMessage, Field(discriminator="type")])


# --- server -> agent ---------------------------------------------------------------------------


class SessionStart(_Message):
    type: Literal["session.start"]
    v: Literal[1]
    call_id: str
    agent: str
    transport: str
    parameters: dict[str, str] = Field(default_factory=dict)
    resume: StrictBool = False


class CallEvent(_Message):
    """One fact of the call's engine event stream; ``turn`` is the engine's epoch of the fact."""

    type: Literal["event"]
    kind: str
    turn: int | None = None
    text: str | None = None
    tool: str | None = None
    outcome: str | None = None


class ToolCallRequest(_Message):
    type: Literal["tool.call"]
    id: str
    name: str
    arguments: dict[str, Any]
    idempotency_key: str
    timeout: float


class ProtocolErrorMessage(_Message):
    """A frame of the agent's refused (``field`` names what was wrong), or a command the call could
    not carry out (``command`` is its ``type``)."""

    type: Literal["error"]
    code: str
    field: str = ""
    message: str = ""
    command: str | None = None


class UiEvent(_Message):
    """An app event from the caller's screen (RTVI ``ui-event``): ``event`` names it, ``payload`` is
    what the screen sent (validated by the brain's :class:`~brisvox.transport.rtvi.ui.UiContract`)."""

    type: Literal["ui.event"]
    event: Annotated[str, Field(pattern=_UI_NAME)]
    payload: Any = None


class TurnRequest(_Message):
    """The call asks an agent that answers the turns (``ready.answers_turns``) for a reply: ``id`` is
    what its ``say`` lines name in ``reply_to``; ``turn`` and ``text`` are the caller's turn being
    answered (the engine's epoch and the words, as in the ``user_turn`` event)."""

    type: Literal["turn.request"]
    id: str
    turn: int | None = None
    text: str = ""


ServerMessage = SessionStart | CallEvent | ToolCallRequest | ProtocolErrorMessage | UiEvent | TurnRequest
_SERVER = TypeAdapter[ServerMessage](Annotated[ServerMessage, Field(discriminator="type")])


def encode(message: _Message) -> str:
    """The frame of one message (``None`` fields left out)."""
    return message.model_dump_json(exclude_none=True)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")  # NaN and Infinity: Python's extension, not the standard's


def _load(frame: str | bytes) -> dict[str, Any]:
    # The limit is in bytes: a text frame's characters can be up to 4 bytes each in UTF-8.
    size = len(frame) if isinstance(frame, bytes) or len(frame) * 4 <= MAX_MESSAGE_BYTES else len(frame.encode())
    if size > MAX_MESSAGE_BYTES:
        raise ProtocolError(ErrorCode.TOO_LARGE, "", f"message over {MAX_MESSAGE_BYTES} bytes")
    try:
        value = json.loads(frame, parse_constant=_no_constant)
    except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
        raise ProtocolError(ErrorCode.NOT_JSON, "", f"not JSON ({type(exc).__name__})") from None
    if not isinstance(value, dict):
        raise ProtocolError(ErrorCode.NOT_OBJECT, "", "a message is a JSON object")
    if "v" in value and value["v"] != PROTOCOL_VERSION and value.get("type") in ("ready", "session.start"):
        raise ProtocolError(ErrorCode.VERSION, "v", f"protocol version {PROTOCOL_VERSION} only")
    return value


def _parse(adapter: TypeAdapter[Any], frame: str | bytes) -> Any:
    value = _load(frame)
    if not isinstance(value.get("type"), str):
        raise ProtocolError(ErrorCode.BAD_FIELD, "type", "missing or not a string")
    try:
        return adapter.validate_python(value)
    except ValidationError as exc:
        first = exc.errors(include_url=False, include_input=False)[0]
        loc = first["loc"]
        # The union's tag is the first element of the location: the field is what follows it.
        if loc and loc[0] == value.get("type"):
            loc = loc[1:]
        field = ".".join(str(p) for p in loc)
        raise ProtocolError(ErrorCode.BAD_FIELD, field or "type", first["msg"]) from None
    except RecursionError:
        raise ProtocolError(ErrorCode.BAD_FIELD, "", "nested too deeply") from None


def parse_agent_message(frame: str | bytes) -> AgentMessage:
    """One frame the agent sent, as its message; :class:`ProtocolError` for anything else."""
    message: AgentMessage = _parse(_AGENT, frame)
    return message


def parse_server_message(frame: str | bytes) -> ServerMessage:
    """One frame the server sent (the SDK's side); :class:`ProtocolError` for anything else."""
    message: ServerMessage = _parse(_SERVER, frame)
    return message
