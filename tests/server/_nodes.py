"""Real brisvox nodes and calls for the scale-out tests: ``brisvox serve`` processes on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
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
