"""Tools declared from Python functions: ``@brisvox.tool.read_only`` and ``@brisvox.tool.side_effect``.

The function is the declaration: its name is the tool's name, its docstring the
description the model reads, and its parameters the arguments::

    class Query(BaseModel):
        day: str = Field(description="the day, as YYYY-MM-DD")
        party_size: int = Field(ge=1, le=12)

    @brisvox.tool.read_only(timeout=2.0)
    async def check_availability(args: Query) -> dict[str, Any]:
        \"\"\"Free tables on a day for a party.\"\"\"
        ...

    @brisvox.tool.side_effect(confirm=True)
    async def book_table(day: str, time: str, party_size: int, ctx: brisvox.ToolContext) -> str:
        \"\"\"Book a table.\"\"\"
        return db.book(ctx.idempotency_key(), day, time, party_size)

* Arguments: one pydantic model parameter, or plain annotated parameters (a model is
  built from them).  Either way the JSON Schema comes from the model and the arguments
  are validated by it before the call; what fails validation goes back to the model as a
  ``tool_failed`` it can read and correct (the tool does not run).
* A parameter annotated :data:`ToolContext` (the tool engine's
  :class:`~brisvox.agent.tools.ToolCallContext`: call id, idempotency key, session,
  epoch, cancellation) is passed the call's context and is not part of the schema.
* The function must be ``async def``: a synchronous one is refused where it is declared.
* Methods work: decorate them in the class and give the agent ``instance.method``
  (tools on one object share its database pool).  An unbound method is refused.
* A tool whose call takes longer than :data:`TOOL_BUDGET` seconds of real time before
  returning is logged once (per tool), and nothing is cancelled: a tool should return
  quickly and start longer work of its own.
* There is no ``needs_result_now`` mark: the tool engine always asks the model again
  with a round's results before the turn ends, so every result is read in its turn.

A declared tool is a :class:`FunctionTool`: its ``spec`` is the tool engine's
:class:`~brisvox.agent.tools.ToolSpec` and calling it is the engine's
:class:`~brisvox.agent.tools.Tool` protocol, so it goes into the one
:class:`~brisvox.agent.tools.ToolRegistry` like any tool (see docs/TOOLS.md).
"""

from __future__ import annotations

import dataclasses
import inspect
import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar, get_type_hints, overload

from pydantic import BaseModel, ConfigDict, ValidationError, create_model

from brisvox.agent.tools import (
    DEFAULT_FILLER_AFTER,
    DEFAULT_TOOL_TIMEOUT,
    Requirement,
    ResultLine,
    SlotKind,
    ToolCallContext,
    ToolError,
    ToolKind,
    ToolSpec,
)
from brisvox.core.clock import monotonic_ns
from brisvox.core.errors import ConfigError

__all__ = ["TOOL_BUDGET", "FunctionTool", "Requirement", "ToolContext", "read_only", "side_effect"]

log = logging.getLogger(__name__)

ToolContext = ToolCallContext
"""What a tool may know about its call (the tool engine's ToolCallContext)."""

TOOL_BUDGET = 0.020
"""Seconds a tool call may take before returning without being logged as slow."""

_F = TypeVar("_F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True, slots=True)
class _Shape:
    """How a function takes its arguments."""

    model: type[BaseModel]
    model_param: str | None  # the one pydantic-model parameter, or None: plain parameters
    plain: tuple[str, ...]
    context_param: str | None
    method: bool  # the first parameter is ``self`` (needs binding)


class FunctionTool:
    """A tool declared from an async function (see the module docs).

    Equal when it is the same function bound to the same object with the same spec."""

    __slots__ = ("_function", "_instance", "_shape", "_slow_logged", "spec")

    def __init__(self, spec: ToolSpec, function: Callable[..., Any], shape: _Shape, instance: object = None) -> None:
        self.spec = spec
        self._function = function
        self._shape = shape
        self._instance = instance
        self._slow_logged = False

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def function(self) -> Callable[..., Any]:
        return self._function

    @property
    def bound(self) -> bool:
        """Whether it can run: a free function, or a method taken from an instance."""
        return not self._shape.method or self._instance is not None

    def __get__(self, instance: object, owner: type | None = None) -> FunctionTool:
        if instance is None or not self._shape.method:
            return self
        return FunctionTool(self.spec, self._function, self._shape, instance)

    async def __call__(self, arguments: dict[str, Any], ctx: ToolCallContext, /) -> Any:
        return await self.call(arguments, ctx)

    async def call(self, arguments: dict[str, Any], ctx: ToolCallContext, /, *, timed: bool = True) -> Any:
        """Validate ``arguments`` and run the function.  ``timed=False``: the caller times it against
        the budget itself (a brain's tool loop, on its clock), so it is not logged twice."""
        if not self.bound:
            raise ConfigError(f"tool {self.spec.name!r} is a method: give the agent instance.{self.spec.name}")
        shape = self._shape
        try:
            parsed = shape.model.model_validate(arguments)
        except ValidationError as exc:
            raise ToolError(_validation_text(exc)) from None
        kwargs: dict[str, Any] = {}
        if shape.model_param is not None:
            kwargs[shape.model_param] = parsed
        else:
            kwargs.update({p: getattr(parsed, p) for p in shape.plain})
        if shape.context_param is not None:
            kwargs[shape.context_param] = ctx
        args = (self._instance,) if shape.method else ()
        started = monotonic_ns()
        result = await self._function(*args, **kwargs)
        took = (monotonic_ns() - started) / 1e9
        if timed and took > TOOL_BUDGET and not self._slow_logged:
            self._slow_logged = True
            log.warning("tool %s took %.0f ms, over the %.0f ms budget; the caller waited for it",
                        self.spec.name, took * 1000, TOOL_BUDGET * 1000)
        return result.model_dump(mode="json") if isinstance(result, BaseModel) else result

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, FunctionTool):
            return NotImplemented
        return (self.spec == other.spec and self._function is other._function
                and self._instance is other._instance)

    def __hash__(self) -> int:
        return hash((self.spec.name, id(self._function), id(self._instance)))

    def __repr__(self) -> str:
        return f"FunctionTool({self.spec.name!r}, kind={self.spec.kind.value})"


def _validation_text(exc: ValidationError) -> str:
    # The values the model sent are left out: tool arguments never reach a log.
    parts = []
    for err in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(p) for p in err["loc"]) or "arguments"
        parts.append(f"{where}: {err['msg']}")
    return "invalid arguments: " + "; ".join(parts)


def _shape(fn: Callable[..., Any], name: str) -> _Shape:
    try:
        hints = get_type_hints(fn, include_extras=True)
    except (NameError, TypeError) as exc:
        raise ConfigError(f"tool {name!r}: cannot read its annotations ({exc})") from None
    params = list(inspect.signature(fn).parameters.values())
    method = bool(params) and params[0].name in ("self", "cls") and params[0].name not in hints
    if method:
        params = params[1:]
    context_param: str | None = None
    fields: dict[str, Any] = {}
    for p in params:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD, p.POSITIONAL_ONLY):
            raise ConfigError(f"tool {name!r}: parameter {p.name!r} must be a plain named parameter")
        ann = hints.get(p.name)
        if ann is None:
            raise ConfigError(f"tool {name!r}: parameter {p.name!r} needs a type annotation (it is the schema)")
        if ann is ToolCallContext:
            context_param = p.name
            continue
        if ann is object or ann is Any:
            # ``(arguments, ctx)`` is the registry's raw Tool shape: declared here, it would ask the
            # model for an "arguments" and a "ctx" field.
            raise ConfigError(f"tool {name!r}: parameter {p.name!r} is {getattr(ann, '__name__', ann)}: give it a type "
                              "the schema can describe (the context parameter is annotated brisvox.ToolContext)")
        fields[p.name] = (ann, ... if p.default is p.empty else p.default)
    if len(fields) == 1:
        (only, (ann, default)), = fields.items()
        if isinstance(ann, type) and issubclass(ann, BaseModel) and default is ...:
            return _Shape(ann, only, (), context_param, method)
    try:
        model = create_model(f"{name}_arguments", __config__=ConfigDict(extra="forbid"), **fields)
    except (TypeError, ValueError) as exc:  # pydantic refuses a type it cannot describe
        raise ConfigError(f"tool {name!r}: {exc}") from None
    return _Shape(model, None, tuple(fields), context_param, method)


def _schema(model: type[BaseModel], name: str) -> dict[str, Any]:
    try:
        schema = model.model_json_schema()
    except Exception as exc:  # pydantic's schema errors have no common base; re-raised as a ConfigError
        raise ConfigError(f"tool {name!r}: no JSON Schema for its arguments ({exc})") from None
    schema.pop("title", None)
    schema.setdefault("properties", {})
    return schema


def declare(
    fn: Callable[..., Any],
    *,
    kind: ToolKind,
    name: str | None = None,
    description: str | None = None,
    timeout: float = DEFAULT_TOOL_TIMEOUT,
    filler_after: float | None = DEFAULT_FILLER_AFTER,
    confirm: bool = False,
    repeatable: bool = False,
    requires: Requirement | None = None,
    from_caller: tuple[str, ...] = (),
    declined_by: tuple[str, ...] = (),
    confirmed_by: tuple[str, ...] = (),
    confirm_question: str | None = None,
    lookup_when_heard: Mapping[str, SlotKind | str] | None = None,
    result_line: ResultLine | None = None,
    declined_line: str | None = None,
) -> FunctionTool:
    """The :class:`FunctionTool` of ``fn`` (what the decorators return)."""
    tool_name = name or getattr(fn, "__name__", "")
    if not tool_name:
        raise ConfigError("a tool needs a name: pass name=... for a callable without __name__")
    if not inspect.iscoroutinefunction(fn):
        raise ConfigError(
            f"tool {tool_name!r} must be `async def`: a tool runs on the event loop, and a synchronous "
            "one would block every call in the process while it ran. Make it `async def` (the body "
            "needs no other change)."
        )
    text = description if description is not None else inspect.getdoc(fn)
    if not text or not text.strip():
        raise ConfigError(f"tool {tool_name!r} needs a docstring: it is the description the model reads")
    shape = _shape(fn, tool_name)
    spec = ToolSpec(name=tool_name, description=text.strip(), parameters=_schema(shape.model, tool_name), kind=kind,
                    timeout=timeout, filler_after=filler_after, confirm=confirm, repeatable=repeatable,
                    requires=requires, from_caller=tuple(from_caller), declined_by=tuple(declined_by),
                    confirmed_by=tuple(confirmed_by), confirm_question=confirm_question, lookup_when_heard=_slot_kinds(tool_name, lookup_when_heard or {}),
                    result_line=result_line, declined_line=declined_line)
    return FunctionTool(spec, fn, shape)


def _slot_kinds(tool: str, slots: Mapping[str, SlotKind | str]) -> dict[str, SlotKind]:
    kinds = {k.value: k for k in SlotKind}
    out = {}
    for arg, kind in slots.items():
        if isinstance(kind, str) and kind not in kinds:
            raise ConfigError(f"tool {tool!r}: lookup_when_heard[{arg!r}] is {kind!r}; one of {', '.join(kinds)}")
        out[arg] = kinds[kind] if isinstance(kind, str) else kind
    return out


@overload
def read_only(fn: _F, /) -> FunctionTool: ...
@overload
def read_only(
    *, name: str | None = ..., description: str | None = ..., timeout: float = ...,
    filler_after: float | None = ..., requires: Requirement | None = ..., from_caller: tuple[str, ...] = ...,
    lookup_when_heard: Mapping[str, SlotKind | str] | None = ..., result_line: ResultLine | None = ...,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...
def read_only(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = DEFAULT_TOOL_TIMEOUT,
    filler_after: float | None = DEFAULT_FILLER_AFTER,
    requires: Requirement | None = None,
    from_caller: tuple[str, ...] = (),
    lookup_when_heard: Mapping[str, SlotKind | str] | None = None,
    result_line: ResultLine | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """A ReadOnly tool: only looks things up; may run speculatively, is dropped at its ``timeout``.
    ``requires`` and ``from_caller``: see :class:`~brisvox.agent.tools.ToolSpec` (docs/TOOLS.md, "Offered now").
    ``lookup_when_heard``: its arguments the caller says (``{"date": "date", "time": "time",
    "party_size": "count"}``): a turn that gives them is answered through a call of this tool.
    ``result_line``: what the agent says itself of a successful call (a template of the arguments
    and ``result``, or a function of both): a round of such calls ends the turn, no model round."""

    def make(f: Callable[..., Any]) -> FunctionTool:
        return declare(f, kind=ToolKind.READ_ONLY, name=name, description=description, timeout=timeout,
                       filler_after=filler_after, requires=requires, from_caller=from_caller,
                       lookup_when_heard=lookup_when_heard, result_line=result_line)

    return make(fn) if fn is not None else make


@overload
def side_effect(fn: _F, /) -> FunctionTool: ...
@overload
def side_effect(
    *, name: str | None = ..., description: str | None = ..., timeout: float = ...,
    filler_after: float | None = ..., confirm: bool = ..., repeatable: bool = ...,
    requires: Requirement | None = ..., from_caller: tuple[str, ...] = ..., declined_by: tuple[str, ...] = ...,
    confirmed_by: tuple[str, ...] = ..., confirm_question: str | None = ...,
    result_line: ResultLine | None = ..., declined_line: str | None = ...,
) -> Callable[[Callable[..., Any]], FunctionTool]: ...
def side_effect(
    fn: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    timeout: float = DEFAULT_TOOL_TIMEOUT,
    filler_after: float | None = DEFAULT_FILLER_AFTER,
    confirm: bool = False,
    repeatable: bool = False,
    requires: Requirement | None = None,
    from_caller: tuple[str, ...] = (),
    declined_by: tuple[str, ...] = (),
    confirmed_by: tuple[str, ...] = (),
    confirm_question: str | None = None,
    result_line: ResultLine | None = None,
    declined_line: str | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """A SideEffect tool: changes the world; runs once per idempotency key, keeps running past its
    ``timeout`` (the result comes later); ``confirm=True`` waits for the caller's yes.  ``requires``:
    offered only after another tool's answer (``Requirement("check_availability", {"free": True},
    bind=("date", "time"))``); ``from_caller``: arguments the caller must have said (a name);
    ``declined_by``: words that, in the caller's reply, drop a call waiting for the yes;
    ``confirmed_by``: words that, in the caller's reply, make confirming the waiting call the
    round's only choice; ``confirm_question``: the question the agent speaks itself when the gate
    holds a call (``str.format`` fields: the call's arguments); ``result_line``: what the agent says
    itself of a successful call (also when it runs on the caller's yes); ``declined_line``: what
    it says itself when the caller's no (``declined_by``) drops the waiting call."""

    def make(f: Callable[..., Any]) -> FunctionTool:
        return declare(f, kind=ToolKind.SIDE_EFFECT, name=name, description=description, timeout=timeout,
                       filler_after=filler_after, confirm=confirm, repeatable=repeatable, requires=requires,
                       from_caller=from_caller, declined_by=declined_by, confirmed_by=confirmed_by,
                       confirm_question=confirm_question, result_line=result_line, declined_line=declined_line)

    return make(fn) if fn is not None else make

