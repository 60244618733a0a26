"""The agent protocol across processes (slow, real time): ``brisvox serve`` and an SDK brain, each a
subprocess on 127.0.0.1, and a caller on the server's WebSocket (espeak-ng speech).

The server's agent file uses the mock speech-to-text (every turn reads "a table for two on friday
at seven"), the scripted restaurant host as its model (it calls ``check_availability``, which only
the brain declares, as a SideEffect: it holds the table while it looks) and the mock text-to-speech.
The brain answers with an alternative only it knows (21:15), so the bot's words show where the
answer came from.  The brain process is killed mid-call (the call goes on under the agent file: the
host says it found no table), then started again on the same port: the server reopens the link (the
brain declared resume) and the brain answers again.  Last, the brain's check is made slow and the
caller barges in while it runs: it runs once in the brain's process, and the server reports it once
(``interrupted`` at the barge-in, then its ``late_result``; the model's second identical call in the
new turn is answered from the one still running, not run again).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import IO, Any

import pytest
from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosedOK

from brisvox.core.clock import SystemClock, bounded
from brisvox.core.tasks import TaskScope
from tests._speech import espeak_wav

pytestmark = [pytest.mark.realtime, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
ENV = {**{k: v for k, v in os.environ.items() if k != "BRISVOX_AGENT_FILE"}, "PYTHONPATH": str(ROOT / "src"),
       "BRISVOX_HOST": "127.0.0.1", "BRISVOX_PORT": "0"}
RATE = 16000
FRAME = RATE // 50 * 2  # 20 ms of PCM16

BRAIN = '''
import asyncio, sys
from pathlib import Path
from typing import Any
from pydantic import BaseModel
import brisvox
from brisvox.sdk import Brain, serve

class Ask(BaseModel):
    date: str
    time: str
    party_size: int

SLOW = Path(sys.argv[2])  # while this file exists, a check takes 5 s

class Host(Brain):
    resume = True

    @brisvox.tool.side_effect(timeout=10.0)
    async def check_availability(self, args: Ask, ctx: brisvox.ToolContext) -> dict[str, Any]:
        """Whether a table is free at a time (it is held while the check runs)."""
        assert self.session is not None
        print(f"check resume={self.session.resume} ran {ctx.call.id}", flush=True)
        if SLOW.exists():
            await asyncio.sleep(5.0)  # the agent's own slow work: the caller barges in meanwhile
        print(f"done {ctx.call.id}", flush=True)
        return {"free": False, "date": args.date, "time": args.time, "alternatives": ["21:15"]}

    async def on_event(self, event: Any) -> None:
        if event.kind == "tool_settled":
            print(f"settled {event.tool} {event.outcome}", flush=True)

async def main() -> None:
    server = await serve(Host, "127.0.0.1", int(sys.argv[1]))
    print("serving", flush=True)
    await server.serve_forever()

asyncio.run(main())
'''

AGENT = '''
[agent]
name = "host"
prompt = "You take table bookings."

[stt]
provider = "mock"
options = {{ final_latency = 0.1, text = "a table for two on friday at seven" }}

[llm]
provider = "scripted"

[tts]
provider = "mock"
options = {{ first_audio = 0.05, chars_per_second = 60 }}

[turn]
policy = "fixed_silence"
silence = 0.4

[agent_link]
url = "ws://127.0.0.1:{port}"
connect_timeout = 2
reopen_attempts = 60
'''


class Proc:
    """A subprocess whose output lines are collected as they come."""

    def __init__(self, args: list[str], env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(args, env=env if env is not None else ENV, cwd=ROOT, text=True, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, args=(self.proc.stdout,), daemon=True)
        self._reader.start()

    def _read(self, stream: IO[str] | None) -> None:
        assert stream is not None
        for line in stream:
            self.lines.append(line)

    async def wait_for(self, pattern: str, clock: SystemClock, seconds: float = 60.0) -> re.Match[str]:
        for _ in range(int(seconds / 0.05)):
            if (m := re.search(pattern, "".join(self.lines))) is not None:
                return m
            if self.proc.poll() is not None:
                break
            await clock.sleep(0.05)
        raise AssertionError(f"{pattern!r} not seen:\n{self.text()}")

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
        try:
            self.proc.wait(timeout=30)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self._reader.join(5)

    def text(self) -> str:
        return "".join(self.lines)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Caller:
    """The caller: 20 ms frames in real time (silence unless speaking) and the server's events."""

    def __init__(self, ws: ClientConnection, clock: SystemClock, speech: bytes) -> None:
        self.ws, self.clock, self.speech = ws, clock, speech
        self.events: list[dict[str, Any]] = []
        self._pending = bytearray()
        self.hung_up = False  # set before the caller's stop: the server's close then ends the sending

    def say(self) -> int:
        """Start saying the request; the index of the next event."""
        self._pending += self.speech
        return len(self.events)

    async def send(self) -> None:
        start = self.clock.now()
        for n in range(1 << 30):
            chunk = bytes(self._pending[:FRAME]) or bytes(FRAME)
            del self._pending[:FRAME]
            try:
                await self.ws.send(chunk)
            except ConnectionClosedOK:
                if self.hung_up:  # the close answering our stop can come before the sender is cancelled
                    return
                raise
            await self.clock.sleep_until(start + (n + 1) * 0.02)

    async def receive(self) -> None:
        async for message in self.ws:
            if isinstance(message, str) and (event := json.loads(message)).get("type") == "event":
                self.events.append(event)

    async def event(self, since: int, match: Callable[[dict[str, Any]], bool], seconds: float = 20.0) -> dict[str, Any]:
        """The first event since ``since`` that ``match`` holds for."""
        for _ in range(int(seconds / 0.05)):
            if found := [e for e in self.events[since:] if match(e)]:
                return found[0]
            await self.clock.sleep(0.05)
        raise AssertionError(f"no such event: {self.events[since:]}")

    async def bot_says(self, since: int, done: Callable[[str], bool], seconds: float = 20.0) -> str:
        """The bot's words since event ``since``, once ``done`` holds for them."""
        for _ in range(int(seconds / 0.05)):
            text = "".join(e.get("text", "") for e in self.events[since:] if e.get("kind") == "bot_text")
            if done(text) and any(e.get("kind") == "bot_done" for e in self.events[since:]):
                await self.clock.sleep(1.5)  # the reply plays out before the caller speaks again
                return text
            await self.clock.sleep(0.05)
        raise AssertionError(f"the bot did not say it: {self.events[since:]}")


async def serving(server: Proc, clock: SystemClock) -> str:
    """The ``host:port`` of a ``brisvox serve`` process, once its providers are warm."""
    url = (await server.wait_for(r"listening on http://(127\.0\.0\.1:\d+)", clock)).group(1)
    await server.wait_for("call providers warm", clock)
    return url


@contextlib.asynccontextmanager
async def calling(url: str, clock: SystemClock, speech: bytes) -> AsyncIterator[Caller]:
    """A call on the server's WebSocket at ``url`` with a caller who says ``speech``; stopped at the end."""
    async with connect(f"ws://{url}/ws", ping_interval=None) as ws, TaskScope("caller") as scope:
        await ws.send(json.dumps({"type": "start", "encoding": "pcm16", "sample_rate": RATE, "metadata": {}}))
        started = json.loads(await bounded(clock, 10.0, ws.recv(), "started"))
        assert started["type"] == "started", started
        caller = Caller(ws, clock, speech)
        scope.spawn(caller.receive(), name="receive")
        scope.spawn(caller.send(), name="send")
        yield caller
        caller.hung_up = True
        await ws.send(json.dumps({"type": "stop"}))
        await bounded(clock, 10.0, ws.wait_closed(), "the call's end")
        scope.cancel()


def launch(tmp_path: Path, brain_file: Path, code: str, port: int, env: dict[str, str] | None = None,
           args: tuple[str, ...] = ()) -> tuple[Proc, Proc]:
    """The brain process (``code`` at ``brain_file``, serving on ``port``, then ``args``) and ``brisvox serve``
    linked to it."""
    brain_file.write_text(code)
    agent_file = tmp_path / "host.toml"
    agent_file.write_text(AGENT.format(port=port))
    brain = Proc([sys.executable, str(brain_file), str(port), *args], env=env)
    return brain, Proc([sys.executable, "-m", "brisvox", "serve", str(agent_file), "--workers", "1"])


async def test_a_served_call_answers_from_the_brain_survives_its_death_resumes_and_reports_a_barged_in_side_effect_once(
        tmp_path: Path) -> None:
    clock = SystemClock()
    speech = espeak_wav("a table for two on friday at seven", tmp_path, speed=200, lead=0.1, trail=0.0).pcm
    brain_file, port = tmp_path / "brain.py", free_port()
    slow = tmp_path / "slow"
    brain, server = launch(tmp_path, brain_file, BRAIN, port, args=(str(slow),))
    restarted: Proc | None = None
    try:
        await brain.wait_for("serving", clock)
        async with calling(await serving(server, clock), clock, speech) as caller:
            first = await caller.bot_says(caller.say(), lambda t: "21:15" in t)  # the brain's answer
            assert "taken" in first
            brain.stop(signal.SIGKILL)  # the agent process dies mid-call
            fallback = await caller.bot_says(caller.say(), lambda t: "fully booked" in t)
            assert "21:15" not in fallback  # the call went on under the agent file: the tool failed, was said

            restarted = Proc([sys.executable, str(brain_file), str(port), str(slow)])
            await restarted.wait_for("serving", clock)
            again = ""
            for _ in range(3):  # the server retries the link every 2 s at most
                again = await caller.bot_says(caller.say(), lambda t: "21:15" in t or "fully booked" in t)
                if "21:15" in again:
                    break
            assert "21:15" in again, caller.events

            slow.touch()  # the brain's next check takes 5 s: the caller barges in while it runs
            since = caller.say()
            call = await caller.event(since, lambda e: e["kind"] == "tool_call" and e["name"] == "check_availability")
            await clock.sleep(0.5)
            caller.say()
            await caller.event(since, lambda e: e["kind"] == "interrupted")
            await caller.bot_says(since, lambda t: "fully booked" in t)  # the new turn's: "still running"
            await restarted.wait_for(f"done {call['id']}\n", clock)
            # The late result goes into the context when the next turn starts (the model's next request).
            await caller.bot_says(caller.say(), lambda t: "fully booked" in t)
        assert "check resume=False" in brain.text()
        assert "check resume=True" in restarted.text()  # the reopened link said it resumes
        # The barged-in side effect ran once in the agent's process and finished there ...
        assert restarted.text().count(f"ran {call['id']}\n") == 1, restarted.text()
        assert restarted.text().count(f"done {call['id']}\n") == 1, restarted.text()
        assert restarted.text().count("ran ") == 2, restarted.text()  # the restarted brain's two checks
        # ... and the server reported it once: cut off at the barge-in, then its late result.
        outcomes = [e["outcome"] for e in caller.events if e["kind"] == "tool_result" and e["id"] == call["id"]]
        assert outcomes == ["interrupted", "late_result"], caller.events
        settled = re.findall(r"settled check_availability (\w+)", restarted.text())
        assert settled.count("interrupted") == 1 and settled.count("late_result") == 1, settled
    finally:
        for proc in (brain, restarted, server):
            if proc is not None:
                proc.stop()
    assert "agent link lost; reopening" in server.text()
    assert "agent link reopened" in server.text()
