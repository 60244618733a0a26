"""The conversation context: one provider-neutral representation of a call's messages.

Four kinds of message make up a conversation:

* :class:`SystemMessage` (instructions, and the notes of late tool results),
* :class:`UserMessage` (what the caller said),
* :class:`AssistantMessage` (what the model said, with the tool calls it made and any
  provider round-trip data such as reasoning signatures),
* :class:`ToolMessage` (the answer to one tool call).

Tool-call ids are internal and stable: ``t<epoch>.<seq>``, where ``seq`` counts every
call of one turn across tool-loop rounds.  :meth:`Context.next_tool_call_ids` mints
them from the calls already in the context, so the idempotency key (session, epoch,
call id) never maps two calls to one result.  The provider's own id is kept in
:attr:`ToolCall.provider_id`.

Ordering rules (:meth:`Context.validate`, also enforced by every ``push_*``):

* every call is answered exactly once, after its assistant message and before any
  other message (a system message included); answers of one message may come in any
  order among themselves;
* no assistant message is empty (no text and no call);
* call ids are unique across the context.

Calls still open at the end of the context are allowed (their results are on the
way); :meth:`Context.interrupt_pending_tool_calls` closes them when a turn is cut off.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeAlias, runtime_checkable

from brisvox.core.errors import InvalidInput

__all__ = [
    "AssistantMessage",
    "CharsPerToken",
    "Context",
    "ContextError",
    "Message",
    "SystemMessage",
    "TokenEstimator",
    "ToolCall",
    "ToolMessage",
    "UserMessage",
    "interrupted_result",
    "late_note_text",
    "message_from_json",
    "message_to_json",
    "parse_tool_call_id",
]

JsonObject: TypeAlias = dict[str, Any]

_CALL_ID = re.compile(r"t(\d+)\.(\d+)")


class ContextError(InvalidInput):
    """A message would break the ordering rules, or a JSON form is malformed."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCall:
    """One tool call of an assistant message; ``arguments`` is always a JSON object."""

    id: str
    name: str
    arguments: JsonObject = field(default_factory=dict, hash=False)
    provider_id: str | None = None
    provider_data: Any = field(default=None, hash=False)

    def __repr__(self) -> str:
        # Arguments are personal data (a phone number, an address): sizes only.
        return f"ToolCall(id={self.id!r}, name={self.name!r}, arguments=<{len(self.arguments)} keys>)"


@dataclass(frozen=True, slots=True, kw_only=True)
class SystemMessage:
    text: str

    def __repr__(self) -> str:
        return f"SystemMessage(text=<{len(self.text)} chars>)"


@dataclass(frozen=True, slots=True, kw_only=True)
class UserMessage:
    text: str

    def __repr__(self) -> str:
        return f"UserMessage(text=<{len(self.text)} chars>)"


@dataclass(frozen=True, slots=True, kw_only=True)
class AssistantMessage:
    text: str = ""
    tool_calls: tuple[ToolCall, ...] = ()
    provider_data: Any = field(default=None, hash=False)

    def is_empty(self) -> bool:
        """No text and no call (provider data alone does not count)."""
        return not self.text and not self.tool_calls

    def __repr__(self) -> str:
        calls = ", ".join(c.id for c in self.tool_calls)
        return f"AssistantMessage(text=<{len(self.text)} chars>, tool_calls=[{calls}])"


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolMessage:
    call_id: str
    content: str
    is_error: bool = False

    def __repr__(self) -> str:
        return f"ToolMessage(call_id={self.call_id!r}, content=<{len(self.content)} chars>, is_error={self.is_error})"


Message: TypeAlias = SystemMessage | UserMessage | AssistantMessage | ToolMessage


def parse_tool_call_id(call_id: str) -> tuple[int, int] | None:
    """``(epoch, seq)`` of an internal id ``t<epoch>.<seq>``; ``None`` for any other id."""
    m = _CALL_ID.fullmatch(call_id)
    if m is None:
        return None
    return int(m.group(1)), int(m.group(2))


def interrupted_result(tool: str) -> str:
    """The JSON body that closes a call cut off by an interruption."""
    return json.dumps(
        {
            "error": "interrupted",
            "tool": tool,
            "detail": "the caller interrupted before this call finished; it did not complete in this turn",
        },
        ensure_ascii=False,
    )


def late_note_text(tool: str, call_id: str, content: str, is_error: bool) -> str:
    """The system note that reports a result which could not be delivered in its own turn.

    Used for a SideEffect call that was interrupted or timed out while running and
    finished afterwards; the engine's late notes carry exactly this text.
    """
    status = "failed" if is_error else "finished"
    return (
        f"Late tool result: the call {call_id} of {tool} was interrupted or timed out earlier and has "
        f"now {status}. Do not repeat it. Result: {content}"
    )


# ---------------------------------------------------------------------------------------------
# Token estimates


@runtime_checkable
class TokenEstimator(Protocol):
    """Estimates how many tokens a message costs in a request."""

    def estimate(self, message: Message) -> int: ...


def _message_bytes(message: Message) -> int:
    match message:
        case SystemMessage(text=text) | UserMessage(text=text):
            return len(text.encode())
        case AssistantMessage():
            n = len(message.text.encode())
            for call in message.tool_calls:
                n += len(call.name.encode())
                n += len(json.dumps(call.arguments, ensure_ascii=False, separators=(",", ":")).encode())
            return n
        case ToolMessage():
            return len(message.content.encode())
    raise TypeError(f"not a message: {type(message).__name__}")  # pragma: no cover


@dataclass(frozen=True, slots=True)
class CharsPerToken:
    """The default estimate: UTF-8 bytes of the content / ``bytes_per_token`` + ``per_message``."""

    bytes_per_token: int = 4
    per_message: int = 4

    def estimate(self, message: Message) -> int:
        return _message_bytes(message) // self.bytes_per_token + self.per_message


# ---------------------------------------------------------------------------------------------
# JSON form: {"role": ..., ...}


def message_to_json(message: Message) -> JsonObject:
    """The JSON form of one message."""
    match message:
        case SystemMessage():
            return {"role": "system", "text": message.text}
        case UserMessage():
            return {"role": "user", "text": message.text}
        case AssistantMessage():
            out: JsonObject = {"role": "assistant", "text": message.text}
            if message.tool_calls:
                out["tool_calls"] = [_call_to_json(c) for c in message.tool_calls]
            if message.provider_data is not None:
                out["provider_data"] = message.provider_data
            return out
        case ToolMessage():
            return {
                "role": "tool",
                "call_id": message.call_id,
                "content": message.content,
                "is_error": message.is_error,
            }
    raise TypeError(f"not a message: {type(message).__name__}")  # pragma: no cover


def _call_to_json(call: ToolCall) -> JsonObject:
    out: JsonObject = {"id": call.id, "name": call.name, "arguments": call.arguments}
    if call.provider_id is not None:
        out["provider_id"] = call.provider_id
    if call.provider_data is not None:
        out["provider_data"] = call.provider_data
    return out


def _str_field(obj: Mapping[str, Any], key: str, where: str, default: str | None = None) -> str:
    value = obj.get(key, default)
    if not isinstance(value, str):
        raise ContextError(f"{where}: field {key!r} must be a string")
    return value


def message_from_json(obj: Any) -> Message:
    """Parses one message's JSON form; raises :class:`ContextError` naming the bad field."""
    if not isinstance(obj, Mapping):
        raise ContextError("a message must be a JSON object")
    role = obj.get("role")
    if role == "system":
        return SystemMessage(text=_str_field(obj, "text", "system message"))
    if role == "user":
        return UserMessage(text=_str_field(obj, "text", "user message"))
    if role == "assistant":
        raw_calls = obj.get("tool_calls", [])
        if not isinstance(raw_calls, list):
            raise ContextError("assistant message: field 'tool_calls' must be a list")
        calls = []
        for raw in raw_calls:
            if not isinstance(raw, Mapping):
                raise ContextError("assistant message: a tool call must be a JSON object")
            args = raw.get("arguments", {})
            if not isinstance(args, dict):
                raise ContextError("tool call: field 'arguments' must be a JSON object")
            pid = raw.get("provider_id")
            if pid is not None and not isinstance(pid, str):
                raise ContextError("tool call: field 'provider_id' must be a string")
            calls.append(
                ToolCall(
                    id=_str_field(raw, "id", "tool call"),
                    name=_str_field(raw, "name", "tool call"),
                    arguments=args,
                    provider_id=pid,
                    provider_data=raw.get("provider_data"),
                )
            )
        return AssistantMessage(
            text=_str_field(obj, "text", "assistant message", ""),
            tool_calls=tuple(calls),
            provider_data=obj.get("provider_data"),
        )
    if role == "tool":
        is_error = obj.get("is_error", False)
        if not isinstance(is_error, bool):
            raise ContextError("tool message: field 'is_error' must be a boolean")
        return ToolMessage(
            call_id=_str_field(obj, "call_id", "tool message"),
            content=_str_field(obj, "content", "tool message"),
            is_error=is_error,
        )
    raise ContextError(f"unknown message role {role!r}")


# ---------------------------------------------------------------------------------------------
# The context


class _Checker:
    """Applies the ordering rules one message at a time."""

    __slots__ = ("open", "seen_ids")

    def __init__(self) -> None:
        self.open: dict[str, ToolCall] = {}
        self.seen_ids: set[str] = set()

    def feed(self, index: int, message: Message) -> None:
        if isinstance(message, ToolMessage):
            if message.call_id not in self.open:
                if message.call_id in self.seen_ids:
                    raise ContextError(f"message {index}: call {message.call_id!r} is answered twice or late")
                raise ContextError(f"message {index}: result for unknown call {message.call_id!r}")
            del self.open[message.call_id]
            return
        if self.open:
            pending = ", ".join(self.open)
            raise ContextError(
                f"message {index}: a {type(message).__name__} follows unanswered tool calls ({pending})"
            )
        if isinstance(message, AssistantMessage):
            if message.is_empty():
                raise ContextError(f"message {index}: empty assistant message (no text, no tool call)")
            for call in message.tool_calls:
                if call.id in self.seen_ids:
                    raise ContextError(f"message {index}: duplicate tool call id {call.id!r}")
                if not isinstance(call.arguments, dict):
                    raise ContextError(f"message {index}: arguments of {call.id!r} are not a JSON object")
                self.seen_ids.add(call.id)
                self.open[call.id] = call
        elif not isinstance(message, SystemMessage | UserMessage):
            raise ContextError(f"message {index}: not a message: {type(message).__name__}")


class Context:
    """An ordered, always-valid list of messages with call-id minting and token estimates.

    Every ``push_*`` checks the ordering rules and raises :class:`ContextError` without
    changing anything when a message would break them.  Edits that rewrite history
    (:meth:`replace`, :meth:`remove`, :meth:`set_messages`, used by played-text
    truncation and the long-call window) are checked whole the same way.
    """

    __slots__ = ("_checker", "_estimator", "_high_seq", "_messages")

    def __init__(self, messages: Iterable[Message] = (), *, estimator: TokenEstimator | None = None) -> None:
        self._estimator: TokenEstimator = estimator if estimator is not None else CharsPerToken()
        self._messages: list[Message] = []
        self._checker = _Checker()
        # Highest seq minted per epoch, so ids stay unique even after history is edited.
        self._high_seq: dict[int, int] = {}
        self.set_messages(messages)

    # -- reading ------------------------------------------------------------------------------

    @property
    def messages(self) -> tuple[Message, ...]:
        return tuple(self._messages)

    @property
    def estimator(self) -> TokenEstimator:
        return self._estimator

    def __len__(self) -> int:
        return len(self._messages)

    def __iter__(self) -> Iterator[Message]:
        return iter(tuple(self._messages))

    def __getitem__(self, index: int) -> Message:
        return self._messages[index]

    def __repr__(self) -> str:
        return f"Context(<{len(self._messages)} messages>, open_calls={len(self._checker.open)})"

    def open_tool_calls(self) -> tuple[ToolCall, ...]:
        """Calls of the context that have no answer yet, in issue order."""
        return tuple(self._checker.open.values())

    def has_open_tool_calls(self) -> bool:
        return bool(self._checker.open)

    def find_call(self, call_id: str) -> ToolCall | None:
        for message in reversed(self._messages):
            if isinstance(message, AssistantMessage):
                for call in message.tool_calls:
                    if call.id == call_id:
                        return call
        return None

    # -- ids ----------------------------------------------------------------------------------

    def next_tool_call_id(self, epoch: int) -> str:
        return self.next_tool_call_ids(epoch, 1)[0]

    def next_tool_call_ids(self, epoch: int, n: int) -> list[str]:
        """``n`` fresh ids ``t<epoch>.<seq>`` following the calls of ``epoch`` already here.

        Minting does not reserve: two responses finished against the same context before
        either is pushed get the same ids (and the second push is rejected).
        """
        if epoch < 0 or n < 0:
            raise ContextError(f"next_tool_call_ids needs epoch >= 0 and n >= 0, got {epoch}, {n}")
        start = self._high_seq.get(epoch, -1) + 1
        return [f"t{epoch}.{seq}" for seq in range(start, start + n)]

    def _note_ids(self, message: Message) -> None:
        if isinstance(message, AssistantMessage):
            for call in message.tool_calls:
                parsed = parse_tool_call_id(call.id)
                if parsed is not None:
                    epoch, seq = parsed
                    if seq > self._high_seq.get(epoch, -1):
                        self._high_seq[epoch] = seq

    # -- writing ------------------------------------------------------------------------------

    def push(self, message: Message) -> None:
        """Appends one message; raises :class:`ContextError` if it breaks the ordering rules."""
        self._checker.feed(len(self._messages), message)
        self._messages.append(message)
        self._note_ids(message)

    def push_system(self, text: str) -> None:
        self.push(SystemMessage(text=text))

    def push_user(self, text: str) -> None:
        self.push(UserMessage(text=text))

    def push_assistant(
        self, text: str = "", tool_calls: Sequence[ToolCall] = (), provider_data: Any = None
    ) -> None:
        self.push(AssistantMessage(text=text, tool_calls=tuple(tool_calls), provider_data=provider_data))

    def push_tool_result(self, call_id: str, content: str, *, is_error: bool = False) -> None:
        self.push(ToolMessage(call_id=call_id, content=content, is_error=is_error))

    def push_late_tool_result(self, tool: str, call_id: str, content: str, *, is_error: bool = False) -> None:
        """Reports a result that finished after its call was closed, as a system note."""
        self.push(SystemMessage(text=late_note_text(tool, call_id, content, is_error)))

    def interrupt_pending_tool_calls(self) -> list[str]:
        """Closes every open call with an ``interrupted`` error result; returns their ids."""
        closed = []
        for call in self.open_tool_calls():
            self.push(ToolMessage(call_id=call.id, content=interrupted_result(call.name), is_error=True))
            closed.append(call.id)
        return closed

    def replace(self, index: int, message: Message | None) -> None:
        """Replaces (or, with ``None``, removes) the message at ``index``; checked whole."""
        edited = list(self._messages)
        if message is None:
            del edited[index]
        else:
            edited[index] = message
        self.set_messages(edited)

    def remove(self, index: int) -> None:
        self.replace(index, None)

    def set_messages(self, messages: Iterable[Message]) -> None:
        """Replaces the whole history (checked whole; nothing changes on an error)."""
        new = list(messages)
        checker = _Checker()
        for i, message in enumerate(new):
            checker.feed(i, message)
        self._messages = new
        self._checker = checker
        for message in new:
            self._note_ids(message)

    def clear(self) -> None:
        self.set_messages(())

    # -- checks and estimates -----------------------------------------------------------------

    def validate(self) -> None:
        """Checks the ordering rules over the whole history; raises :class:`ContextError`."""
        checker = _Checker()
        for i, message in enumerate(self._messages):
            checker.feed(i, message)

    def estimate_tokens(self, messages: Iterable[Message] | None = None) -> int:
        """Estimated tokens of ``messages`` (default: the whole context)."""
        source = self._messages if messages is None else messages
        return sum(self._estimator.estimate(m) for m in source)

    # -- JSON ---------------------------------------------------------------------------------

    def to_json(self) -> list[JsonObject]:
        return [message_to_json(m) for m in self._messages]

    def dumps(self) -> str:
        return json.dumps(self.to_json(), ensure_ascii=False)

    @classmethod
    def from_json(cls, data: Any, *, estimator: TokenEstimator | None = None) -> Context:
        if not isinstance(data, list):
            raise ContextError("a context's JSON form must be a list of messages")
        return cls((message_from_json(m) for m in data), estimator=estimator)

    @classmethod
    def loads(cls, text: str, *, estimator: TokenEstimator | None = None) -> Context:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise ContextError(f"context JSON does not parse: {e}") from None
        return cls.from_json(data, estimator=estimator)
