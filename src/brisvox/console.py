"""``brisvox console``: talk to an agent in a terminal by typing.

Each line typed is a turn of its own.  The reply is printed as it streams, each tool call
as it starts (``[tool] name {arguments}``) and its outcome as it settles
(``[tool] name -> outcome: result``), each UI action a tool dispatches (the terminal is the
call's screen: ``[screen] Kind {fields}``), and with a flow each node entered with the
tools it offers (``[flow] -> node (tools: a, b)``; the first node is printed at the start).  A line typed while the agent answers interrupts it,
as speech would: the reply stops where the caller "heard" it (its voice is the mock one,
silent, taking the time the text would take to say) and ``[interrupted]`` is printed.
End with an empty line at the start, ``/quit`` or end of input (Ctrl-D).

It runs the agent in the real engine through :class:`brisvox.testing.AgentTest` on the
system clock, with the agent's own LLM (or ``llm``: scripted responses, for a demo or a
test) and its own tools.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Sequence
from typing import TextIO

from pydantic import BaseModel

from brisvox.core.clock import SystemClock
from brisvox.engine import events as ev
from brisvox.providers.llm import LlmProvider
from brisvox.server.agent import Agent
from brisvox.testing import AgentTest, Response

__all__ = ["SPEAKING_RATE", "console", "run_console"]

SPEAKING_RATE = 14.0  # characters per second: the time a reply takes to say, the window to interrupt it
_MAX_LINE = 4096


class _Printer:
    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.mid_reply = False
        self.epoch = 0  # the current turn's: a reply it interrupted prints no more

    def write(self, text: str) -> None:
        self.out.write(text)
        self.out.flush()

    def line(self, text: str) -> None:
        if self.mid_reply:
            self.write("\n")
            self.mid_reply = False
        self.write(text + "\n")

    def node(self, name: str, tools: Sequence[str]) -> None:
        self.line(f"  [flow] -> {name} (tools: {', '.join(tools) or 'none'})")

    def screen(self, action: BaseModel) -> None:
        self.line(f"  [screen] {type(action).__name__} {action.model_dump_json()}")

    def __call__(self, event: ev.EngineEvent) -> None:
        if isinstance(event, ev.TurnStarted):
            self.epoch = max(self.epoch, event.epoch)
        elif event.epoch < self.epoch:
            return  # the rest of an interrupted reply (already cut) or its late events
        if isinstance(event, ev.BotText):
            if not self.mid_reply:
                self.write("agent: ")
                self.mid_reply = True
            self.write(event.text)
        elif isinstance(event, ev.BotDone):
            if self.mid_reply:
                self.write("\n")
                self.mid_reply = False
        elif isinstance(event, ev.ToolCallStarted):
            shown = json.dumps(dict(event.parsed)) if event.parsed is not None else event.arguments
            self.line(f"  [tool] {event.name} {shown}")
        elif isinstance(event, ev.ToolCallSettled):
            self.line(f"  [tool] {event.name} -> {event.outcome.value}: {event.content}")
        elif isinstance(event, ev.FlowEntered):
            self.node(event.node, event.tools)
        elif isinstance(event, ev.TurnStarted) and event.barge_in:
            self.line("  [interrupted]")
        elif isinstance(event, ev.EngineFailure):
            self.line(f"  [failure] {event.stage}: {event.error}")


async def console(agent: Agent, *, llm: Sequence[Response] | LlmProvider | None = None,
                  stdin: asyncio.StreamReader | None = None, out: TextIO | None = None,
                  chars_per_second: float = SPEAKING_RATE) -> int:
    """Run the console until the input ends; returns the exit status.  ``chars_per_second``:
    how fast the (silent) voice says a reply, the window in which typing interrupts it."""
    printer = _Printer(out if out is not None else sys.stdout)
    loop = asyncio.get_running_loop()
    if stdin is None:
        stdin = asyncio.StreamReader(limit=_MAX_LINE)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(stdin), sys.stdin)
    printer.line(f"brisvox console: agent {agent.name!r} (type a line and press Enter; /quit ends)")
    async with AgentTest(agent, llm=llm, clock=SystemClock(), on_event=printer,
                         chars_per_second=chars_per_second, screen=printer.screen) as call:
        if call.node is not None:
            printer.node(call.node, call.offered)
        while True:
            raw = await stdin.readline()
            text = raw.decode("utf-8", "replace").strip()
            if not raw or text == "/quit":
                break
            if text:
                await call.user_says(text, wait=False)
    printer.line("brisvox console: bye")
    return 0


def run_console(agent: Agent, *, llm: Sequence[Response] | LlmProvider | None = None,
                chars_per_second: float = SPEAKING_RATE) -> int:
    """:func:`console` in its own event loop (the ``brisvox console`` command)."""
    try:
        return asyncio.run(console(agent, llm=llm, chars_per_second=chars_per_second))
    except KeyboardInterrupt:
        return 130
