"""The agent's side of the agent protocol: a :class:`Brain` served over WebSocket.

A brain is a class; one instance serves one call.  Its tools are async methods declared
with :mod:`brisvox.tool` (``@brisvox.tool.read_only`` / ``@brisvox.tool.side_effect``):
the name is the tool's name, the docstring its description, one pydantic model
parameter (or none) its arguments.  A synchronous method is refused where it is declared
(a ``ConfigError`` when the class body runs), never on a call's first turn::

    class Desk(Brain):
        @brisvox.tool.read_only
        async def opening_hours(self) -> str:
            \"\"\"When the shop is open.\"\"\"
            return "nine to five"

    await serve(Desk, "127.0.0.1", 8765)   # the agent file: [agent_link] url = "ws://127.0.0.1:8765"

A plain brain's tools are offered to the call's model (``ready``); a model-backed brain
(:mod:`brisvox.sdk.loop`) runs its own model and tools and offers none.

A SideEffect call is run at most once per idempotency key: a repeated ``tool.call`` with
a key already seen (a reopened link of the same call, served by a new instance) is answered with
the first result (bounded memory: 1024 keys per call, kept per call id by :func:`serve`).

Everything the brain sends goes through one bounded outbox (:data:`OUTBOX` frames,
backpressure: nothing is dropped; a UI action that finds it full is refused) and one
writer, which gives every frame :data:`SEND_TIMEOUT` seconds on the brain's clock: a
frame that does not go out in time means the link is lost (one warning, the socket is
dropped, the session ends; the server then falls back or reopens).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Callable, Coroutine
from typing import Any, ClassVar, Protocol

from pydantic import BaseModel
from websockets.asyncio.server import Server, ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed, ConnectionClosedOK

from brisvox.agent.context import ToolCall
from brisvox.agent.tools import CancelToken, ToolCallContext, ToolError
from brisvox.core.channel import Channel
from brisvox.core.clock import Clock, SystemClock, bounded
from brisvox.core.errors import BrisvoxError, ChannelClosed, DeadlineExceeded
from brisvox.core.tasks import TaskScope
from brisvox.sdk import protocol as p
from brisvox.tool import FunctionTool
from brisvox.transport.rtvi.ui import (
    CallUi,
    UiAnswer,
    UiContract,
    UiError,
    UiErrorKind,
    UiEventError,
    server_message_data,
)

__all__ = ["OUTBOX", "SEND_TIMEOUT", "START_TIMEOUT", "Brain", "Wire", "serve", "serve_wire"]

log = logging.getLogger(__name__)

_REMEMBERED = 1024
"""Idempotency keys whose results a session remembers (oldest forgotten first)."""

SEND_TIMEOUT = 2.0
"""Seconds one frame may take to go out before the link counts as lost (the server's own write bound)."""

START_TIMEOUT = 10.0
"""Seconds the brain waits for ``session.start`` once the server connected."""

OUTBOX = 256
"""Frames waiting to go out; senders wait for room (backpressure), a UI action is refused."""


class Wire(Protocol):
    """One link's frames: the WebSocket in production, memory in :mod:`brisvox.sdk.testing`.

    ``recv`` returns None once the peer closed the link normally; ``abort`` drops it at once."""

    async def send(self, frame: str) -> None: ...

    async def recv(self) -> str | bytes | None: ...

    def abort(self) -> None: ...


class Brain:
    """Logic for one call (see the module docs).  Override :meth:`on_event` to follow the call.

    ``resume``: a lost link should be reopened by the server (the new session's ``session.start``
    has ``resume`` set; a new instance serves it).  ``ui``: the screen's contract, the typed UI
    actions :meth:`dispatch` may send and the app events the brain accepts
    (:class:`~brisvox.transport.rtvi.ui.UiContract`).  ``clock``: where the brain's deadlines
    are measured (the system clock; tests pass a virtual one)."""

    resume: ClassVar[bool] = False
    ui: ClassVar[UiContract | None] = None
    answers_turns: ClassVar[bool] = False
    """The brain answers the call's turns itself (``ready.answers_turns``): the call runs no model of
    its own while the brain answers, and asks the brain with :meth:`on_turn_request`."""

    def __init__(self, *, clock: Clock | None = None) -> None:
        self.clock: Clock = clock if clock is not None else SystemClock()
        self.session: p.SessionStart | None = None
        self._link: _Session | None = None

    def tools(self) -> list[FunctionTool]:
        """The brain's tools, bound to this instance, in declaration order."""
        found: list[FunctionTool] = []
        for name in dict.fromkeys(n for klass in reversed(type(self).__mro__) for n in vars(klass)):
            attribute = getattr(self, name, None)
            if isinstance(attribute, FunctionTool):
                found.append(attribute)
        return found

    def remote_tools(self) -> list[FunctionTool]:
        """The tools offered to the call's model in ``ready`` (read once, when the link opens)."""
        return self.tools()

    async def on_event(self, event: p.CallEvent) -> None:
        """One fact of the call (user turns, transcripts, what was heard, tool outcomes, call end).

        Called in the link's reader: return quickly (start longer work as a task of your own)."""

    async def on_error(self, error: p.ProtocolErrorMessage) -> None:
        """The server refused a frame of the brain's (``code``, ``field``), or the call could not carry
        out a command (``command`` names it): e.g. a ``say`` a newer turn overtook before it was said
        (``overtaken``), or one the call had no room for (``busy``).  Logged already; called in the
        link's reader: return quickly."""
    async def on_turn_request(self, request: p.TurnRequest) -> None:
        """The call asks for the reply to the caller's turn (only with ``answers_turns``): send it with
        :meth:`reply_line`, the last line ``final``.  Called in the link's reader: start the work as a
        task and return.  A reply whose first line does not come in time is answered by the agent
        file's model instead (docs/AGENT_PROTOCOL.md, "Brain mode")."""
        raise BrisvoxError(f"{type(self).__name__} declares answers_turns but does not override on_turn_request")

    async def reply_line(self, request_id: str, text: str, *, final: bool = False) -> None:
        """A piece of the reply to the ``turn.request`` ``request_id`` (spoken as the model's text
        would be); ``final`` ends the reply (``text`` may then be empty)."""
        await self._send("reply_line", p.Say(type="say", text=text, reply_to=request_id, final=final))

    async def on_app_event(self, answer: UiAnswer) -> None:
        """An app event from the caller's screen, validated by ``ui`` (never a turn, never spoken).

        Default: its note (the contract's ``on_event``) goes into the model's context."""
        if answer.note:
            await self.append_note(answer.note)

    async def say_line(self, text: str, *, interrupt: bool = False) -> None:
        """Have the call say ``text`` as a bot turn of its own (not a model request): when the caller
        and the bot are silent, or, with ``interrupt``, cutting the reply playing now.  The caller
        can barge in on it; the context keeps what they heard.  A line the call cannot say comes
        back as an ``error`` (``busy``, ``call_ended``); docs/AGENT_PROTOCOL.md, "Commands"."""
        await self._send("say_line", p.Say(type="say", text=text, interrupt=interrupt))

    async def end(self, farewell: str = "") -> None:
        """End the call once the bot is silent (after the reply playing now).  With ``farewell`` the
        server says it, then ends the call once it has played; a caller who speaks over it calls
        the end off (``error{called_off}``)."""
        await self._send("end", p.End(type="end", farewell=farewell))

    async def append_note(self, text: str) -> None:
        """Add ``text`` to the model's context without opening a turn (``context.update``)."""
        await self._send("append_note", p.ContextUpdate(type="context.update", note=text))

    def dispatch(self, action: BaseModel) -> None:
        """Put ``action`` (a declared :class:`~brisvox.transport.rtvi.ui.Action`) on the caller's
        screen and return at once; raises :class:`~brisvox.transport.rtvi.ui.UiError` when it
        cannot be sent (no contract, undeclared, the outbox full, the link closed)."""
        link = self._link
        if link is None or link.ui is None:
            why = "the brain is not serving a call" if link is None else \
                "the brain declares no UI contract (ui = UiContract(actions=...))"
            raise UiError(UiErrorKind.UNDECLARED if link is not None else UiErrorKind.NO_SCREEN,
                          f"{type(action).__name__} was not sent: {why}")
        link.ui.dispatch(action)

    def send_server_message(self, data: Any) -> None:
        """Send ``data`` (JSON, or a pydantic model) to the caller's page as RTVI ``server-message``
        (the JS client's ``onServerMessage``) and return at once: a ``ui.message`` frame, which
        needs no UI contract.  Raises :class:`~brisvox.transport.rtvi.ui.UiError` naming the bad
        value when ``data`` is not JSON, when the outbox is full, or when the brain serves no call;
        a call without a screen answers ``error{no_screen}``."""
        link = self._link
        if link is None:
            raise UiError(UiErrorKind.NO_SCREEN, "the server message was not sent: the brain is not serving a call")
        link.post_message(data)

    async def aclose(self) -> None:
        """The call's link ended: release what the brain holds (called once, after its tasks ended)."""

    async def _idle(self) -> None:
        """Wait until the brain's own work for the events so far is done (the conformance driver's hook)."""

    async def _send(self, what: str, message: p.AgentMessage) -> None:
        if self._link is None:
            raise BrisvoxError(f"{what}: the brain is not serving a call")
        await self._link.send(message)

    def _spawn(self, coro: Coroutine[Any, Any, None], name: str) -> asyncio.Task[None]:
        """A task owned by the call's session (cancelled when the link ends)."""
        if self._link is None:
            coro.close()
            raise BrisvoxError(f"{name}: the brain is not serving a call")
        return self._link.scope.spawn(coro, name=name)


def _spec(tool: FunctionTool) -> p.RemoteToolSpec:
    s = tool.spec
    return p.RemoteToolSpec(name=s.name, description=s.description, parameters=dict(s.parameters),
                            kind="side_effect" if s.is_side_effect else "read_only", timeout=s.timeout,
                            repeatable=s.repeatable)


class _Results:
    """Side-effect results by idempotency key, kept per call id across the links of one
    process, so a call whose link is reopened (``resume``) never runs a side effect twice.
    Bounded: 1024 keys per call, the 256 most recent calls."""

    CALLS = 256

    def __init__(self) -> None:
        self._calls: OrderedDict[str, OrderedDict[str, p.ToolResult]] = OrderedDict()

    def of(self, call_id: str) -> OrderedDict[str, p.ToolResult]:
        results = self._calls.pop(call_id, None)
        self._calls[call_id] = results = results if results is not None else OrderedDict()
        while len(self._calls) > self.CALLS:
            self._calls.popitem(last=False)
        return results

    def ended(self, call_id: str) -> None:
        self._calls.pop(call_id, None)


class _Session:
    def __init__(self, brain: Brain, wire: Wire, memory: _Results | None = None) -> None:
        self.brain = brain
        self.wire = wire
        self.clock = brain.clock
        self.tools = {t.name: t for t in brain.remote_tools()}
        self.memory = memory if memory is not None else _Results()
        self.results: OrderedDict[str, p.ToolResult] = OrderedDict()
        self.running: dict[str, asyncio.Task[p.ToolResult]] = {}  # by idempotency key: a repeat joins it
        self.outbox: Channel[str] = Channel(OUTBOX, name="brain outbox")
        self.scope = TaskScope("brain")
        self.ui: CallUi | None = None
        self.handler_failures = 0  # the brain's handlers that raised (logged; the conformance driver reads it)

    async def send(self, message: p.AgentMessage) -> None:
        await self.outbox.send(p.encode(message))

    def _post_ui(self, message: dict[str, Any]) -> bool:
        """The brain's CallUi's RTVI message, as the protocol's frame (``ui.command`` / ``ui.message``)."""
        data = message["data"]
        if message["type"] == "server-message":
            return self.outbox.try_send(p.encode(p.UiMessage(type="ui.message", data=data)))
        command = p.UiCommand(type="ui.command", command=data["command"], payload=data["payload"])
        return self.outbox.try_send(p.encode(command))

    def post_message(self, data: Any) -> None:
        """A ``ui.message`` without waiting (the brain's server message); raises UiError."""
        message = p.UiMessage(type="ui.message", data=server_message_data(data))
        try:
            queued = self.outbox.try_send(p.encode(message))
        except ChannelClosed:
            raise UiError(UiErrorKind.NO_SCREEN, "the server message was not sent: the link is closed") from None
        if not queued:
            raise UiError(UiErrorKind.QUEUE_FULL, "the server message was not sent: the brain's outbox is full")

    async def run(self) -> None:
        frame = await bounded(self.clock, START_TIMEOUT, self.wire.recv(), "the server's session.start")
        if frame is None:
            raise ConnectionError("the server closed the link before session.start")
        start = p.parse_server_message(frame)
        if not isinstance(start, p.SessionStart):
            raise p.ProtocolError(p.ErrorCode.UNEXPECTED, "type", f"expected session.start, got {start.type}")
        brain = self.brain
        brain.session = start
        brain._link = self
        self.results = self.memory.of(start.call_id)  # a reopened link keeps what the call's side effects returned
        if brain.ui is not None:
            self.ui = CallUi(brain.ui, self._post_ui, call_id=start.call_id)
        ready = p.Ready(type="ready", v=1, tools=tuple(_spec(t) for t in self.tools.values()), resume=brain.resume,
                        answers_turns=brain.answers_turns)
        try:
            await bounded(self.clock, SEND_TIMEOUT, self.wire.send(p.encode(ready)), "the brain's ready")
            self.scope.spawn(self._write(), name="writer")
            await self._read()
        finally:  # the link is gone: nothing could carry a result back
            self.outbox.abort()
            try:
                await self.scope.aclose()
            finally:
                await brain.aclose()

    async def _write(self) -> None:
        try:
            async for frame in self.outbox:
                await bounded(self.clock, SEND_TIMEOUT, self.wire.send(frame), "a frame to the server")
        except (DeadlineExceeded, ConnectionClosed, OSError):
            log.warning("brain: call %s: the link is lost (a frame did not go out)", self._call_id(), exc_info=True)
            self.outbox.abort()
            self.wire.abort()

    def _call_id(self) -> str:
        return self.brain.session.call_id if self.brain.session is not None else "?"

    async def _read(self) -> None:
        while (frame := await self.wire.recv()) is not None:
            try:
                message = p.parse_server_message(frame)
            except p.ProtocolError as exc:  # the server's bug or a newer server: this frame only is lost
                log.warning("brain: call %s: a frame from the server was refused: %s: %s", self._call_id(),
                            exc.code.value, exc)
                continue
            if isinstance(message, p.ToolCallRequest):
                self.scope.spawn(self._answer(message), name=f"tool-{message.name}")
            elif isinstance(message, p.CallEvent):
                if message.kind == "call_ended":
                    self.memory.ended(self._call_id())
                await self._hand(self.brain.on_event(message), f"on_event({message.kind})")
            elif isinstance(message, p.UiEvent):
                await self._app_event(message)
            elif isinstance(message, p.TurnRequest):
                await self._hand(self.brain.on_turn_request(message), "on_turn_request")
            elif isinstance(message, p.ProtocolErrorMessage):
                log.warning("brain: call %s: the server refused %s: %s%s", self._call_id(),
                            message.command or "a frame", message.code, f" ({message.field})" if message.field else "")
                await self._hand(self.brain.on_error(message), f"on_error({message.code})")

    async def _hand(self, handler: Coroutine[Any, Any, None], what: str) -> None:
        try:
            await handler
        except Exception:  # the brain's bug: logged with its traceback; the link and the call go on
            self.handler_failures += 1
            log.exception("brain: call %s: %s failed", self._call_id(), what)

    async def _app_event(self, message: p.UiEvent) -> None:
        if self.ui is None:
            log.warning("brain: call %s: app event %r ignored: the brain declares no UI contract",
                        self._call_id(), message.event)
            return
        try:
            answer = self.ui.receive(message.event, message.payload)
        except UiEventError as exc:
            log.warning("brain: call %s: app event refused: %s", self._call_id(), exc)
            return
        if not answer.stale:
            await self._hand(self.brain.on_app_event(answer), f"on_app_event({message.event})")

    async def _answer(self, request: p.ToolCallRequest) -> None:
        key = request.idempotency_key
        known = self.results.get(key)
        if known is None:
            running = self.running.get(key)
            if running is None:
                running = self.running[key] = self.scope.spawn(self._run_tool(request), name=f"run-{request.name}")
            try:
                known = await asyncio.shield(running)
            finally:
                self.running.pop(key, None)
            self.results[key] = known
            while len(self.results) > _REMEMBERED:
                self.results.popitem(last=False)
        answer = known.model_copy(update={"id": request.id})
        try:
            await self.send(answer)
        except ChannelClosed:
            log.warning("brain: the result of %s could not be sent: the link is closed", request.name)

    async def _run_tool(self, request: p.ToolCallRequest) -> p.ToolResult:
        tool = self.tools.get(request.name)
        if tool is None:
            return p.ToolResult(type="tool.result", id=request.id, ok=False, error="unknown_tool")
        session, _, rest = request.idempotency_key.partition("/")
        epoch_text, _, call_id = rest.partition("/")
        ctx = ToolCallContext(session=session, epoch=int(epoch_text) if epoch_text.isdigit() else 0,
                              call=ToolCall(id=call_id or request.id, name=request.name, arguments=request.arguments),
                              cancel=CancelToken(), ui=self.ui)
        try:
            result = await tool(dict(request.arguments), ctx)
        except ToolError as exc:
            return p.ToolResult(type="tool.result", id=request.id, ok=False, error=str(exc))
        except Exception:  # a bug in the tool: logged here with its traceback, the model reads a failure
            log.exception("brain: tool %s failed", request.name)
            return p.ToolResult(type="tool.result", id=request.id, ok=False, error="the tool failed")
        return p.ToolResult(type="tool.result", id=request.id, ok=True, result=result)


class _WsWire:
    def __init__(self, ws: ServerConnection) -> None:
        self._ws = ws

    async def send(self, frame: str) -> None:
        await self._ws.send(frame)

    async def recv(self) -> str | bytes | None:
        try:
            return await self._ws.recv()
        except ConnectionClosedOK:
            return None

    def abort(self) -> None:
        self._ws.transport.abort()


async def serve_wire(brain: Brain, wire: Wire, memory: _Results | None = None) -> None:
    """Serve one call's link on ``wire`` until it ends (what :func:`serve` does per connection;
    ``memory``: its side-effect results by call, shared by the links of one server)."""
    await _Session(brain, wire, memory).run()


async def serve(brain: Callable[[], Brain], host: str, port: int) -> Server:
    """Serve ``brain`` (a class, or a factory: one instance per call) on ``host:port``; close the returned server."""

    memory = _Results()  # a call's reopened link runs no side effect twice

    async def handler(ws: ServerConnection) -> None:
        try:
            await serve_wire(brain(), _WsWire(ws), memory)
        except (ConnectionClosed, OSError, p.ProtocolError, DeadlineExceeded):
            log.warning("brain: a call's link ended", exc_info=True)

    return await ws_serve(handler, host, port, ping_interval=None, max_size=p.MAX_MESSAGE_BYTES)
