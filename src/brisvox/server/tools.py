"""Python tools a server offers, by name, for agent files to list.

A :class:`ToolSet` holds every tool the server can offer, registered once at startup.
An agent file lists the ones it uses (``agent.tools``); a listed name the set does not
have stops the start (see :mod:`brisvox.server.agent_file`).  Each call then gets a
tool engine over the agent's tools only.

A tool is an async function ``tool(arguments, ctx)``: ``arguments`` is the dict the
model sent, already checked against ``parameters`` (a JSON Schema); ``ctx`` is the tool
engine's call context (session, epoch, call, cancellation, and
``ctx.idempotency_key()``).  It returns text or a JSON value, and raises the tool
engine's ``ToolError`` for a failure the model should read.  Two kinds:

* ``@tools.read_only(...)``: only looks things up; may run speculatively, is dropped
  at its timeout.
* ``@tools.side_effect(...)``: changes the world; runs once per idempotency key, keeps
  running past its timeout (the result comes later), and with ``confirm=True`` waits for
  the caller's yes in a later turn.

::

    tools = ToolSet()

    @tools.read_only(description="The current time in a time zone.",
                     parameters={"type": "object", "properties": {"zone": {"type": "string"}}})
    async def get_time(arguments, ctx):
        ...

    brisvox.run_with_tools(tools)   # the brisvox command line, with these tools
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from brisvox.agent.tools.spec import DEFAULT_FILLER_AFTER, DEFAULT_TOOL_TIMEOUT, ToolKind, ToolSpec
from brisvox.core.errors import ConfigError

__all__ = ["AppTool", "ToolFunction", "ToolSet"]

ToolFunction = Callable[[dict[str, Any], Any], Awaitable[Any]]
"""``await tool(arguments, ctx)`` returns text or a JSON value."""

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_RESERVED = frozenset({"confirm_pending"})
_EMPTY_OBJECT: Mapping[str, Any] = {"type": "object", "properties": {}}


@dataclass(frozen=True, slots=True)
class AppTool:
    """One registered tool: its spec and the function behind it."""

    spec: ToolSpec
    function: ToolFunction

    @property
    def name(self) -> str:
        return self.spec.name


class ToolSet:
    """Tools by name (see the module docs).  Names are unique; order is registration order."""

    __slots__ = ("_tools",)

    def __init__(self) -> None:
        self._tools: dict[str, AppTool] = {}

    def add(self, spec: ToolSpec, function: ToolFunction) -> AppTool:
        """Register ``function`` under ``spec``; a bad or repeated name is a ConfigError."""
        name = spec.name
        if not _NAME.fullmatch(name) or not name.isascii():
            raise ConfigError(f"tool name {name!r} must be 1 to 64 ASCII letters, digits, '_' or '-'")
        if name in _RESERVED:
            raise ConfigError(f"tool name {name!r} is reserved")
        if name in self._tools:
            raise ConfigError(f"tool {name!r} is already registered")
        if spec.confirm and spec.kind is not ToolKind.SIDE_EFFECT:
            raise ConfigError(f"tool {name!r}: confirm applies to side-effect tools only")
        if not spec.timeout > 0:
            raise ConfigError(f"tool {name!r}: timeout must be positive, got {spec.timeout!r}")
        tool = AppTool(spec, function)
        self._tools[name] = tool
        return tool

    def read_only(
        self,
        *,
        description: str,
        parameters: Mapping[str, Any] = _EMPTY_OBJECT,
        name: str | None = None,
        timeout: float = DEFAULT_TOOL_TIMEOUT,
        filler_after: float | None = DEFAULT_FILLER_AFTER,
    ) -> Callable[[ToolFunction], ToolFunction]:
        """Decorator: register a ReadOnly tool (named after the function unless ``name`` is given)."""

        def register(function: ToolFunction) -> ToolFunction:
            spec = ToolSpec(name=name or _function_name(function), description=description,
                            parameters=dict(parameters), kind=ToolKind.READ_ONLY, timeout=timeout,
                            filler_after=filler_after)
            self.add(spec, function)
            return function

        return register

    def side_effect(
        self,
        *,
        description: str,
        parameters: Mapping[str, Any] = _EMPTY_OBJECT,
        name: str | None = None,
        timeout: float = DEFAULT_TOOL_TIMEOUT,
        filler_after: float | None = DEFAULT_FILLER_AFTER,
        confirm: bool = False,
        repeatable: bool = False,
    ) -> Callable[[ToolFunction], ToolFunction]:
        """Decorator: register a SideEffect tool."""

        def register(function: ToolFunction) -> ToolFunction:
            spec = ToolSpec(name=name or _function_name(function), description=description,
                            parameters=dict(parameters), kind=ToolKind.SIDE_EFFECT, timeout=timeout,
                            filler_after=filler_after, confirm=confirm, repeatable=repeatable)
            self.add(spec, function)
            return function

        return register

    def get(self, name: str) -> AppTool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def specs(self) -> list[ToolSpec]:
        return [t.spec for t in self._tools.values()]

    def select(self, names: list[str] | tuple[str, ...]) -> list[AppTool]:
        """The tools an agent lists, in its order (every name must be registered)."""
        missing = [n for n in names if n not in self._tools]
        if missing:
            raise ConfigError(f"tools not registered: {', '.join(missing)}")
        return [self._tools[n] for n in names]

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[str]:
        return iter(self._tools)

    def __len__(self) -> int:
        return len(self._tools)


def _function_name(function: ToolFunction) -> str:
    name = getattr(function, "__name__", "")
    if not isinstance(name, str) or not name:
        raise ConfigError("a tool needs a name: pass name=... for a callable without __name__")
    return name
