"""CPU per call-second of the Twilio and Telnyx transport paths against the generic WebSocket path.

50 simultaneous calls, each carrying ``--seconds`` of audio in both directions through the
adapter's real per-connection code (``run_call``: reader, writer, monitor) over an
in-process WebSocket stand-in (no sockets, no pacing: frames go as fast as the adapter
takes them, so the CPU is the adapter's own work):

* Twilio: caller audio as ``media`` JSON messages (base64 mu-law, 160 bytes per 20 ms)
  parsed, decoded and turned into PCM16 WireAudio; bot audio (PCM16 at 8 kHz) encoded to
  mu-law, cut into 160-byte pieces, base64, one ``media`` message each, plus the
  progress marks.
* Telnyx: the same work as Twilio in Telnyx's shapes (snake_case, string numbers), plus the
  reorder buffer's bookkeeping (frames arrive in order here, its fast path) and the chunk carry.
* WebSocket pcm16 16 kHz: binary frames in, binary frames out (the generic transport's
  zero-conversion path), and WebSocket mu-law 8 kHz (the same codec work as Twilio,
  without JSON and base64).

Caller audio goes through each transport's rate limit at an unreachable rate (``audio_rate``
1e6), so the check is paid but nothing is dropped (at the real rate, audio sent faster than
real time would be dropped and the calls end as floods).

Reports the median of ``--repeat`` runs of CPU seconds per call-second (process time /
(calls x seconds)) and the ratio to the pcm16 WebSocket path.  The transport core
(session, pacer) is not included: it is the same for every adapter.

    python bench/telephony.py [--calls 50] [--seconds 20] [--repeat 5]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any

from brisvox.core.clock import SystemClock
from brisvox.core.errors import ChannelClosed
from brisvox.core.frames import OutputAudioFrame
from brisvox.transport.events import WireAudioOut, WireHangupOut
from brisvox.transport.link import CallLink
from brisvox.transport.telephony import b64encode
from brisvox.transport.telnyx import CallRegistry, TelnyxConfig, TelnyxStats
from brisvox.transport.telnyx import run_call as run_telnyx
from brisvox.transport.twilio import TwilioConfig, TwilioStats
from brisvox.transport.twilio import run_call as run_twilio
from brisvox.transport.websocket import PeerClosed, ServerConfig, ServerStats
from brisvox.transport.websocket import run_call as run_ws


class _Peer:
    """A WebSocket stand-in: ``recv`` pops scripted client frames, ``send`` counts."""

    def __init__(self, frames: deque[bytes | str]) -> None:
        self.frames = frames
        self.sent = 0
        self.closed = False
        self.more = asyncio.Event()

    @property
    def remote(self) -> str:
        return "bench"

    async def recv(self) -> bytes | str:
        while not self.frames:
            if self.closed:
                raise PeerClosed(by_peer=True)
            self.more.clear()
            await self.more.wait()
        if len(self.frames) % 50 == 0:
            await asyncio.sleep(0)  # let the other calls run, as socket reads would
        return self.frames.popleft()

    async def send(self, data: bytes | str) -> None:
        if self.closed:
            raise PeerClosed(by_peer=False)
        self.sent += 1

    async def ping(self) -> Awaitable[object]:
        done: asyncio.Future[object] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done

    async def close(self, code: int, reason: str) -> None:
        self.closed = True
        self.more.set()

    def abort(self) -> None:
        self.closed = True
        self.more.set()


def _twilio_frames(seconds: float) -> deque[bytes | str]:
    sid = "MZ" + "0" * 32
    start = {"event": "start", "sequenceNumber": "1", "streamSid": sid, "start": {
        "accountSid": "AC1", "streamSid": sid, "callSid": "CA1", "tracks": ["inbound"], "customParameters": {},
        "mediaFormat": {"encoding": "audio/x-mulaw", "sampleRate": 8000, "channels": 1}}}
    frames: deque[bytes | str] = deque([json.dumps(start)])
    payload = b64encode(bytes(range(96, 256)))
    for i in range(int(seconds * 50)):
        frames.append(json.dumps({"event": "media", "sequenceNumber": str(i + 2), "streamSid": sid, "media": {
            "track": "inbound", "chunk": str(i + 1), "timestamp": str(i * 20), "payload": payload}}))
    return frames


def _telnyx_frames(seconds: float) -> deque[bytes | str]:
    stream = "32de0dea-53cb-4b21-89a4-9e1819c043bc"
    start = {"event": "start", "sequence_number": "1", "stream_id": stream, "start": {
        "call_control_id": "v3:bench", "call_session_id": "s1", "from": "+13122011111", "to": "+13122022222",
        "media_format": {"encoding": "PCMU", "sample_rate": 8000, "channels": 1}}}
    frames: deque[bytes | str] = deque([json.dumps({"event": "connected", "version": "1.0.0"}), json.dumps(start)])
    payload = b64encode(bytes(range(96, 256)))
    for i in range(int(seconds * 50)):
        frames.append(json.dumps({"event": "media", "sequence_number": str(i + 2), "stream_id": stream, "media": {
            "track": "inbound", "chunk": str(i + 1), "timestamp": str(i * 160), "payload": payload}}))
    return frames


def _ws_frames(seconds: float, encoding: str, rate: int) -> deque[bytes | str]:
    frame = bytes(range(96, 256)) if encoding == "mulaw" else b"\x10\x00" * (rate // 50)
    frames: deque[bytes | str] = deque([json.dumps({"type": "start", "sample_rate": rate, "encoding": encoding})])
    frames.extend(frame for _ in range(int(seconds * 50)))
    return frames


async def _call(kind: str, seconds: float) -> None:
    rate = 16000 if kind == "ws-pcm16" else 8000
    frames = (_twilio_frames(seconds) if kind == "twilio" else _telnyx_frames(seconds) if kind == "telnyx"
              else _ws_frames(seconds, "pcm16" if kind == "ws-pcm16" else "mulaw", rate))
    peer = _Peer(frames)
    clock = SystemClock()
    # no caller-audio rate limit: the scripted caller sends all its audio at once, which the limit
    # would end as a flood after 5 s; the bench measures the per-frame path, not the limit
    config = ServerConfig(ping_interval=60.0, ping_timeout=120.0, audio_rate=None)
    got: asyncio.Future[CallLink] = asyncio.get_running_loop().create_future()

    async def deliver(link: CallLink) -> bool:
        got.set_result(link)
        return True

    runner: Callable[..., Awaitable[None]]
    kwargs: dict[str, Any] = {"clock": clock, "config": config, "deliver": deliver, "shutdown": asyncio.Event()}
    if kind == "twilio":
        runner, kwargs = run_twilio, {**kwargs, "twilio": TwilioConfig(), "stats": TwilioStats()}
    elif kind == "telnyx":
        runner, kwargs = run_telnyx, {**kwargs, "telnyx": TelnyxConfig(), "stats": TelnyxStats(),
                                      "registry": CallRegistry()}
    else:
        runner, kwargs = run_ws, {**kwargs, "stats": ServerStats()}
    adapter = asyncio.ensure_future(runner(peer, **kwargs))
    link = await got

    async def drain() -> None:
        try:
            while True:
                await link.events.recv()
        except ChannelClosed:
            return

    async def speak() -> None:
        pcm = b"\x10\x00" * (rate // 50)
        for _ in range(int(seconds * 50)):
            await link.out.send(WireAudioOut(OutputAudioFrame(epoch=0, pcm=pcm, sample_rate=rate)))
        await link.out.send(WireHangupOut())

    drainer = asyncio.ensure_future(drain())
    await speak()
    await adapter
    drainer.cancel()
    await asyncio.gather(drainer, return_exceptions=True)


async def _run(kind: str, calls: int, seconds: float) -> float:
    cpu0 = time.process_time()
    await asyncio.gather(*(_call(kind, seconds) for _ in range(calls)))
    return (time.process_time() - cpu0) / (calls * seconds)


def _steps() -> dict[str, float]:
    """Microseconds per 20 ms message for each step of the Twilio hot path."""
    import timeit

    from brisvox.audio.g711 import ulaw_decode, ulaw_encode
    from brisvox.transport.telephony import b64decode
    from brisvox.transport.twilio import OutboundEncoder, parse_message

    text = _twilio_frames(0.02)[1]
    assert isinstance(text, str)
    msg: Any = parse_message(text)
    mulaw = b64decode(msg.payload)
    pcm = ulaw_decode(mulaw)
    enc = OutboundEncoder("MZ" + "0" * 32)
    steps: dict[str, Callable[[], object]] = {
        "parse (json)": lambda: parse_message(text),
        "decode (base64 + mu-law)": lambda: ulaw_decode(b64decode(msg.payload)),
        "encode (mu-law)": lambda: ulaw_encode(pcm),
        "build (base64 + message)": lambda: enc.media(mulaw),
    }
    return {name: min(timeit.repeat(fn, number=20000, repeat=3)) / 20000 * 1e6 for name, fn in steps.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--calls", type=int, default=50)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    kinds = ("ws-pcm16", "ws-mulaw", "twilio", "telnyx")
    results: dict[str, list[float]] = {k: [] for k in kinds}
    for _ in range(args.repeat):
        for kind in kinds:  # interleaved, so a noisy neighbour hits every path alike
            results[kind].append(asyncio.run(_run(kind, args.calls, args.seconds)))
    base = statistics.median(results["ws-pcm16"])
    print(f"{args.calls} calls x {args.seconds:g} s, median of {args.repeat}: CPU per call-second "
          f"(and the share of one core per call)")
    for kind in kinds:
        med = statistics.median(results[kind])
        print(f"  {kind:9s} {med * 1e3:7.3f} ms/s  ({med * 100:.2f} % of a core per call)  x{med / base:.2f} vs ws-pcm16")
    print("Twilio hot path, microseconds per 20 ms message (best of 3):")
    for name, us in _steps().items():
        print(f"  {name:26s} {us:6.2f} us")


if __name__ == "__main__":
    main()
