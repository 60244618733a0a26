"""Real brisvox nodes and calls for the scale-out tests: ``brisvox serve`` processes on 127.0.0.1."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any

from brisvox.audio.wav import WavAudio
from brisvox.transport.websocket.client import ClientOptions, run

ROOT = Path(__file__).resolve().parents[2]
AGENT = '[agent]\nname = "node"\nprompt = "You answer briefly."\n[llm]\nprovider = "scripted"\n'
"""An agent with no model to load: the scripted host answers, the local STT and TTS hear and speak."""


class Node:
    """``brisvox serve`` on a free port; its output collected by reader threads."""

    def __init__(self, agent: Path, *, workers: int = 1, env: Mapping[str, str] | None = None) -> None:
        full = {**os.environ, "BRISVOX_PORT": "0", "BRISVOX_HOST": "127.0.0.1", "PYTHONPATH": str(ROOT / "src"),
                **dict(env or {})}
        self.proc = subprocess.Popen([sys.executable, "-m", "brisvox", "serve", "--workers", str(workers),
                                      str(agent)], env=full, cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.workers = workers
        self.out: list[str] = []
        self.err: list[str] = []
        self._listening = threading.Event()
        self._warm = threading.Semaphore(0)
        for stream, into in ((self.proc.stdout, self.out), (self.proc.stderr, self.err)):
            threading.Thread(target=self._read, args=(stream, into), daemon=True).start()

    def _read(self, stream: IO[str] | None, into: list[str]) -> None:
        assert stream is not None
        for line in stream:
            into.append(line)
            if "listening on" in line:
                self._listening.set()
            if "call providers warm" in line:
                self._warm.release()

    @property
    def url(self) -> str:
        """The node's URL once it listens and every worker's models are loaded (a first call on a busy
        machine would otherwise wait for them)."""
        assert self._listening.wait(90), self.log()
        while self.workers:
            assert self._warm.acquire(timeout=120), self.log()
            self.workers -= 1
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", "".join(self.out))
        assert m is not None, self.log()
        return m.group(1)

    @property
    def address(self) -> str:
        return self.url.removeprefix("http://")

    def log(self) -> str:
        return "".join(self.out) + "".join(self.err)

    def stop(self, timeout: float = 60.0) -> int:
        if self.proc.poll() is None:
            self.proc.terminate()
        return self.proc.wait(timeout=timeout)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@contextlib.contextmanager
def two_nodes(directory: Path) -> Iterator[tuple[Node, Node]]:
    """Two nodes serving :data:`AGENT`, killed on the way out whatever happened."""
    agent = directory / "node.toml"
    agent.write_text(AGENT)
    a, b = Node(agent), Node(agent)
    try:
        yield a, b
    finally:
        a.kill()
        b.kill()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a server that takes no port 0)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def readyz(url: str) -> dict[str, Any]:
    status, body = get(f"{url}/readyz")
    data: dict[str, Any] = json.loads(body)
    data["status"] = status
    return data


def until(what: str, check: Callable[[], Any], timeout: float = 60.0) -> Any:
    for _ in range(int(timeout / 0.1)):
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def metrics_with(url: str, *lines: str) -> str | None:
    text = get(f"{url}/metrics")[1].decode()
    return text if all(line in text for line in lines) else None


async def call(ws_url: str, seconds: float) -> bool:
    """One caller who stays silent for ``seconds`` and hangs up; True when the call ended cleanly."""
    audio = WavAudio(pcm=b"\0\0" * int(16000 * seconds), sample_rate=16000)
    result = await run(ClientOptions(url=ws_url, audio=audio, linger=0.2, connect_timeout=10.0))
    return result.ok


def call_now(url: str, seconds: float) -> bool:
    return asyncio.run(call(url.replace("http://", "ws://") + "/ws", seconds))


def calls_ended(node: Node) -> int:
    """The calls this node's engine ended, from its log (a stopped node has no /metrics)."""
    return sum(1 for line in node.err if re.search(r"call \S+ ended", line))


def balancer_up(url: str) -> bool:
    """Whether ``url`` (a load balancer) answers /readyz with 200 from a node."""
    try:
        return bool(readyz(url)["status"] == 200)
    except OSError:
        return False


async def calls_through(url: str, seconds: float, n: int, gap: float = 0.0) -> list[bool]:
    """``n`` calls of ``seconds`` to ``url``'s /ws, ``gap`` seconds apart; each one's :func:`call` result."""
    ws = url.replace("http://", "ws://") + "/ws"
    tasks = []
    for _ in range(n):
        tasks.append(asyncio.create_task(call(ws, seconds)))
        await asyncio.sleep(gap)
    return list(await asyncio.gather(*tasks))


def check_a_drain_behind(balancer: str, a: Node, b: Node) -> None:
    """Four long calls through ``balancer`` (two on each node, least connections), SIGTERM to ``a``,
    four short calls while it drains, the first before the balancer can know: every call ends
    cleanly, ``a`` finishes its two calls and exits 0 having taken none of the new ones, ``b``
    takes them all."""

    async def scenario() -> tuple[list[bool], list[bool]]:
        long = asyncio.create_task(calls_through(balancer, 6.0, 4))
        actives: list[int] = []
        for _ in range(100):  # the loop carries the calls: poll without blocking it
            actives = [(await asyncio.to_thread(readyz, n.url))["active"] for n in (a, b)]
            if actives == [2, 2]:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"calls per node: {actives}, not two on each")
        a.proc.terminate()  # SIGTERM: node a drains
        short = await calls_through(balancer, 1.0, 4, gap=0.4)
        return await long, short

    long, short = asyncio.run(scenario())
    assert long == [True] * 4 and short == [True] * 4
    assert a.proc.wait(timeout=30) == 0, a.log()  # drained: its calls ended on their own
    assert "stopped (drained, exit status 0)" in "".join(a.out)
    assert calls_ended(a) == 2, a.log()  # a took none of the new calls
    until("b's six calls ended", lambda: calls_ended(b) == 6)
