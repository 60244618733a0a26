"""Shared fixtures for the tool engine tests: scripted tools on the virtual clock."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from brisvox.agent.context import Context, ToolCall, ToolMessage
from brisvox.agent.tools.cancel import CancelToken
from brisvox.agent.tools.engine import ToolEngine, ToolEngineConfig
from brisvox.agent.tools.execution import Execution
from brisvox.agent.tools.registry import ToolCallContext, ToolError, ToolRegistry
from brisvox.agent.tools.spec import ToolKind, ToolSpec
from brisvox.core.clock import SimClock

RO = ToolKind.READ_ONLY
SE = ToolKind.SIDE_EFFECT

OPEN = {"type": "object"}


@dataclass
class Probe:
    """What the scripted tools saw: (event, tool, call id, time)."""

    clock: SimClock
    events: list[tuple[str, str, str, float]] = field(default_factory=list)
    contexts: list[ToolCallContext] = field(default_factory=list)

    def log(self, event: str, tool: str, call: str) -> None:
        self.events.append((event, tool, call, self.clock.now()))

    def count(self, event: str, tool: str | None = None) -> int:
        return sum(1 for e in self.events if e[0] == event and (tool is None or e[1] == tool))

    def times(self, event: str, tool: str | None = None) -> list[float]:
        return [e[3] for e in self.events if e[0] == event and (tool is None or e[1] == tool)]


def scripted(
    probe: Probe,
    name: str,
    delay: float = 0.0,
    result: Any = None,
    *,
    fail: str | None = None,
    crash: bool = False,
    crash_at_call: bool = False,
) -> Callable[[dict[str, Any], ToolCallContext], Any]:
    """A tool that sleeps ``delay`` on the virtual clock, then returns, fails or crashes."""

    async def tool(args: dict[str, Any], ctx: ToolCallContext) -> Any:
        probe.log("start", name, ctx.call.id)
        probe.contexts.append(ctx)
        try:
            await probe.clock.sleep(args.get("delay", delay) if isinstance(args.get("delay"), int | float) else delay)
        except BaseException:
            probe.log("cancelled", name, ctx.call.id)
            raise
        probe.log("end", name, ctx.call.id)
        if fail is not None:
            raise ToolError(fail)
        if crash:
            raise RuntimeError("boom with secret +90 555")
        return result if result is not None else {"tool": name, "call": ctx.call.id, "args": args}

    if crash_at_call:

        def sync_crash(args: dict[str, Any], ctx: ToolCallContext) -> Any:
            probe.log("start", name, ctx.call.id)
            raise RuntimeError("crash before the coroutine")

        return sync_crash
    return tool


def spec(name: str, kind: ToolKind = RO, timeout: float = 5.0, params: dict[str, Any] | None = None, **kw: Any) -> ToolSpec:
    return ToolSpec(name=name, description=f"{name} tool", parameters=params or OPEN, kind=kind, timeout=timeout, **kw)


def call(cid: str, name: str, **args: Any) -> ToolCall:
    return ToolCall(id=cid, name=name, arguments=args)


def engine(registry: ToolRegistry, clock: SimClock, **cfg: Any) -> ToolEngine:
    return ToolEngine(registry, "sess-1", clock, ToolEngineConfig(**cfg))


def body(msg: ToolMessage) -> Any:
    return json.loads(msg.content)


def kind(msg: ToolMessage) -> str | None:
    if not msg.is_error:
        return None
    return str(body(msg)["error"])


def push_calls(ctx: Context, calls: list[ToolCall], text: str = "") -> None:
    ctx.push_assistant(text, calls)


async def deliver_round(eng: ToolEngine, ctx: Context, calls: list[ToolCall], epoch: int) -> Execution:
    """Push the calls, execute them, append the execution: one tool round done right."""
    ctx.push_assistant(tool_calls=calls)
    ex = await eng.execute(calls, epoch, CancelToken())
    ex.append_to(ctx)
    return ex
