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

A SideEffect call is run at most once per idempotency key: a repeated ``tool.call`` with
a key already seen (a reopened link) is answered with the first result (bounded memory).
"""

from __future__ import annotations

import asyncio
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

from websockets.asyncio.server import Server, ServerConnection
from websockets.asyncio.server import serve as ws_serve
from websockets.exceptions import ConnectionClosed

from brisvox.agent.context import ToolCall
from brisvox.agent.tools import CancelToken, ToolCallContext, ToolError
from brisvox.core.errors import BrisvoxError
from brisvox.sdk import protocol as p
from brisvox.tool import FunctionTool

__all__ = ["Brain", "serve"]

log = logging.getLogger(__name__)

_REMEMBERED = 1024
"""Idempotency keys whose results a session remembers (oldest forgotten first)."""


class Brain:
    """Logic for one call (see the module docs).  Override :meth:`on_event` to follow the call.

    ``resume``: a lost link should be reopened by the server (the new session's ``session.start``
    has ``resume`` set; a new instance serves it)."""

    resume: ClassVar[bool] = False

    def __init__(self) -> None:
        self.session: p.SessionStart | None = None
        self._send: Callable[[str], Awaitable[None]] | None = None

    def tools(self) -> list[FunctionTool]:
        """The brain's tools, bound to this instance, in declaration order."""
        found: list[FunctionTool] = []
        for name in dict.fromkeys(n for klass in reversed(type(self).__mro__) for n in vars(klass)):
            attribute = getattr(self, name, None)
            if isinstance(attribute, FunctionTool):
                found.append(attribute)
        return found

    async def on_event(self, event: p.CallEvent) -> None:
        """One fact of the call (user turns, transcripts, what was heard, tool outcomes, call end)."""

    async def say_line(self, text: str, *, interrupt: bool = False) -> None:
        """Have the call say ``text`` as a bot turn of its own (not a model request): when the caller
        and the bot are silent, or, with ``interrupt``, cutting the reply playing now.  The caller
        can barge in on it; the context keeps what they heard.  A line the call cannot say comes
        back as an ``error`` (``busy``, ``call_ended``); docs/AGENT_PROTOCOL.md, "Commands"."""
        if self._send is None:
            raise BrisvoxError("say_line: the brain is not serving a call")
        await self._send(p.encode(p.Say(type="say", text=text, interrupt=interrupt)))


    async def end(self) -> None:
        """End the call once the bot is silent (after the reply playing now).  The protocol's ``end``
        may also carry a ``farewell``: the server says it, then ends the call once it has played,
        and a caller who speaks over it calls the end off (``error{called_off}``)."""
        if self._send is None:
            raise BrisvoxError("end: the brain is not serving a call")
        await self._send(p.encode(p.End(type="end")))


def _spec(tool: FunctionTool) -> p.RemoteToolSpec:
    s = tool.spec
    return p.RemoteToolSpec(name=s.name, description=s.description, parameters=dict(s.parameters),
                            kind="side_effect" if s.is_side_effect else "read_only", timeout=s.timeout,
                            repeatable=s.repeatable)


class _Session:
    def __init__(self, brain: Brain, ws: ServerConnection) -> None:
        self.brain = brain
        self.ws = ws
        self.tools = {t.name: t for t in brain.tools()}
        self.results: OrderedDict[str, p.ToolResult] = OrderedDict()
        self.running: dict[str, asyncio.Task[p.ToolResult]] = {}  # by idempotency key: a repeat joins it
        self.tasks: set[asyncio.Task[None]] = set()

    async def run(self) -> None:
        start = p.parse_server_message(await self.ws.recv())
        if not isinstance(start, p.SessionStart):
            raise p.ProtocolError(p.ErrorCode.UNEXPECTED, "type", f"expected session.start, got {start.type}")
        self.brain.session = start
        self.brain._send = self.ws.send
        ready = p.Ready(type="ready", v=1, tools=tuple(_spec(t) for t in self.tools.values()),
                        resume=self.brain.resume)
        await self.ws.send(p.encode(ready))
        try:
            async for frame in self.ws:
                message = p.parse_server_message(frame)
                if isinstance(message, p.ToolCallRequest):
                    task = asyncio.create_task(self._answer(message), name=f"brain-tool-{message.name}")
                    self.tasks.add(task)
                    task.add_done_callback(self.tasks.discard)
                elif isinstance(message, p.CallEvent):
                    await self.brain.on_event(message)
                elif isinstance(message, p.ProtocolErrorMessage):
                    log.warning("brain: the server refused a message: %s (%s)", message.code, message.field)
        finally:  # the link is gone: nothing could carry a result back
            owned: list[asyncio.Task[Any]] = []
            owned.extend(self.tasks)
            owned.extend(self.running.values())
            for future in owned:
                future.cancel()
            await asyncio.gather(*owned, return_exceptions=True)

    async def _answer(self, request: p.ToolCallRequest) -> None:
        key = request.idempotency_key
        known = self.results.get(key)
        if known is None:
            running = self.running.get(key)
            if running is None:
                running = self.running[key] = asyncio.create_task(self._run_tool(request))
            try:
                known = await asyncio.shield(running)
            finally:
                self.running.pop(key, None)
            self.results[key] = known
            while len(self.results) > _REMEMBERED:
                self.results.popitem(last=False)
        answer = known.model_copy(update={"id": request.id})
        try:
            await self.ws.send(p.encode(answer))
        except ConnectionClosed:
            log.warning("brain: the result of %s could not be sent: the link is closed", request.name)

    async def _run_tool(self, request: p.ToolCallRequest) -> p.ToolResult:
        tool = self.tools.get(request.name)
        if tool is None:
            return p.ToolResult(type="tool.result", id=request.id, ok=False, error="unknown_tool")
        session, _, rest = request.idempotency_key.partition("/")
        epoch_text, _, call_id = rest.partition("/")
        ctx = ToolCallContext(session=session, epoch=int(epoch_text) if epoch_text.isdigit() else 0,
                              call=ToolCall(id=call_id or request.id, name=request.name, arguments=request.arguments),
                              cancel=CancelToken())
        try:
            result = await tool(dict(request.arguments), ctx)
        except ToolError as exc:
            return p.ToolResult(type="tool.result", id=request.id, ok=False, error=str(exc))
        except Exception:  # a bug in the tool: logged here with its traceback, the model reads a failure
            log.exception("brain: tool %s failed", request.name)
            return p.ToolResult(type="tool.result", id=request.id, ok=False, error="the tool failed")
        return p.ToolResult(type="tool.result", id=request.id, ok=True, result=result)


async def serve(brain: Callable[[], Brain], host: str, port: int) -> Server:
    """Serve ``brain`` (a class, or a factory: one instance per call) on ``host:port``; close the returned server."""

    async def handler(ws: ServerConnection) -> None:
        try:
            await _Session(brain(), ws).run()
        except (ConnectionClosed, p.ProtocolError):
            log.warning("brain: a call's link ended", exc_info=True)

    return await ws_serve(handler, host, port, ping_interval=None, max_size=p.MAX_MESSAGE_BYTES)
