"""The seam between a tool and the caller's screen: :class:`UiChannel`.

A tool shows something on the caller's screen with ``ctx.dispatch(action)`` (``ctx`` is its
:class:`~brisvox.agent.tools.ToolCallContext`): ``action`` is a typed UI action (a pydantic
model; the RTVI transport defines the wire form, issue 23).  The dispatch never waits on
the user and holds no floor: it hands the action to the call's :class:`UiChannel` and
returns, so the tool returns at once and the user's answer, if any, comes back later as an
app event (context, never a turn).  A tool sends the page a free-form message (RTVI
``server-message``, the JS client's ``onServerMessage``) with ``ctx.send_server_message(data)``:
the same channel, the same rules (JSON data, never waiting, bounded).

The transport that has a screen binds a :class:`UiChannel` to the call (the server passes
it to :func:`brisvox.engine.run_call` as ``ui``; :class:`brisvox.testing.AgentTest` records
them).  A call without one (a phone call, a plain WebSocket) has no default that drops the
action: ``dispatch`` raises :class:`UiUnavailable`, a :class:`~brisvox.agent.tools.ToolError`
naming the transport, so the model reads that nothing was shown and says so.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from brisvox.agent.tools.registry import UiUnavailable

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["UiChannel", "UiUnavailable"]


class UiChannel(Protocol):
    """The call's channel to the caller's screen, bound by the transport that has one.

    ``dispatch`` must not block (queue the action, bounded, and return); it raises a
    :class:`~brisvox.agent.tools.ToolError` when the action cannot be sent (the screen is
    gone, the queue is full: say which), which the model reads as the tool's failure."""

    def dispatch(self, action: BaseModel, /) -> None: ...

    def send_message(self, data: Any, /) -> None:
        """Send ``data`` (JSON) to the page as a server message; the same rules as :meth:`dispatch`."""
