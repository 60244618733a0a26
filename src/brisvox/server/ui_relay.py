"""The screen of a call linked to an agent (docs/AGENT_PROTOCOL.md, "The screen").

A remote agent reaches the caller's screen through the same seam as a local tool's
``ctx.dispatch``: its ``ui.command`` goes to the call's :class:`~brisvox.transport.rtvi.ui.CallUi`
(the RTVI call's screen), validated against the agent's declared actions (the program's
:class:`~brisvox.transport.rtvi.ui.UiContract`; without one every command is refused), and its
``ui.message`` goes out as RTVI ``server-message`` as a tool's ``ctx.send_server_message`` does
(no declaration needed; the data checked the same way).  The
screen's app events go back to the link as ``ui.event``: while the link is up the agent owns
them (it decides the note; the Python SDK's default adds the contract's note to the call's
context), so the call adds no note of its own; without a link, or once it is lost, the call
notes them itself as before.

:class:`UiRelay` is the pure part: a ``ui.command`` in, ``None`` (shown) or the ``error`` to
answer out; an app event in, whether the link took it.  :func:`bind_screen` wires it between an
:class:`~brisvox.server.agent_link.AgentLink` and the call's screen for the link's lifetime.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from pydantic import ValidationError

from brisvox.agent.ui import UiChannel
from brisvox.sdk import protocol as p
from brisvox.transport.rtvi.ui import Action, CallUi, UiAnswer, UiError, UiErrorKind, ui_name

if TYPE_CHECKING:
    from brisvox.server.agent_link import AgentLink

__all__ = ["UiRelay", "bind_screen"]

log = logging.getLogger(__name__)

_CODES = {  # why the screen did not take an action -> the error code the agent reads
    UiErrorKind.NO_SCREEN: p.ErrorCode.CALL_ENDED,
    UiErrorKind.UNDECLARED: p.ErrorCode.UNDECLARED,
    UiErrorKind.QUEUE_FULL: p.ErrorCode.BUSY,
    UiErrorKind.NOT_JSON: p.ErrorCode.BAD_FIELD,
}


def _error(code: p.ErrorCode, message: str, field: str = "", command: str = "ui.command") -> p.ProtocolErrorMessage:
    return p.ProtocolErrorMessage(type="error", code=code.value, field=field, message=message, command=command)


class UiRelay:
    """Between one call's screen and its agent link (see the module docs).  ``screen``: the call's
    screen (None: the call has none, e.g. a phone call); ``post``: queue one ``ui.event`` on the
    link without waiting (False: not taken)."""

    def __init__(self, screen: UiChannel | None, post: Callable[[p.UiEvent], bool]) -> None:
        self._screen = screen
        self._post = post
        self._actions: dict[str, type[Action]] = (
            {ui_name(a): a for a in screen.contract.actions} if isinstance(screen, CallUi) else {})
        self.shown = 0  # actions put on the screen
        self.sent = 0  # server messages sent to the page
        self.relayed = 0  # app events handed to the agent

    def command(self, message: p.UiCommand | p.UiMessage) -> p.ProtocolErrorMessage | None:
        """Put the agent's action on the screen (or send its server message): None when it was
        queued, else the error for the agent."""
        if self._screen is None:
            return _error(p.ErrorCode.NO_SCREEN, f"{message.type} was not sent: this call has no screen "
                                                 "(only RTVI calls have one)", command=message.type)
        if isinstance(message, p.UiMessage):
            try:
                self._screen.send_message(message.data)
            except UiError as exc:
                return _error(_CODES[exc.kind], str(exc), "data" if exc.kind is UiErrorKind.NOT_JSON else "",
                              command=message.type)
            self.sent += 1
            return None
        model = self._actions.get(message.command)
        if model is None:
            known = ", ".join(sorted(self._actions)) or "none: the program declares no UiContract"
            return _error(p.ErrorCode.UNDECLARED, f"{message.command!r} is not an action the call's UI contract "
                                                  f"declares (declared: {known})", "command")
        try:
            action = model.model_validate(message.payload)
        except ValidationError as exc:
            err = exc.errors()[0]
            where = ".".join(str(part) for part in err.get("loc", ()))
            return _error(p.ErrorCode.BAD_FIELD, f"{message.command!r}: {err.get('msg', 'invalid')}",
                          f"payload.{where}" if where else "payload")
        try:
            self._screen.dispatch(action)
        except UiError as exc:
            return _error(_CODES[exc.kind], str(exc))
        self.shown += 1
        return None

    def event(self, answer: UiAnswer) -> bool:
        """Hand an app event the screen took to the agent; True when the link took it (it owns the note)."""
        if answer.stale:
            return False  # a tap on a sheet that is not open changes nothing, here as for a local tool
        event = p.UiEvent(type="ui.event", event=ui_name(type(answer.event)),
                          payload=answer.event.model_dump(mode="json"))
        taken = self._post(event)
        if taken:
            self.relayed += 1
        return taken


@contextmanager
def bind_screen(link: AgentLink, screen: UiChannel | None) -> Iterator[UiRelay]:
    """Relay between ``link`` and the call's ``screen`` while the block runs (the link's lifetime)."""
    relay = UiRelay(screen, link.post_ui_event)
    link.on_ui_command = relay.command
    if isinstance(screen, CallUi):
        screen.relay = relay.event
    try:
        yield relay
    finally:
        link.on_ui_command = None
        if isinstance(screen, CallUi):
            screen.relay = None
