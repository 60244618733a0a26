"""The tool registry: checked specs, their compiled schemas, and the callables behind them.

A tool is an async callable ``tool(arguments, ctx)`` that returns a ``str`` (text) or any
JSON value, and raises :class:`ToolError` for a failure the model should read.  Any
other exception is a crash ("panic"): a ReadOnly crash answers ``tool_failed``, a
SideEffect crash is recorded as lost (``unknown_outcome``).  Tools receive arguments
that already match their schema.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Awaitable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Protocol

from brisvox.agent.context import ToolCall
from brisvox.agent.tools.cancel import CancelToken
from brisvox.agent.tools.lines import RESULT, line_fields
from brisvox.agent.tools.schema import CompiledSchema, SchemaError, compile_schema
from brisvox.agent.tools.spec import ToolKind, ToolSpec
from brisvox.agent.tools.store import IdempotencyKey
from brisvox.core.errors import BrisvoxError, ConfigError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from brisvox.agent.ui import UiChannel

__all__ = [
    "CONFIRM_PENDING",
    "CallMeta",
    "RegisteredTool",
    "RegistryError",
    "RegistryErrorKind",
    "Tool",
    "ToolCallContext",
    "ToolError",
    "ToolRegistry",
    "UiUnavailable",
]

CONFIRM_PENDING = "confirm_pending"
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


class ToolError(BrisvoxError):
    """Raised by a tool for a failure the model should read (answered ``tool_failed``)."""


class UiUnavailable(ToolError):
    """A tool dispatched a UI action on a call whose transport has no screen (see :mod:`brisvox.agent.ui`)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class CallMeta:
    """What the call is, as the transport and the agent tell it.

    ``call_id``: the call's id (the transport's: a Twilio call SID, a generated id);
    ``transport``: which transport carries it (``websocket``, ``twilio``, ``telnyx``, ``rtvi``,
    ``loopback``...); ``parameters``: what the transport knows of the caller, as strings
    (Twilio's custom parameters, the WebSocket ``start`` message's metadata, and the
    transport's own keys such as ``encoding``); ``agent``: the agent's name."""

    call_id: str
    transport: str = "none"
    agent: str = "agent"
    parameters: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        object.__setattr__(self, "parameters", MappingProxyType(dict(self.parameters)))

    def __repr__(self) -> str:
        # The parameters may carry what a caller typed or a carrier sent: their values stay out of logs.
        return (f"CallMeta(call_id={self.call_id!r}, transport={self.transport!r}, agent={self.agent!r}, "
                f"parameters=<{len(self.parameters)} keys>)")


_UNDESCRIBED = CallMeta(call_id="")


@dataclass(frozen=True, slots=True)
class ToolCallContext:
    """What a running tool may know about its call.

    ``session``: the call's id (the tool engine's session); ``epoch``: the turn the call was
    made in; ``call``: the tool call (its ``id``, the model's call id); ``cancel``: set when
    the turn is interrupted; ``meta``: the call's :class:`CallMeta`; ``ui``: the call's
    screen, when its transport has one (use :meth:`dispatch`); ``line``: the call's phone
    line (a :class:`brisvox.engine.phone.PhoneLine`, typed loosely so this layer does not
    import the engine), which the built-in telephony tools act through; None outside a call
    (a tool engine used alone)."""

    session: str
    epoch: int
    call: ToolCall
    cancel: CancelToken
    meta: CallMeta = field(default_factory=lambda: _UNDESCRIBED)
    ui: UiChannel | None = None
    line: object | None = None

    def __post_init__(self) -> None:
        if self.meta is _UNDESCRIBED:  # a context made outside a call (a test's): it describes its session
            object.__setattr__(self, "meta", CallMeta(call_id=self.session))

    def idempotency_key(self) -> IdempotencyKey:
        return IdempotencyKey(self.session, self.epoch, self.call.id)

    def dispatch(self, action: BaseModel) -> None:
        """Show ``action`` on the caller's screen and return at once (it never waits on the
        user).  Raises :class:`UiUnavailable` when the call's transport has no screen."""
        if self.ui is None:
            raise UiUnavailable(
                f"nothing was shown: this call ({self.meta.transport}) has no screen for "
                f"{type(action).__name__}; tell the caller in words instead")
        self.ui.dispatch(action)

    def send_server_message(self, data: Any) -> None:
        """Send ``data`` (a JSON value, or a pydantic model) to the caller's page as a server
        message (RTVI ``server-message``) and return at once.  Raises :class:`UiUnavailable` when
        the call's transport has no screen, and a :class:`ToolError` naming the bad value when
        ``data`` is not JSON."""
        if self.ui is None:
            raise UiUnavailable(
                f"nothing was sent: this call ({self.meta.transport}) has no screen for a server message; "
                "tell the caller in words instead")
        self.ui.send_message(data)

    def __repr__(self) -> str:
        return f"ToolCallContext(session={self.session!r}, epoch={self.epoch}, call={self.call.id!r})"


class Tool(Protocol):
    """An async tool: ``await tool(arguments, ctx)`` returns text (``str``) or a JSON value."""

    def __call__(self, arguments: dict[str, Any], ctx: ToolCallContext, /) -> Awaitable[Any]: ...


class RegistryErrorKind(enum.Enum):
    INVALID_NAME = "invalid_name"
    RESERVED_NAME = "reserved_name"
    DUPLICATE = "duplicate"
    ZERO_TIMEOUT = "zero_timeout"
    CONFIRM_NEEDS_SIDE_EFFECT = "confirm_needs_side_effect"
    REPEATABLE_NEEDS_SIDE_EFFECT = "repeatable_needs_side_effect"
    INVALID_SCHEMA = "invalid_schema"


class RegistryError(ConfigError):
    """A tool could not be registered; ``kind`` says why and the message names the tool."""

    def __init__(self, kind: RegistryErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


@dataclass(frozen=True, slots=True)
class RegisteredTool:
    spec: ToolSpec
    tool: Tool
    schema: CompiledSchema


async def _confirm_pending_placeholder(arguments: dict[str, Any], ctx: ToolCallContext) -> Any:
    raise ToolError("confirm_pending is handled by the tool engine")  # pragma: no cover


CONFIRM_PENDING_SPEC = ToolSpec(
    name=CONFIRM_PENDING,
    description=(
        "Run an action that is waiting for the user's confirmation. Call it only when the user "
        "clearly agreed, in the reply that followed your question, to the exact action you described."
    ),
    parameters={
        "type": "object",
        "properties": {"call_id": {"type": "string", "description": "the call_id of the pending request"}},
        "required": ["call_id"],
        "additionalProperties": False,
    },
    kind=ToolKind.SIDE_EFFECT,
    filler_after=None,
)


def _template_fields(tool: str, what: str, template: str | None) -> list[str]:
    """The argument names a declared line's fields use (its ``what`` field, for the error)."""
    try:
        return line_fields(template or "")
    except ValueError as e:
        raise RegistryError(RegistryErrorKind.INVALID_SCHEMA, f"tool {tool!r}: {what}: {e}") from None


def _check_lines(spec: ToolSpec, props: Mapping[str, Any]) -> None:
    """A result line is a template or a function; its fields and a declined line's are the
    call's arguments (and ``result``, for a result line); a declined line needs ``declined_by``."""
    name, line = spec.name, spec.result_line
    if line is not None and not isinstance(line, str) and not callable(line):
        raise RegistryError(RegistryErrorKind.INVALID_SCHEMA, f"tool {name!r}: result_line must be a str.format "
                            f"template or a function of (arguments, result), got {type(line).__name__}")
    for what, template, extra in (("result_line", line if isinstance(line, str) else None, {RESULT}),
                                  ("declined_line", spec.declined_line, set())):
        bad = [f for f in _template_fields(name, what, template) if f not in props and f not in extra]
        if bad:
            raise RegistryError(RegistryErrorKind.INVALID_SCHEMA, f"tool {name!r}: {what} names fields that are "
                                f"not its arguments{' or result' if extra else ''}: {', '.join(bad)}")
    if spec.declined_line is not None and not spec.declined_by:
        raise RegistryError(RegistryErrorKind.INVALID_SCHEMA, f"tool {name!r}: declined_line needs declined_by "
                            "(the caller's words that drop its waiting call)")


class ToolRegistry:
    """Tools by name.  A rejected tool is not added; specs are listed in name order."""

    __slots__ = ("_tools",)

    def __init__(self) -> None:
        self._tools: dict[str, RegisteredTool] = {}

    def register(self, spec: ToolSpec, tool: Tool) -> None:
        """Adds a tool or raises :class:`RegistryError` (nothing changes then)."""
        name = spec.name
        if not isinstance(name, str) or not _NAME.fullmatch(name) or not name.isascii():
            raise RegistryError(
                RegistryErrorKind.INVALID_NAME,
                f"tool name {name!r} must be 1 to 64 ASCII letters, digits, '_' or '-'",
            )
        if name == CONFIRM_PENDING:
            raise RegistryError(RegistryErrorKind.RESERVED_NAME, f"tool name {name!r} is reserved")
        if name in self._tools:
            raise RegistryError(RegistryErrorKind.DUPLICATE, f"tool {name!r} is already registered")
        if not (spec.timeout > 0) or not math.isfinite(spec.timeout):
            raise RegistryError(
                RegistryErrorKind.ZERO_TIMEOUT, f"tool {name!r}: timeout must be positive, got {spec.timeout!r}"
            )
        if spec.confirm and spec.kind is not ToolKind.SIDE_EFFECT:
            raise RegistryError(
                RegistryErrorKind.CONFIRM_NEEDS_SIDE_EFFECT,
                f"tool {name!r}: confirm applies to SideEffect tools only",
            )
        if spec.repeatable and spec.kind is not ToolKind.SIDE_EFFECT:
            raise RegistryError(
                RegistryErrorKind.REPEATABLE_NEEDS_SIDE_EFFECT,
                f"tool {name!r}: repeatable applies to SideEffect tools only",
            )
        try:
            schema = compile_schema(spec.parameters)
        except SchemaError as e:
            raise RegistryError(RegistryErrorKind.INVALID_SCHEMA, f"tool {name!r}: {e}") from None
        props = spec.parameters.get("properties", {})
        asked = _template_fields(name, "confirm_question", spec.confirm_question)
        named = (*spec.from_caller, *(spec.requires.bind if spec.requires is not None else ()), *spec.lookup_when_heard,
                 *asked)
        missing = [arg for arg in named if arg not in props]
        if missing:
            raise RegistryError(RegistryErrorKind.INVALID_SCHEMA, f"tool {name!r}: from_caller/requires/"
                                f"lookup_when_heard/confirm_question name arguments it does not have: {', '.join(missing)}")
        _check_lines(spec, props)
        if spec.lookup_when_heard and spec.kind is not ToolKind.READ_ONLY:
            # A forced call runs on the caller's words alone: only a lookup may (never a booking).
            raise RegistryError(RegistryErrorKind.INVALID_SCHEMA, f"tool {name!r}: lookup_when_heard applies to "
                                "ReadOnly tools only")
        if spec.requires is not None and spec.requires.tool in (name, CONFIRM_PENDING):
            raise RegistryError(RegistryErrorKind.INVALID_SCHEMA, f"tool {name!r}: it cannot require {spec.requires.tool!r}")
        self._tools[name] = RegisteredTool(spec, tool, schema)
        if spec.confirm and CONFIRM_PENDING not in self._tools:
            self._add_confirm_pending()

    def require_confirmation(self, name: str) -> None:
        """Turns the confirmation gate on for a registered SideEffect tool (an agent file's confirm_tools)."""
        entry = self._tools.get(name)
        if entry is None or name == CONFIRM_PENDING:
            raise RegistryError(RegistryErrorKind.INVALID_NAME, f"no confirmable tool named {name!r} is registered")
        if entry.spec.kind is not ToolKind.SIDE_EFFECT:
            raise RegistryError(
                RegistryErrorKind.CONFIRM_NEEDS_SIDE_EFFECT,
                f"tool {name!r}: confirm applies to SideEffect tools only",
            )
        self._tools[name] = RegisteredTool(entry.spec.with_confirm(True), entry.tool, entry.schema)
        if CONFIRM_PENDING not in self._tools:
            self._add_confirm_pending()

    def _add_confirm_pending(self) -> None:
        self._tools[CONFIRM_PENDING] = RegisteredTool(
            CONFIRM_PENDING_SPEC, _confirm_pending_placeholder, compile_schema(CONFIRM_PENDING_SPEC.parameters)
        )

    def get(self, name: str) -> RegisteredTool | None:
        return self._tools.get(name)

    def spec(self, name: str) -> ToolSpec | None:
        entry = self._tools.get(name)
        return entry.spec if entry is not None else None

    def specs(self) -> list[ToolSpec]:
        """Every spec in name order (deterministic requests, stable prompt caches)."""
        return [self._tools[n].spec for n in sorted(self._tools)]

    def names(self) -> list[str]:
        return sorted(self._tools)

    def has_confirm_tools(self) -> bool:
        return CONFIRM_PENDING in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def is_empty(self) -> bool:
        return not self._tools

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._tools))
