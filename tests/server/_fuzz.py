"""Hostile clients against a real server: the shared part of the fuzz test and ``bench/fuzz_server.py``.

:class:`FuzzServer` runs ``tests.server._fuzz_serve`` (the real app under uvicorn as
``brisvox serve`` runs it, echo engine) in a subprocess with its log in a file.
:data:`sessions` generates one client's life: a first message (a valid ``start`` or
something else), a list of messages (audio of any size and parity, documented control
messages, arbitrary JSON, text, JSON nested thousands deep, text that is not UTF-8,
oversized messages, pings) and an ending (``stop``, a close frame, a dropped socket), or
a raw TCP pattern (garbage, a cut request head, random bytes after the upgrade).
:func:`play` plays one against the server and checks what came back against the tables of
``docs/WEBSOCKET_PROTOCOL.md`` (read from the file, so the test follows the docs).
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st
from websockets.exceptions import ConnectionClosed, InvalidHandshake
from websockets.sync.client import ClientConnection, connect

ROOT = Path(__file__).resolve().parents[2]
PROTOCOL_DOC = ROOT / "docs" / "WEBSOCKET_PROTOCOL.md"

# --- what the docs allow ---------------------------------------------------------------------


def _table_after(heading: str) -> list[list[str]]:
    text = PROTOCOL_DOC.read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| ") and not line.startswith("| ---")]


def documented_errors() -> set[str]:
    return {row[0].strip("`") for row in _table_after("Errors")[1:]}


def documented_close_codes() -> set[int]:
    return {int(row[0]) for row in _table_after("Close codes")[1:]}


# a client whose socket the fuzzer drops logs its own "unexpected internal error": not the server's
logging.getLogger("websockets.client").setLevel(logging.CRITICAL)

SERVER_TYPES = {"started", "clear", "mark", "stop", "error", "event"}

# --- the server ------------------------------------------------------------------------------

FUZZ_ENV = {
    "BRISVOX_HOST": "127.0.0.1", "BRISVOX_PORT": "0", "BRISVOX_LOG_LEVEL": "warning",
    "BRISVOX_START_TIMEOUT": "0.5", "BRISVOX_HANDSHAKE_TIMEOUT": "1", "BRISVOX_MAX_CALLS": "64",
}


class FuzzServer:
    """The server under attack, in a subprocess; ``log()`` is everything it logged."""

    def __init__(self, **env: str) -> None:
        self._log = tempfile.NamedTemporaryFile("w+", suffix=".log", delete=False)  # noqa: SIM115
        self._out = tempfile.NamedTemporaryFile("w+", suffix=".out", delete=False)  # noqa: SIM115
        full = {**os.environ, **FUZZ_ENV, **env, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{ROOT}"}
        self.proc = subprocess.Popen([sys.executable, "-m", "tests.server._fuzz_serve"], cwd=ROOT, env=full,
                                     stdout=self._out, stderr=self._log, text=True)
        deadline = time.monotonic() + 60
        while (m := re.search(r"listening on http://127\.0\.0\.1:(\d+)", Path(self._out.name).read_text())) is None:
            assert self.proc.poll() is None and time.monotonic() < deadline, self.log()
            time.sleep(0.05)
        self.port = int(m.group(1))
        self.url = f"ws://127.0.0.1:{self.port}/ws"

    def log(self) -> str:
        return Path(self._log.name).read_text()

    def rss_kib(self) -> int:
        status = Path(f"/proc/{self.proc.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]

    def get(self, path: str) -> tuple[int, str]:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{self.port}{path}", timeout=5) as r:
                return r.status, r.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def stop(self) -> int:
        self.proc.terminate()
        try:
            return self.proc.wait(30)
        finally:
            for f in (self._log, self._out):
                f.close()
                os.unlink(f.name)

    def __enter__(self) -> FuzzServer:
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.stop()


# --- what a client does ----------------------------------------------------------------------

RATES = (8000, 16000, 24000, 48000)

_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
_types = st.sampled_from(["start", "dtmf", "mark", "stop", "wiggle", "", "DTMF", "event"])


_controls = st.one_of(
    st.builds(lambda digit: {"type": "dtmf", "digit": digit},
              st.sampled_from(list("0123456789ABCD*#")) | st.text(max_size=3)),
    st.builds(lambda i: {"type": "mark", "id": i}, st.text(max_size=300)),
    st.builds(lambda t, extra: {"type": t, **extra}, _types, st.dictionaries(st.text(max_size=8), _json, max_size=3)),
    _json,
)

Msg = tuple[str, Any]

def _weighted(usual: st.SearchStrategy[Any], rare: st.SearchStrategy[Any], p: float) -> st.SearchStrategy[Any]:
    """``rare`` with probability about ``p`` (one_of would merge repeated branches)."""
    n = round(1 / p)
    return st.integers(1, n).flatmap(lambda i: rare if i == 1 else usual)


_benign: st.SearchStrategy[Msg] = st.one_of(
    st.tuples(st.just("audio"), st.binary(min_size=1, max_size=1920)),
    st.tuples(st.just("audio"), st.integers(1, 30).map(lambda n: bytes(640 * n))),
    st.tuples(st.just("json"), _controls),
    st.tuples(st.just("text"), st.text(max_size=200)),
    st.tuples(st.just("deep"), st.integers(9, 5000)),
    st.tuples(st.just("ping"), st.binary(max_size=125)),
)
_fatal: st.SearchStrategy[Msg] = st.one_of(
    st.tuples(st.just("bad_utf8"), st.sampled_from([b"\xff", b"\xc3\x28", b"ok\xed\xa0\x80"])),
    st.tuples(st.just("big_text"), st.integers(8193, 20000)),
    st.tuples(st.just("big_audio"), st.integers(65537, 70000)),
)
# a message that ends the call is rarer, so most sessions play most of their messages
messages: st.SearchStrategy[Msg] = _weighted(_benign, _fatal, 1 / 30)

_start_fields = st.fixed_dictionaries({"type": st.just("start")}, optional={
    "encoding": st.sampled_from(["pcm16", "mulaw", "alaw", "opus"]),
    "sample_rate": st.sampled_from(RATES) | st.integers(-1, 100_000),
    "call_id": st.none() | st.text(max_size=140),
    "metadata": st.dictionaries(st.text(max_size=70), st.text(max_size=20), max_size=34) | _json,
})
_valid_start = st.builds(lambda enc, rate: {"type": "start", "encoding": enc, "sample_rate": rate},
                         st.sampled_from(["pcm16", "mulaw"]), st.sampled_from(RATES))

_odd_firsts: st.SearchStrategy[Msg] = st.one_of(
    st.tuples(st.just("json"), _start_fields),
    st.tuples(st.just("json"), _json),
    st.tuples(st.just("text"), st.text(max_size=100)),
    st.tuples(st.just("audio"), st.binary(min_size=1, max_size=100)),
    st.tuples(st.just("deep"), st.integers(9, 5000)),
    st.tuples(st.just("bad_utf8"), st.just(b"\xff")),
    st.tuples(st.just("big_text"), st.integers(8193, 20000)),
)
# two sessions in three start a call, so most messages reach a live call
firsts: st.SearchStrategy[Msg] = _weighted(st.tuples(st.just("json"), _valid_start), _odd_firsts, 1 / 3)


@dataclass(frozen=True)
class Session:
    first: Msg
    messages: list[Msg]
    end: str  # stop, close, drop
    raw: bytes | None = None  # a raw TCP pattern instead of a WebSocket client


def sessions(min_messages: int = 25, max_messages: int = 40) -> st.SearchStrategy[Session]:
    ws = st.builds(Session, firsts, st.lists(messages, min_size=min_messages, max_size=max_messages),
                   st.sampled_from(["stop", "stop", "close", "drop"]))
    raw = st.builds(lambda kind, data: Session(("raw", kind), [], "drop", data),
                    st.sampled_from(["garbage", "cut_head", "after_upgrade"]), st.binary(min_size=1, max_size=512))
    return _weighted(ws, raw, 1 / 10)


@dataclass
class Tally:
    sessions: int = 0
    messages: int = 0
    closes: Counter[int | None] = field(default_factory=Counter)
    errors: Counter[str] = field(default_factory=Counter)


def _payload(kind: str, value: Any) -> tuple[str | bytes, bool | None]:
    """The frame for one message: (data, text flag for websockets' send)."""
    if kind == "audio":
        return bytes(value), None
    if kind == "json":
        return json.dumps(value), None
    if kind == "text":
        return str(value), None
    if kind == "deep":
        return "[" * int(value), None
    if kind == "bad_utf8":
        return bytes(value), True
    if kind == "big_text":
        return "x" * int(value), None
    if kind == "big_audio":
        return bytes(int(value)), None
    raise AssertionError(kind)


def _send(ws: ClientConnection, msg: Msg) -> None:
    kind, value = msg
    if kind == "ping":
        ws.ping(os.urandom(4) + bytes(value)[:121])  # the client library refuses two pings with one payload
        return
    data, text = _payload(kind, value)
    ws.send(data, text=text)


def _check_text(text: str, errors: set[str], tally: Tally) -> None:
    msg = json.loads(text)
    assert isinstance(msg, dict) and msg.get("type") in SERVER_TYPES, text
    if msg["type"] == "error":
        assert msg["code"] in errors, f"undocumented error {msg}"
        assert isinstance(msg["fatal"], bool) and isinstance(msg["message"], str), msg
        tally.errors[msg["code"]] += 1


def play(url: str, session: Session, tally: Tally) -> None:
    """Play one session; assert that everything the server sent is documented."""
    errors, codes = documented_errors(), documented_close_codes()
    tally.sessions += 1
    if session.raw is not None:
        _raw(url, session.first[1], session.raw)
        tally.messages += 1
        return
    # generous timeouts: on a busy machine a slow answer is not a missing one
    with connect(url, compression=None, open_timeout=10, close_timeout=10, max_size=None,
                 ping_interval=None, max_queue=None) as ws:
        sent_ok = True
        sent = 0
        for msg in [session.first, *session.messages]:
            try:
                _send(ws, msg)
                tally.messages += 1
                sent += 1
            except ConnectionClosed:
                sent_ok = False
                break
        if session.end == "drop":
            with contextlib.suppress(OSError):  # the server may have closed it first
                ws.socket.shutdown(socket.SHUT_RDWR)
            ws.socket.close()
            tally.closes[None] += 1
            return
        if sent_ok:
            try:
                if session.end == "stop":
                    ws.send(json.dumps({"type": "stop"}))
                    tally.messages += 1
                else:
                    ws.close()
            except ConnectionClosed:
                pass
        try:
            while True:
                got = ws.recv(timeout=10)
                if isinstance(got, str):
                    _check_text(got, errors, tally)
        except ConnectionClosed:
            pass
        rcvd = ws.protocol.close_rcvd
        code = rcvd.code if rcvd is not None else None
        tally.closes[code] += 1
        assert code in codes, (f"close code {code} is not documented ({session.first}, end {session.end}, "
                               f"sent {sent}, {ws.protocol.state}, {ws.protocol.close_sent}, "
                               f"{getattr(ws, 'recv_exc', None)!r} {ws.protocol.close_exc!r} "
                               f"{ws.protocol.close_exc.__cause__!r})")


def _raw(url: str, kind: str, data: bytes) -> None:
    port = int(url.rsplit(":", 1)[1].split("/", 1)[0])
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        if kind == "garbage":
            sock.sendall(data + b"\r\n\r\n")
        elif kind == "cut_head":
            sock.sendall(b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websock" + data[:8])
        else:
            key = base64.b64encode(os.urandom(16)).decode()
            sock.sendall((f"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                          f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
            head = b""
            while b"\r\n\r\n" not in head:
                chunk = sock.recv(4096)
                if not chunk:
                    return
                head += chunk
            sock.sendall(data)
        sock.settimeout(3)
        try:
            while sock.recv(65536):
                pass
        except (TimeoutError, ConnectionResetError):
            pass


def healthy(server: FuzzServer) -> None:
    """/healthz answers and a normal call runs: start, audio echoed, stop, close 1000."""
    assert server.get("/healthz") == (200, "ok\n")
    try:
        with connect(server.url, compression=None, open_timeout=5, close_timeout=2) as ws:
            ws.send(json.dumps({"type": "start", "sample_rate": 16000}))
            assert json.loads(ws.recv(timeout=5))["type"] == "started"
            ws.send(b"\x01\x02" * 320)
            assert ws.recv(timeout=5) == b"\x01\x02" * 320
            ws.send(json.dumps({"type": "stop"}))
            assert json.loads(ws.recv(timeout=5)) == {"type": "stop", "reason": "ended"}
            with contextlib.suppress(ConnectionClosed):
                ws.recv(timeout=5)
            assert ws.protocol.close_rcvd is not None and ws.protocol.close_rcvd.code == 1000
    except InvalidHandshake as exc:
        raise AssertionError(f"a normal call was refused: {exc}") from None


def no_traceback(server: FuzzServer) -> None:
    log = server.log()
    assert "Traceback" not in log and " ERROR " not in log, log[-4000:]
