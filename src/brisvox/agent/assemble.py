"""The streaming response assembler: provider-neutral deltas in, one parsed response out.

These deltas are the one vocabulary of a streamed response: LLM adapters
(``brisvox.providers.llm``) yield them as they are, and the runner pushes them into a
:class:`ResponseAssembler` unchanged.  Text is appended in order; tool-call fragments are
buffered per index (fragments of different calls and text may interleave, and JSON may
be split anywhere).  Nothing is parsed while streaming: :meth:`ResponseAssembler.finish`
parses every call once, so partial JSON can never execute.

A call that cannot be parsed (no name, invalid JSON, arguments that are not an object)
becomes an :class:`InvalidCall`, answered with :meth:`InvalidCall.error_result`; its
valid siblings assemble normally.

Bounds: the buffered bytes (default 256 KiB; each new call slot costs 64 bytes, so
empty fragments cannot grow the buffer forever; provider data is charged at its JSON
size) and the calls per response (default 32).  A delta over a bound raises
:class:`AssembleError` and is not applied.

Cancelling is dropping: :meth:`ResponseAssembler.cancel` closes the assembler, after
which neither ``push`` nor ``finish`` can be called.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, TypeAlias

from brisvox.agent.context import AssistantMessage, Context, ToolCall, ToolMessage
from brisvox.agent.tools.results import ErrorKind, error_message
from brisvox.core.errors import InvalidInput

__all__ = [
    "CALL_SLOT_BYTES",
    "DEFAULT_MAX_BYTES",
    "DEFAULT_MAX_CALLS",
    "UNKNOWN_TOOL_NAME",
    "AssembleError",
    "AssembleErrorKind",
    "Assembled",
    "CallError",
    "CallErrorKind",
    "Delta",
    "InvalidCall",
    "ProviderDataDelta",
    "Response",
    "ResponseAssembler",
    "TextDelta",
    "ToolCallDelta",
]

DEFAULT_MAX_BYTES = 256 * 1024
DEFAULT_MAX_CALLS = 32
CALL_SLOT_BYTES = 64
UNKNOWN_TOOL_NAME = "unknown_tool"


@dataclass(frozen=True, slots=True)
class TextDelta:
    """A piece of the spoken answer, in order."""

    text: str

    def __repr__(self) -> str:
        return f"TextDelta(<{len(self.text)} chars>)"


@dataclass(frozen=True, slots=True)
class ProviderDataDelta:
    """Round-trip data for the whole response (sent whole, never concatenated)."""

    data: Any

    def __repr__(self) -> str:
        return "ProviderDataDelta(<data>)"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallDelta:
    """A fragment of the call at ``index``; ``id``/``name`` may come on any fragment.

    ``arguments_fragment`` pieces concatenate to the call's JSON arguments, split anywhere;
    ``provider_data`` (a signature to echo back with the call) comes whole on one fragment.
    """

    index: int
    id: str | None = None
    name: str | None = None
    arguments_fragment: str = ""
    provider_data: Any = None

    def __repr__(self) -> str:
        # Arguments are personal data: sizes only.
        return (
            f"ToolCallDelta(index={self.index}, id={self.id!r}, name={self.name!r}, "
            f"arguments=<{len(self.arguments_fragment)} chars>)"
        )


Delta: TypeAlias = TextDelta | ProviderDataDelta | ToolCallDelta


class AssembleErrorKind(enum.Enum):
    CONFLICTING_ID = "conflicting_id"
    CONFLICTING_NAME = "conflicting_name"
    CONFLICTING_CALL_PROVIDER_DATA = "conflicting_call_provider_data"
    CONFLICTING_RESPONSE_PROVIDER_DATA = "conflicting_response_provider_data"
    TOO_LARGE = "too_large"
    TOO_MANY_CALLS = "too_many_calls"
    BAD_INDEX = "bad_index"
    CLOSED = "closed"


class AssembleError(InvalidInput):
    """A delta was refused (and not applied); ``kind`` says why."""

    def __init__(self, kind: AssembleErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class CallErrorKind(enum.Enum):
    MISSING_NAME = "missing_name"
    INVALID_JSON = "invalid_json"
    NOT_AN_OBJECT = "not_an_object"


@dataclass(frozen=True, slots=True)
class CallError:
    kind: CallErrorKind
    detail: str


@dataclass(frozen=True, slots=True, kw_only=True)
class InvalidCall:
    """A call the assembler could not parse; it is still answered and recorded."""

    id: str
    index: int
    name: str | None
    raw_arguments: str = field(repr=False)
    error: CallError
    provider_id: str | None = None
    provider_data: Any = field(default=None, repr=False)

    def error_result(self) -> ToolMessage:
        """The structured ``invalid_tool_call`` error that answers this call."""
        return error_message(self.id, ErrorKind.INVALID_TOOL_CALL, self.name or UNKNOWN_TOOL_NAME, self.error.detail)

    def recorded_call(self) -> ToolCall:
        """How the call is kept in the context: its name (or ``unknown_tool``) with ``{}``."""
        return ToolCall(
            id=self.id,
            name=self.name or UNKNOWN_TOOL_NAME,
            arguments={},
            provider_id=self.provider_id,
            provider_data=self.provider_data,
        )


Assembled: TypeAlias = ToolCall | InvalidCall


@dataclass(frozen=True, slots=True, kw_only=True)
class Response:
    """One finished response: its text, its calls in index order, its provider data."""

    epoch: int
    text: str
    calls: tuple[Assembled, ...] = ()
    provider_data: Any = None

    def valid_calls(self) -> list[ToolCall]:
        return [c for c in self.calls if isinstance(c, ToolCall)]

    def invalid_calls(self) -> list[InvalidCall]:
        return [c for c in self.calls if isinstance(c, InvalidCall)]

    def assistant_message(self) -> AssistantMessage | None:
        """The message to push before executing; ``None`` with no text and no call."""
        if not self.text and not self.calls:
            return None
        recorded = tuple(c if isinstance(c, ToolCall) else c.recorded_call() for c in self.calls)
        return AssistantMessage(text=self.text, tool_calls=recorded, provider_data=self.provider_data)

    def __repr__(self) -> str:
        return f"Response(epoch={self.epoch}, text=<{len(self.text)} chars>, calls={len(self.calls)})"


class _Slot:
    __slots__ = ("fragments", "id", "name", "provider_data")

    def __init__(self) -> None:
        self.id: str | None = None
        self.name: str | None = None
        self.provider_data: Any = None
        self.fragments: list[str] = []


def _json_size(value: Any) -> int:
    try:
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())
    except (TypeError, ValueError):
        return len(repr(value).encode())


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


class ResponseAssembler:
    """Buffers one streamed response and parses it once at :meth:`finish`."""

    __slots__ = ("_bytes", "_closed", "_max_bytes", "_max_calls", "_provider_data", "_slots", "_text")

    def __init__(self, *, max_bytes: int = DEFAULT_MAX_BYTES, max_calls: int = DEFAULT_MAX_CALLS) -> None:
        if max_bytes <= 0 or max_calls <= 0:
            raise InvalidInput(f"assembler limits must be positive, got max_bytes={max_bytes} max_calls={max_calls}")
        self._max_bytes = max_bytes
        self._max_calls = max_calls
        self._text: list[str] = []
        self._slots: dict[int, _Slot] = {}
        self._provider_data: Any = None
        self._bytes = 0
        self._closed = False

    @classmethod
    def with_limits(cls, max_bytes: int, max_calls: int) -> ResponseAssembler:
        return cls(max_bytes=max_bytes, max_calls=max_calls)

    @property
    def buffered_bytes(self) -> int:
        return self._bytes

    def _charge(self, n: int) -> None:
        if self._bytes + n > self._max_bytes:
            raise AssembleError(
                AssembleErrorKind.TOO_LARGE,
                f"response exceeds {self._max_bytes} buffered bytes ({self._bytes} + {n})",
            )

    def push(self, delta: Delta) -> None:
        """Applies one delta, or raises :class:`AssembleError` and leaves the state unchanged."""
        if self._closed:
            raise AssembleError(AssembleErrorKind.CLOSED, "the assembler was finished or cancelled")
        if isinstance(delta, TextDelta):
            n = len(delta.text.encode())
            self._charge(n)
            self._text.append(delta.text)
            self._bytes += n
        elif isinstance(delta, ProviderDataDelta):
            if delta.data is None:
                return
            if self._provider_data is not None:
                if self._provider_data != delta.data:
                    raise AssembleError(
                        AssembleErrorKind.CONFLICTING_RESPONSE_PROVIDER_DATA,
                        "response provider data differs from the value already received",
                    )
                return
            n = _json_size(delta.data)
            self._charge(n)
            self._provider_data = delta.data
            self._bytes += n
        elif isinstance(delta, ToolCallDelta):
            self._push_call(delta)
        else:
            raise InvalidInput(f"not a delta: {type(delta).__name__}")

    def _push_call(self, delta: ToolCallDelta) -> None:
        if delta.index < 0:
            raise AssembleError(AssembleErrorKind.BAD_INDEX, f"tool call index {delta.index} is negative")
        slot = self._slots.get(delta.index)
        cost = 0
        if slot is None:
            if len(self._slots) >= self._max_calls:
                raise AssembleError(
                    AssembleErrorKind.TOO_MANY_CALLS,
                    f"tool call index {delta.index} would open call {len(self._slots) + 1} of at most {self._max_calls}",
                )
            cost += CALL_SLOT_BYTES
        new_id = delta.id or None
        new_name = delta.name or None
        if slot is not None:
            if new_id is not None and slot.id is not None and slot.id != new_id:
                raise AssembleError(AssembleErrorKind.CONFLICTING_ID, f"tool call {delta.index}: id changed")
            if new_name is not None and slot.name is not None and slot.name != new_name:
                raise AssembleError(AssembleErrorKind.CONFLICTING_NAME, f"tool call {delta.index}: name changed")
            if (
                delta.provider_data is not None
                and slot.provider_data is not None
                and slot.provider_data != delta.provider_data
            ):
                raise AssembleError(
                    AssembleErrorKind.CONFLICTING_CALL_PROVIDER_DATA,
                    f"tool call {delta.index}: provider data differs from the value already received",
                )
        set_id = new_id is not None and (slot is None or slot.id is None)
        set_name = new_name is not None and (slot is None or slot.name is None)
        set_pd = delta.provider_data is not None and (slot is None or slot.provider_data is None)
        if set_id and new_id is not None:
            cost += len(new_id.encode())
        if set_name and new_name is not None:
            cost += len(new_name.encode())
        if set_pd:
            cost += _json_size(delta.provider_data)
        cost += len(delta.arguments_fragment.encode())
        self._charge(cost)
        if slot is None:
            slot = self._slots[delta.index] = _Slot()
        if set_id:
            slot.id = new_id
        if set_name:
            slot.name = new_name
        if set_pd:
            slot.provider_data = delta.provider_data
        if delta.arguments_fragment:
            slot.fragments.append(delta.arguments_fragment)
        self._bytes += cost

    def cancel(self) -> None:
        """Drops everything buffered; the assembler cannot be used afterwards."""
        self._closed = True
        self._text.clear()
        self._slots.clear()
        self._provider_data = None
        self._bytes = 0

    def finish(self, epoch: int, context: Context) -> Response:
        """Parses the buffered calls once, minting their ids in index order from ``context``.

        Push the response's assistant message before finishing the next response of
        the same epoch: ids come from the calls already in the context.
        """
        if self._closed:
            raise AssembleError(AssembleErrorKind.CLOSED, "the assembler was finished or cancelled")
        self._closed = True
        indices = sorted(self._slots)
        ids = context.next_tool_call_ids(epoch, len(indices))
        calls: list[Assembled] = []
        for call_id, index in zip(ids, indices, strict=True):
            calls.append(self._parse(call_id, index, self._slots[index]))
        response = Response(
            epoch=epoch, text="".join(self._text), calls=tuple(calls), provider_data=self._provider_data
        )
        self._text.clear()
        self._slots.clear()
        return response

    @staticmethod
    def _parse(call_id: str, index: int, slot: _Slot) -> Assembled:
        raw = "".join(slot.fragments)

        def invalid(kind: CallErrorKind, detail: str) -> InvalidCall:
            return InvalidCall(
                id=call_id,
                index=index,
                name=slot.name,
                raw_arguments=raw,
                error=CallError(kind, detail),
                provider_id=slot.id,
                provider_data=slot.provider_data,
            )

        if slot.name is None:
            return invalid(CallErrorKind.MISSING_NAME, "the tool call has no tool name")
        if not raw.strip():
            args: Any = {}
        else:
            try:
                args = json.loads(raw, parse_constant=_reject_constant)
            except (ValueError, RecursionError) as e:
                return invalid(CallErrorKind.INVALID_JSON, f"the arguments are not valid JSON: {e}")
        if not isinstance(args, dict):
            return invalid(
                CallErrorKind.NOT_AN_OBJECT,
                f"the arguments must be a JSON object, got {type(args).__name__}",
            )
        return ToolCall(id=call_id, name=slot.name, arguments=args, provider_id=slot.id, provider_data=slot.provider_data)


def assemble(deltas: Sequence[Delta], epoch: int, context: Context) -> Response:
    """Convenience for tests and simple adapters: push every delta, then finish."""
    assembler = ResponseAssembler()
    for delta in deltas:
        assembler.push(delta)
    return assembler.finish(epoch, context)
