"""brisvox console, driven under a pty: streamed replies, tool calls and outcomes, barge-in by typing."""

from __future__ import annotations

import asyncio
import io
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from brisvox.testing import call
from tests.test_testing_call import flow_agent, menu_agent

SRC = Path(__file__).resolve().parents[1] / "src"

PROGRAM = '''
import sys
import brisvox
from brisvox.console import run_console
from brisvox.testing import call

@brisvox.tool.read_only
async def opening_hours(day: str) -> str:
    """When the restaurant is open on a day."""
    return "18:00 to 23:00"

agent = brisvox.Agent(name="host", prompt="You answer questions.", tools=[opening_hours])
story = "Once upon a time " + " ".join(f"there was a dish number {i}" for i in range(60)) + "."
llm = [[call("opening_hours", day="fri")], "We open at six on Friday.", story, "Sure, stopping there."]
sys.exit(run_console(agent, llm=llm, chars_per_second=150.0))
'''


class Pty:
    """A child process on a pseudo-terminal: read what it printed, type lines into it."""

    def __init__(self, code: str) -> None:
        self.fd, child = pty.openpty()
        env = {**os.environ, "PYTHONPATH": str(SRC)}
        self.proc = subprocess.Popen([sys.executable, "-c", code], stdin=child, stdout=child, stderr=child,
                                     env=env, close_fds=True)
        os.close(child)
        self.seen = ""

    def expect(self, text: str, timeout: float = 30.0) -> str:
        end = time.monotonic() + timeout  # the pty is real time: a subprocess on the wall clock
        while text not in self.seen:
            left = end - time.monotonic()
            if left <= 0:
                raise AssertionError(f"never printed {text!r}; printed:\n{self.seen}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                try:
                    self.seen += os.read(self.fd, 4096).decode("utf-8", "replace")
                except OSError:  # the child closed the terminal
                    raise AssertionError(f"exited before printing {text!r}; printed:\n{self.seen}") from None
        return self.seen

    def type(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())

    def close(self) -> int:
        try:
            return self.proc.wait(timeout=30)
        finally:
            os.close(self.fd)


@pytest.mark.realtime
def test_the_console_streams_replies_shows_tools_and_is_interrupted_by_typing() -> None:
    term = Pty(PROGRAM)
    try:
        term.expect("type a line and press Enter")
        term.type("when do you open on friday?")
        term.expect('[tool] opening_hours {"day": "fri"}')
        term.expect("[tool] opening_hours -> ok: 18:00 to 23:00")
        term.expect("agent: We open at six on Friday.")
        time.sleep(0.6)  # the reply is said (150 characters a second): the next line is a new turn
        term.type("tell me a story")
        term.expect("Once upon a time")
        term.type("stop")
        term.expect("[interrupted]")
        seen = term.expect("agent: Sure, stopping there.")
        term.type("/quit")
        term.expect("brisvox console: bye")
    finally:
        code = term.close()
    assert code == 0
    assert seen.count("[interrupted]") == 1 and "agent: Sure, stopping there." in seen.split("[interrupted]")[1]



class InProcess:
    """The console in this test's event loop (virtual time): lines typed once the previous reply was printed."""

    def __init__(self, agent: Any, llm: list[Any]) -> None:
        from brisvox.console import console
        from brisvox.core.clock import SimClock

        self.stdin, self.out, self.clock = asyncio.StreamReader(), io.StringIO(), SimClock()
        self.running = asyncio.ensure_future(console(agent, llm=llm, stdin=self.stdin, out=self.out,
                                                     chars_per_second=400.0))

    async def printed(self, text: str) -> str:
        for _ in range(500):
            if text in self.out.getvalue():
                return self.out.getvalue()
            await self.clock.sleep(0.05)
        raise AssertionError(f"never printed {text!r}; printed:\n{self.out.getvalue()}")

    def type(self, line: str) -> None:
        self.stdin.feed_data(line.encode() + b"\n")

    async def close(self) -> int:
        self.stdin.feed_eof()
        return await self.running


async def test_the_console_shows_flow_nodes_with_their_tools(tmp_path: Path) -> None:
    llm = [[call("check_availability", day="friday")], "Friday is free.", [call("book_table", day="friday")],
           "Booked."]
    term = InProcess(flow_agent(tmp_path), llm)
    await term.printed("[flow] -> collect (tools: check_availability)")
    term.type("is friday free?")
    seen = await term.printed("agent: Friday is free.")
    assert "[flow] -> confirm (tools: book_table)" in seen
    term.type("book it")
    seen = await term.printed("agent: Booked.")
    assert await term.close() == 0
    assert "[tool] book_table -> ok: booked" in seen


async def test_the_console_is_the_calls_screen() -> None:
    term = InProcess(menu_agent([]), [[call("show_menu", section="desserts")], "On your screen."])
    term.type("show me the desserts")
    seen = await term.printed("agent: On your screen.")
    assert await term.close() == 0
    assert '[screen] ShowMenu {"section":"desserts"}' in seen
