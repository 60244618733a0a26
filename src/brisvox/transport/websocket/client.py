"""The reference client of the generic WebSocket protocol (``brisvox-ws-client``).

It plays a caller: sends a mono PCM16 WAV in 20 ms frames (on an absolute real-time
grid, or as fast as the socket takes them with ``--no-realtime``), records what it hears
to a WAV and behaves like a phone's playout buffer: received audio plays from a playout
cursor; a ``clear`` drops what has not played yet (it is cut from the recording) and
forgets pending marks; a ``mark`` is echoed once the audio received before it has
played.  After the input it listens for ``--linger-ms``, then sends ``stop`` and waits for
the server's goodbye.  The server's messages are applied in one place
(:meth:`_Call.on_server`), and receiving runs in its own task, so a long send never
starves the receive side.

``--token`` (or ``BRISVOX_TOKEN``) is sent as ``Authorization: Bearer <token>`` to a server
that requires authentication.

Exit codes: 0 the call ended cleanly; 1 the call failed (refused, fatal error, lost
connection, over ``--max-duration``; the recording is still written); 2 usage or input
errors (bad options, missing or invalid WAV, unwritable output).

    brisvox-ws-client ws://127.0.0.1:8765/ws --input in.wav --output heard.wav
    python -m brisvox.transport.websocket.client ...
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from websockets.asyncio.client import ClientConnection, connect
from websockets.exceptions import ConnectionClosed, InvalidHandshake, InvalidStatus

from brisvox.audio.codec import AudioEncoding
from brisvox.audio.g711 import ulaw_decode, ulaw_encode
from brisvox.audio.wav import WavAudio, read_wav, write_wav
from brisvox.core.clock import Clock, SystemClock, bounded
from brisvox.core.errors import DeadlineExceeded, InvalidInput
from brisvox.core.tasks import TaskScope

__all__ = ["ClientOptions", "ClientResult", "main", "run"]

FRAME_SECONDS = 0.02


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientOptions:
    url: str
    audio: WavAudio
    encoding: AudioEncoding = AudioEncoding.PCM16
    realtime: bool = True
    dtmf: str = ""
    metadata: dict[str, str] = field(default_factory=dict)
    linger: float = 1.0
    max_duration: float = 600.0
    connect_timeout: float = 5.0
    close_timeout: float = 3.0
    token: str | None = field(default=None, repr=False)
    """Sent as ``Authorization: Bearer <token>`` (a server with BRISVOX_AUTH set needs one)."""


@dataclass(slots=True)
class ClientResult:
    recording: bytearray = field(default_factory=bytearray)
    sample_rate: int = 0
    call_id: str | None = None
    marks_echoed: list[str] = field(default_factory=list)
    marks_dropped: int = 0
    clears: int = 0
    errors: list[dict[str, Any]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)  # the server's "event" messages (the engine's)
    stop_reason: str | None = None
    close_code: int | None = None
    failure: str | None = None

    @property
    def ok(self) -> bool:
        return self.failure is None


class _Call:
    """The client's state; ``on_server`` applies every server message."""

    def __init__(self, clock: Clock, ws: ClientConnection, opts: ClientOptions, result: ClientResult) -> None:
        self.clock = clock
        self.ws = ws
        self.opts = opts
        self.result = result
        self.rate = opts.audio.sample_rate
        self.playout_end = clock.now()
        self.chunks: list[tuple[float, int]] = []  # (play start, offset in the recording)
        self.marks: list[tuple[float, str]] = []
        self.marks_changed = asyncio.Event()
        self.input_done = False

    def _fail(self, why: str) -> None:
        if self.result.failure is None:
            self.result.failure = why

    def on_audio(self, data: bytes) -> None:
        pcm = ulaw_decode(data) if self.opts.encoding is AudioEncoding.MULAW else data
        now = self.clock.now()
        start = max(now, self.playout_end)
        self.chunks.append((start, len(self.result.recording)))
        if len(self.chunks) > 512:
            self.chunks = [c for c in self.chunks if c[0] > now - 1.0] or self.chunks[-1:]
        self.result.recording += pcm
        self.playout_end = start + len(pcm) / (2 * self.rate)

    def on_server(self, text: str) -> None:
        try:
            msg = json.loads(text)
            kind = msg["type"]
        except (ValueError, KeyError, TypeError):
            self._fail("the server sent an unreadable message")
            return
        if kind == "clear":
            self.result.clears += 1
            self._clear()
        elif kind == "mark":
            self.marks.append((max(self.clock.now(), self.playout_end), str(msg.get("id", ""))))
            self.marks_changed.set()
        elif kind == "stop":
            self.result.stop_reason = str(msg.get("reason"))
        elif kind == "event":
            self.result.events.append(msg)
        elif kind == "error":
            self.result.errors.append(msg)
            if msg.get("fatal"):
                self._fail(f"fatal error from the server: {msg.get('code')}: {msg.get('message')}")

    def _clear(self) -> None:
        """Drop what has not played yet (the recording keeps what was heard) and the pending marks."""
        now = self.clock.now()
        rec = self.result.recording
        if self.playout_end > now:
            keep = len(rec)
            for start, offset in reversed(self.chunks):
                if start >= now:
                    keep = offset
                else:
                    played = int((now - start) * self.rate) * 2
                    keep = min(keep, offset + played)
                    break
            del rec[keep:]
        self.chunks.clear()
        self.playout_end = now
        self.result.marks_dropped += len(self.marks)
        self.marks.clear()
        self.marks_changed.set()

    async def receiver(self) -> None:
        try:
            async for message in self.ws:
                if isinstance(message, bytes):
                    self.on_audio(message)
                else:
                    self.on_server(message)
        except ConnectionClosed:
            pass
        finally:
            rcvd = self.ws.protocol.close_rcvd
            self.result.close_code = rcvd.code if rcvd is not None else 1006
            if self.result.close_code != 1000 and self.result.close_code != 1001:
                self._fail(f"the connection closed with {self.result.close_code}")
            elif self.result.close_code == 1001:
                self._fail("the server shut down during the call")

    async def marker(self) -> None:
        """Echo each mark once the audio before it has played."""
        while True:
            if not self.marks:
                self.marks_changed.clear()
                await self.marks_changed.wait()
                continue
            due, mark_id = self.marks[0]
            if due > self.clock.now():
                self.marks_changed.clear()
                try:
                    await bounded(self.clock, due - self.clock.now(), self.marks_changed.wait(), "mark wait")
                    continue  # cleared or a new mark: look again
                except DeadlineExceeded:
                    pass
            if self.marks and self.marks[0] == (due, mark_id):
                self.marks.pop(0)
                try:
                    await self.ws.send(json.dumps({"type": "mark", "id": mark_id}))
                    self.result.marks_echoed.append(mark_id)
                except ConnectionClosed:
                    return

    async def sender(self) -> None:
        opts, clock = self.opts, self.clock
        step = int(self.rate * FRAME_SECONDS) * 2
        pcm = opts.audio.pcm
        try:
            for digit in opts.dtmf:
                await self.ws.send(json.dumps({"type": "dtmf", "digit": digit}))
            t0 = clock.now()
            for i, off in enumerate(range(0, len(pcm), step)):
                if opts.realtime:
                    await clock.sleep_until(t0 + i * FRAME_SECONDS)
                chunk = pcm[off:off + step]
                await self.ws.send(ulaw_encode(chunk) if opts.encoding is AudioEncoding.MULAW else chunk)
            self.input_done = True
            await clock.sleep(opts.linger)
            await self.ws.send(json.dumps({"type": "stop"}))
        except ConnectionClosed:
            return


async def run(opts: ClientOptions, clock: Clock | None = None) -> ClientResult:
    """One call; never raises for a failed call (see ``ClientResult.failure``)."""
    clock = clock or SystemClock()
    result = ClientResult(sample_rate=opts.audio.sample_rate)
    headers = {"Authorization": f"Bearer {opts.token}"} if opts.token else None
    try:
        ws = await bounded(clock, opts.connect_timeout,
                           connect(opts.url, compression=None, open_timeout=None, ping_interval=None,
                                   close_timeout=opts.close_timeout, max_size=None, additional_headers=headers),
                           "connect")
    except InvalidStatus as exc:
        why = exc.response.body.decode("utf-8", "replace").strip()[:200] if exc.response.body else ""
        result.failure = f"the server refused the connection: HTTP {exc.response.status_code}" + (
            f" ({why})" if why else "")
        return result
    except (OSError, InvalidHandshake, DeadlineExceeded) as exc:
        result.failure = f"could not connect to {opts.url}: {exc}"
        return result
    try:
        start = {"type": "start", "encoding": opts.encoding.value, "sample_rate": opts.audio.sample_rate,
                 "metadata": opts.metadata}
        await ws.send(json.dumps(start))
        first = await bounded(clock, opts.connect_timeout, ws.recv(), "started")
        reply = json.loads(first) if isinstance(first, str) else {}
        if reply.get("type") != "started":
            result.errors.append(reply)
            result.failure = f"the server refused the start: {reply.get('code')}: {reply.get('message')}"
            return result
        result.call_id = reply.get("call_id")
        call = _Call(clock, ws, opts, result)
        try:
            await bounded(clock, opts.max_duration, _talk(call), "call")
        except DeadlineExceeded:
            result.failure = f"the call ran over --max-duration ({opts.max_duration:g} s)"
    except ConnectionClosed as exc:
        result.close_code = exc.rcvd.code if exc.rcvd is not None else 1006
        result.failure = result.failure or f"the connection closed with {result.close_code}"
    except DeadlineExceeded as exc:
        result.failure = str(exc)
    finally:
        await ws.close()
    return result


async def _talk(call: _Call) -> None:
    async with TaskScope("ws-client") as scope:
        receiver = scope.spawn(call.receiver(), name="receiver")
        sender = scope.spawn(call.sender(), name="sender")
        marker = scope.spawn(call.marker(), name="marker")
        await receiver  # the call is over when the server closes
        sender.cancel()
        marker.cancel()


# --- command line --------------------------------------------------------------------------


class _UsageError(Exception):
    pass


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="brisvox-ws-client", description="Call a brisvox WebSocket endpoint.")
    p.add_argument("url", help="ws://host:port/path")
    p.add_argument("--input", required=True, help="mono PCM16 WAV to send")
    p.add_argument("--output", required=True, help="WAV to record what the client hears")
    p.add_argument("--encoding", choices=["pcm16", "mulaw"], default="pcm16")
    p.add_argument("--no-realtime", action="store_true", help="send the input as fast as possible")
    p.add_argument("--dtmf", default="", help="digits to press after the call starts (0-9 A-D * #)")
    p.add_argument("--meta", action="append", default=[], metavar="KEY=VALUE", help="start metadata")
    p.add_argument("--linger-ms", type=int, default=1000, help="listen this long after the input (ms)")
    p.add_argument("--max-duration", type=float, default=600.0, help="fail the call after this many seconds")
    p.add_argument("--token", default=None,
                   help="token for a server that requires one (sent as Authorization: Bearer; default: "
                        "$BRISVOX_TOKEN)")
    p.add_argument("--events", default=None, metavar="PATH",
                   help="write the server's event messages (transcripts, tool calls) to PATH as JSON lines")
    return p


def _options(args: argparse.Namespace) -> ClientOptions:
    meta: dict[str, str] = {}
    for item in args.meta:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise _UsageError(f"--meta {item!r}: expected KEY=VALUE")
        meta[key] = value
    if args.linger_ms < 0:
        raise _UsageError(f"--linger-ms {args.linger_ms}: must be >= 0")
    if not args.max_duration > 0:
        raise _UsageError(f"--max-duration {args.max_duration}: must be positive")
    if any(d not in "0123456789ABCD*#" for d in args.dtmf):
        raise _UsageError(f"--dtmf {args.dtmf!r}: digits are 0-9, A-D, * and #")
    if not args.url.startswith(("ws://", "wss://")):
        raise _UsageError(f"url {args.url!r}: expected ws:// or wss://")
    if not os.path.isfile(args.input):
        raise _UsageError(f"--input {args.input}: no such file")
    try:
        audio = read_wav(args.input)
    except InvalidInput as exc:
        raise _UsageError(f"--input: {exc}") from None
    out_dir = os.path.dirname(os.path.abspath(args.output))
    if not os.path.isdir(out_dir) or not os.access(out_dir, os.W_OK) or (
            os.path.exists(args.output) and not os.access(args.output, os.W_OK)):
        raise _UsageError(f"--output {args.output}: cannot write there")
    return ClientOptions(url=args.url, audio=audio, encoding=AudioEncoding(args.encoding),
                         realtime=not args.no_realtime, dtmf=args.dtmf, metadata=meta,
                         linger=args.linger_ms / 1000, max_duration=args.max_duration,
                         token=args.token or os.environ.get("BRISVOX_TOKEN") or None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:
        return int(exc.code or 0) if exc.code in (0, 2) else 2
    try:
        opts = _options(args)
    except _UsageError as exc:
        print(f"brisvox-ws-client: error: {exc}", file=sys.stderr)
        return 2
    result = asyncio.run(run(opts))
    try:
        write_wav(args.output, bytes(result.recording), result.sample_rate)
    except OSError as exc:
        print(f"brisvox-ws-client: error: --output {args.output}: {exc}", file=sys.stderr)
        return 2
    if args.events is not None:
        try:
            with open(args.events, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(event) + "\n" for event in result.events)
        except OSError as exc:
            print(f"brisvox-ws-client: error: --events {args.events}: {exc}", file=sys.stderr)
            return 2
    heard = len(result.recording) / (2 * result.sample_rate)
    if result.failure is not None:
        print(f"brisvox-ws-client: call failed: {result.failure} (recorded {heard:.2f} s)", file=sys.stderr)
        return 1
    print(f"call {result.call_id}: recorded {heard:.2f} s, {len(result.marks_echoed)} marks echoed, "
          f"{result.clears} clears, stop={result.stop_reason}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
