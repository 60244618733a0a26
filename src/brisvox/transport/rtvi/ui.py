"""Typed UI actions and app events: what an agent puts on the caller's screen, and what the
screen tells the agent back (spec 002, "A tool that needs a person announces and returns").

An agent declares its :class:`Action` models (what it may dispatch to the screen) and its
:class:`AppEvent` models (what the screen may send) in one :class:`UiContract`.  On an RTVI
call an action goes out as RTVI ``ui-command`` ``{"command": <name>, "payload": <model>}``
(the JS client's ``onUICommand``); the page answers with ``ui-event`` ``{"event": <name>,
"payload": ...}`` (``sendUIEvent``) or a ``client-message`` whose ``t`` names a declared app
event.  The name of a model is its class name in snake case (``OpenConfirm`` ->
``open_confirm``) unless the class sets ``ui_name``.

Nothing waits on the user: :meth:`CallUi.dispatch` never blocks (a tool dispatches and
returns at once), and an app event never opens a turn and is never spoken: it is
validated against its model and becomes one note in the model's context (the
contract's ``on_event`` decides its text, or returns None to add nothing).

Nonces: an action with a ``nonce`` field opens that nonce for the call; an app event with
a ``nonce`` field is taken only while its nonce is open (it closes it) and is handed to
``on_event`` with the action it answers.  A tap on a sheet the call no longer has open
changes nothing (it is logged and counted).

A tool reaches its call's screen with ``ctx.dispatch(action)`` (its
:class:`~brisvox.agent.tools.ToolCallContext`): on an RTVI call the server binds the call's
:class:`CallUi` as the call's :class:`~brisvox.agent.ui.UiChannel`.  A call without a screen
(a phone call) refuses with :class:`~brisvox.agent.ui.UiUnavailable`, and a screen that cannot
take the action with :class:`UiError`: both are tool errors, so the tool fails and the model
hears it rather than a promise that is not true.

Server messages: ``ctx.send_server_message(data)`` (:meth:`CallUi.send_message`) sends the
page RTVI ``server-message`` with ``data`` (the JS client's ``onServerMessage``), through the
same queue and with the same rules as an action: it never waits, a full queue or a call
without a screen is refused, and ``data`` must be JSON (:func:`server_message_data` names the
first value that is not, and refuses more than :data:`MAX_SERVER_MESSAGE_BYTES`).  It needs no
declaration in the contract.  Pure: no I/O, no clock.
"""

from __future__ import annotations

import enum
import json
import logging
import math
import re
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, ValidationError

from brisvox.agent.tools.registry import ToolError
from brisvox.core.errors import ChannelClosed, ConfigError, InvalidInput
from brisvox.transport.rtvi.protocol import message as rtvi_message

__all__ = [
    "MAX_OPEN_NONCES",
    "MAX_SERVER_MESSAGE_BYTES",
    "Action",
    "AppEvent",
    "AppEventHandler",
    "CallUi",
    "UiAnswer",
    "UiContract",
    "UiError",
    "UiErrorKind",
    "UiEventError",
    "default_note",
    "server_message_data",
    "ui_name",
]

log = logging.getLogger(__name__)

MAX_OPEN_NONCES = 64
"""Open nonces one call remembers; past it the oldest is forgotten (drop-oldest: its answer is
then ignored like one for a sheet that was closed)."""

MAX_SERVER_MESSAGE_BYTES = 64 * 1024
"""The largest server message's data, as JSON (a bigger one is refused, not cut)."""

_MAX_DEPTH = 32  # nesting a server message's data may have (the inbound parser's own bound is as tight)

_NAME = re.compile(r"^[a-z][a-z0-9_]{0,63}$")


class Action(BaseModel):
    """Something the agent puts on the caller's screen (subclass it; fields are the payload)."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    ui_name: ClassVar[str] = ""


class AppEvent(BaseModel):
    """Something the caller's screen tells the agent (subclass it); validated before it is used:
    an unknown field is refused."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    ui_name: ClassVar[str] = ""


def ui_name(model: type[Action] | type[AppEvent]) -> str:
    """The name of a model on the wire: ``ui_name`` if the class sets it, else its class name in snake case."""
    own = model.__dict__.get("ui_name")
    if isinstance(own, str) and own:
        return own
    return re.sub(r"(?<=[a-z0-9])([A-Z])|(?<=[A-Z])([A-Z])(?=[a-z])", r"_\1\2", model.__name__).lower()


AppEventHandler = Callable[[AppEvent, Action | None], str | None]
"""``(event, the action it answers or None) -> the note for the model's context`` (None: add nothing)."""


class UiErrorKind(enum.Enum):
    NO_SCREEN = "no_screen"  # the call has no screen (not an RTVI call), or no more (it is over)
    UNDECLARED = "undeclared"  # the action's class is not in the agent's contract
    QUEUE_FULL = "queue_full"  # the call's outgoing queue is full: the action was not sent
    NOT_JSON = "not_json"  # a server message's data is not JSON (or is too large or too deep)


class UiError(ToolError):
    """An action could not be put on the screen; ``kind`` says why (a tool error: the model reads it)."""

    def __init__(self, kind: UiErrorKind, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class UiEventError(InvalidInput):
    """An app event the agent does not accept: an unknown name or a payload its model refuses."""


def _nonce(item: BaseModel) -> str | None:
    """The ``nonce`` field of an action or app event, when its model has one."""
    return str(item.__dict__["nonce"]) if "nonce" in type(item).model_fields else None


def default_note(event: AppEvent, answers: Action | None) -> str:
    """The note an app event leaves in the context when the contract has no ``on_event``."""
    payload = json.dumps(event.model_dump(mode="json"), separators=(",", ":"), ensure_ascii=False)
    note = f"On the user's screen, app event {ui_name(type(event))}: {payload}"
    if answers is not None:
        note += f" (the answer to {ui_name(type(answers))})"
    return note + ". It opens no turn; use it with the user's next words."


def _json_problem(data: Any) -> str | None:
    """Where ``data`` first stops being JSON (``data.items[2]: a set ...``); None when it is JSON."""
    stack: list[tuple[Any, str, int]] = [(data, "data", 0)]
    while stack:
        value, where, depth = stack.pop()
        if depth > _MAX_DEPTH:
            return f"{where}: nested deeper than {_MAX_DEPTH} levels"
        if value is None or isinstance(value, bool | int | str):
            continue
        if isinstance(value, float):
            if not math.isfinite(value):
                return f"{where}: {value!r} is not a JSON number"
        elif isinstance(value, list | tuple):
            stack.extend((item, f"{where}[{i}]", depth + 1) for i, item in enumerate(value))
        elif isinstance(value, dict):
            for key, item in value.items():
                if not isinstance(key, str):
                    return f"{where}: the key {key!r} is a {type(key).__name__}, not a string"
                stack.append((item, f"{where}.{key}", depth + 1))
        else:
            return f"{where}: a {type(value).__name__} is not JSON (send plain JSON values, or a pydantic model)"
    return None


def server_message_data(data: Any) -> Any:
    """``data`` checked for a server message (a pydantic model becomes its JSON form); raises
    :class:`UiError` (``not_json``) naming the first value that is not JSON, or the size."""
    if isinstance(data, BaseModel):
        data = data.model_dump(mode="json")
    problem = _json_problem(data)
    if problem is not None:
        raise UiError(UiErrorKind.NOT_JSON, f"the server message was not sent: {problem}")
    size = len(json.dumps(data, separators=(",", ":"), ensure_ascii=False).encode())
    if size > MAX_SERVER_MESSAGE_BYTES:
        raise UiError(UiErrorKind.NOT_JSON, f"the server message was not sent: its data is {size} bytes of JSON, "
                                            f"over {MAX_SERVER_MESSAGE_BYTES}")
    return data


@dataclass(frozen=True, slots=True)
class UiContract:
    """An agent's screen: the actions it may dispatch, the app events it accepts, and what an
    app event says to the model (``on_event``; default :func:`default_note`)."""

    actions: tuple[type[Action], ...] = ()
    events: tuple[type[AppEvent], ...] = ()
    on_event: AppEventHandler | None = None
    _by_name: dict[str, type[AppEvent]] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "actions", tuple(self.actions))
        object.__setattr__(self, "events", tuple(self.events))
        problems: list[str] = []
        for kind, base, models in (("action", Action, self.actions), ("app event", AppEvent, self.events)):
            seen: set[str] = set()
            for model in models:
                if not (isinstance(model, type) and issubclass(model, base)):
                    problems.append(f"{kind} {model!r} is not a subclass of brisvox {base.__name__}")
                    continue
                name = ui_name(model)
                if not _NAME.match(name):
                    problems.append(f"{kind} {model.__name__}: name {name!r} must match {_NAME.pattern}")
                if name in seen:
                    problems.append(f"two {kind}s are named {name!r}")
                seen.add(name)
        if problems:
            raise ConfigError("the UI contract is invalid: " + "; ".join(problems))
        object.__setattr__(self, "_by_name", {ui_name(m): m for m in self.events})

    def event_names(self) -> frozenset[str]:
        return frozenset(self._by_name)

    def parse(self, name: str, payload: Any) -> AppEvent:
        """The app event ``name`` with ``payload``, validated by its model; raises :class:`UiEventError`."""
        model = self._by_name.get(name)
        if model is None:
            known = ", ".join(sorted(self._by_name)) or "none"
            raise UiEventError(f"app event {name[:64]!r} is not declared by this agent (declared: {known})")
        try:
            return model.model_validate(payload if payload is not None else {})
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(p) for p in err.get("loc", ())) or "payload"
            raise UiEventError(f"app event {name!r}: payload.{where}: {err.get('msg', 'invalid')}") from None

    def note_for(self, event: AppEvent, answers: Action | None) -> str | None:
        return (self.on_event or default_note)(event, answers)


@dataclass(frozen=True, slots=True)
class UiAnswer:
    """What one incoming app event did: ``event`` validated; ``answers`` the action whose nonce it
    closed; ``note`` the text for the context (None: nothing); ``stale``: its nonce was not open,
    so it changed nothing."""

    event: AppEvent
    answers: Action | None
    note: str | None
    stale: bool = False


class CallUi:
    """One call's screen (see the module docs).  ``post`` queues one RTVI message without waiting
    and says whether it was queued."""

    def __init__(self, contract: UiContract, post: Callable[[dict[str, Any]], bool], call_id: str = "") -> None:
        self.contract = contract
        self._post = post
        self._call_id = call_id
        self._open: OrderedDict[str, Action] = OrderedDict()
        self.dispatched = 0
        self.messages = 0  # server messages sent
        # Set while an agent link takes the call's app events (brisvox.server.ui_relay): told each
        # answer, True when the link took it (the agent then owns its note).
        self.relay: Callable[[UiAnswer], bool] | None = None
        self.answered = 0
        self.stale = 0

    def dispatch(self, action: BaseModel, /) -> None:
        """Send ``action`` to the screen (the call's :class:`~brisvox.agent.ui.UiChannel`); raises
        :class:`UiError` (never waits)."""
        if not isinstance(action, Action) or type(action) not in self.contract.actions:
            raise UiError(UiErrorKind.UNDECLARED, f"action {type(action).__name__} is not declared in the agent's "
                                                  "UI contract (UiContract(actions=...))")
        name = ui_name(type(action))
        self._send(rtvi_message("ui-command", {"command": name, "payload": action.model_dump(mode="json")}),
                   repr(name))
        nonce = _nonce(action)
        if nonce is not None:
            self._open[nonce] = action
            self._open.move_to_end(nonce)
            if len(self._open) > MAX_OPEN_NONCES:
                self._open.popitem(last=False)
                log.info("call %s: more than %d sheets open; the oldest one's answer will be ignored",
                         self._call_id, MAX_OPEN_NONCES)
        self.dispatched += 1

    def send_message(self, data: Any, /) -> None:
        """Send ``data`` to the page as RTVI ``server-message`` (the call's
        :class:`~brisvox.agent.ui.UiChannel`); raises :class:`UiError` (never waits)."""
        message = rtvi_message("server-message", id_=None)
        message["data"] = server_message_data(data)
        self._send(message, "the server message")
        self.messages += 1

    def _send(self, message: dict[str, Any], what: str) -> None:
        try:
            queued = self._post(message)
        except ChannelClosed:
            raise UiError(UiErrorKind.NO_SCREEN, f"the call is over: {what} was not sent") from None
        if not queued:
            raise UiError(UiErrorKind.QUEUE_FULL, f"the screen did not take {what}: the call's outgoing queue is full")

    def relayed(self, answer: UiAnswer) -> bool:
        """Whether an agent link took ``answer`` (then the call adds no note of its own)."""
        return self.relay is not None and self.relay(answer)

    def is_open(self, nonce: str) -> bool:
        return nonce in self._open

    def receive(self, name: str, payload: Any) -> UiAnswer:
        """One app event from the screen; raises :class:`UiEventError` for one the agent does not accept.
        ``on_event``'s own failure propagates (the caller logs it)."""
        event = self.contract.parse(name, payload)
        answers: Action | None = None
        nonce = _nonce(event)
        if nonce is not None:
            answers = self._open.pop(nonce, None)
            if answers is None:
                self.stale += 1
                log.info("call %s: app event %r answers a sheet this call does not have open; ignored",
                         self._call_id, name)
                return UiAnswer(event, None, None, stale=True)
        self.answered += 1
        return UiAnswer(event, answers, self.contract.note_for(event, answers))
