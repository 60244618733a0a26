"""The spec's three tool scenarios at the S2S adapter level: a scripted vendor and a minimal driver.

The driver is the adapter-level twin of the engine's S2S stage (``brisvox.engine.run_s2s_call``): it answers the tool calls of each
model response through the real :class:`ToolEngine` (one epoch per user turn), sends the results
in call order and asks for one response.  The vendor side is a loopback server speaking each
vendor's wire format (``Vendor`` implementations live in the adapter tests).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from websockets.asyncio.server import ServerConnection

from brisvox.agent.context import ToolCall
from brisvox.agent.tools import CancelToken, ToolCallContext, ToolEngine, ToolKind, ToolRegistry, ToolSpec
from brisvox.core.clock import Clock, SimClock
from brisvox.providers.s2s import (
    S2sConfig,
    S2sEvent,
    S2sInteractionEnded,
    S2sProvider,
    S2sResponseDone,
    S2sSession,
    S2sToolCall,
    S2sToolResult,
)

from ._fake_ws import FakeWsServer

Call = tuple[str, str, dict[str, Any]]  # vendor call id, tool name, arguments

PARALLEL: list[list[Call]] = [
    [
        ("c1", "lookup", {"what": "a", "delay": 0.3}),
        ("c2", "lookup", {"what": "b", "delay": 0.1}),
        ("c3", "lookup", {"what": "c", "delay": 0.2}),
    ]
]
CHAIN: list[list[Call]] = [
    [("c1", "lookup", {"what": "country", "delay": 0.1})],
    [("c2", "lookup", {"what": "capital", "delay": 0.1})],
    [("c3", "lookup", {"what": "weather", "delay": 0.1})],
]
BOOKING = {"name": "Ada", "time": "19:00"}
REPEATED_BOOKING: list[list[Call]] = [[("b1", "book_table", BOOKING)], [("b2", "book_table", BOOKING)]]


@dataclass
class Tools:
    clock: Clock
    started: list[tuple[str, float]] = field(default_factory=list)
    finished: list[tuple[str, float]] = field(default_factory=list)
    bookings: list[str] = field(default_factory=list)

    def registry(self) -> ToolRegistry:
        registry = ToolRegistry()
        lookup_schema = {
            "type": "object",
            "properties": {"what": {"type": "string"}, "delay": {"type": "number"}},
            "required": ["what", "delay"],
        }
        registry.register(
            ToolSpec(name="lookup", description="Look something up.", parameters=lookup_schema, kind=ToolKind.READ_ONLY),
            self.lookup,
        )
        booking_schema = {
            "type": "object",
            "properties": {"name": {"type": "string"}, "time": {"type": "string"}},
            "required": ["name", "time"],
            "additionalProperties": False,
        }
        registry.register(
            ToolSpec(name="book_table", description="Book a table.", parameters=booking_schema, kind=ToolKind.SIDE_EFFECT),
            self.book_table,
        )
        return registry

    async def lookup(self, args: dict[str, Any], ctx: ToolCallContext) -> Any:
        self.started.append((args["what"], self.clock.now()))
        await self.clock.sleep(args["delay"])
        self.finished.append((args["what"], self.clock.now()))
        return {"what": args["what"], "answer": f"{args['what']}-value"}

    async def book_table(self, args: dict[str, Any], ctx: ToolCallContext) -> Any:
        self.bookings.append(f"BK-{1001 + len(self.bookings)}")
        return {"booking": self.bookings[-1]}


async def drive(session: S2sSession, engine: ToolEngine, *, epoch: int = 1) -> list[S2sEvent]:
    """Answer every response's calls through the engine until the model ends the interaction."""
    seen: list[S2sEvent] = []
    pending: list[S2sToolCall] = []
    seq = 0
    async for event in session:
        seen.append(event)
        if isinstance(event, S2sToolCall):
            pending.append(event)
        elif isinstance(event, S2sResponseDone) and pending:
            calls = []
            for c in pending:
                calls.append(ToolCall(id=f"t{epoch}.{seq}", name=c.name, arguments=c.arguments, provider_id=c.call_id))
                seq += 1
            execution = await engine.execute(calls, epoch, CancelToken())
            results = [
                S2sToolResult(call_id=call.provider_id or call.id, name=call.name, content=msg.content, is_error=msg.is_error)
                for call, msg in zip(calls, execution.results, strict=True)
            ]
            await session.send_tool_results(results)
            await session.request_response()
            execution.mark_delivered()
            pending = []
        elif isinstance(event, S2sInteractionEnded):
            return seen
    return seen


class Vendor(Protocol):
    """The vendor side of a scenario: handshake, send a round's calls, read our answer."""

    async def handshake(self, ws: ServerConnection) -> None: ...

    async def send_calls(self, ws: ServerConnection, calls: Sequence[Call]) -> None: ...

    async def read_answer(self, ws: ServerConnection) -> list[dict[str, Any]]:
        """Every message we sent for one round, up to and including what makes the model go on."""
        ...

    async def finish(self, ws: ServerConnection) -> None: ...


@dataclass
class Script:
    vendor: Vendor
    rounds: list[list[Call]]
    answers: list[list[dict[str, Any]]] = field(default_factory=list)
    trailing: list[dict[str, Any]] = field(default_factory=list)  # what we sent after the last answer

    async def __call__(self, ws: ServerConnection, up: object) -> None:
        await self.vendor.handshake(ws)
        for calls in self.rounds:
            await self.vendor.send_calls(ws, calls)
            self.answers.append(await self.vendor.read_answer(ws))
        await self.vendor.finish(ws)
        async for raw in ws:
            self.trailing.append(json.loads(raw))


@dataclass
class Outcome:
    script: Script
    tools: Tools
    seen: list[S2sEvent]
    elapsed: float  # virtual seconds from the connect to the end of the interaction


async def run_scenario(
    vendor: Vendor, provider: Callable[[str, Clock], S2sProvider], rounds: list[list[Call]], *, input_rate: int = 24_000
) -> Outcome:
    """One scenario: the vendor's script on a loopback server, the adapter and the tool engine on our side."""
    clock = SimClock()
    tools = Tools(clock)
    registry = tools.registry()
    script = Script(vendor, rounds)
    async with FakeWsServer(script) as server, ToolEngine(registry, "call-1", clock) as engine:
        session = await provider(server.url, clock).connect(S2sConfig(tools=registry.specs(), input_rate=input_rate))
        async with session:
            start = clock.now()
            seen = await drive(session, engine)
            elapsed = clock.now() - start
        for _ in range(20):  # let the server read up to the close
            await asyncio.sleep(0)
    return Outcome(script, tools, seen, elapsed)
