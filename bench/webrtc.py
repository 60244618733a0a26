"""WebRTC (aiortc) calls against WebSocket calls in the same run: codec cost, CPU and memory per
call, and the latency each transport adds.

* ``codec``: median microseconds per 20 ms frame of our Opus encoder (mono, what the outbound
  track runs in the default executor), aiortc's (stereo, the peer it replaced) and aiortc's
  decoder (the receiver's thread), both off the event loop; of what stays on the loop (our
  conversions: 48 kHz stereo -> 16 kHz mono in, 24 kHz -> 48 kHz frames out; wrapping a
  payload in a packet); and of a new encoder (each clear makes one).
* ``load``: a server in a child process (``brisvox serve``'s app: WHIP + the WebSocket route,
  the transport's echo engine) and 1, 10, 30 calls from this process, each sending a tone in
  real time for ``--seconds`` and reading the echo.  Reports the server's CPU per
  call-second and its RSS growth per call, WebRTC and WebSocket side by side.
* ``latency``: one call per transport, in process: the time from the client handing a frame
  to its transport until the engine's session gets it, and from the engine's send until the
  client has the frame, medians over ``--bursts`` onsets (the WebRTC figure includes Opus, the
  next packet aiortc's jitter buffer waits for on each side (prefetch 1, the server's setting;
  a browser's NetEQ decides its own), and the outbound track's 20 ms grid).

    python bench/webrtc.py [codec|load|latency|all] [--seconds 10] [--calls 1,10,30] [--bursts 20]
"""

from __future__ import annotations

import argparse
import asyncio
import fractions
import io
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections import deque
from typing import Any

import av
import numpy as np
from aiortc import RTCConfiguration, RTCPeerConnection, RTCSessionDescription
from aiortc.codecs.opus import OpusDecoder, OpusEncoder
from aiortc.jitterbuffer import JitterBuffer, JitterFrame
from aiortc.mediastreams import MediaStreamError, MediaStreamTrack

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _procutil import cpu_seconds, read_port, write_port
from brisvox.core.clock import SystemClock, bounded
from brisvox.core.frames import OutputAudioFrame
from brisvox.transport import CallerAudio, SendAudio, TransportSession
from brisvox.transport.link import CallLink
from brisvox.transport.webrtc import WebRtcConfig, WebRtcStats, answer_offer, host_addresses
from brisvox.transport.webrtc.media import InboundAudio, OutboundAudio
from brisvox.transport.webrtc.opus import OpusEncoder as OurOpusEncoder

RATE = 16000
FRAME_16K = RATE // 50
TONE = (np.sin(2 * np.pi * 440 * np.arange(48000) / 48000) * 8000).astype("<i2")


def _tone(rate: int, samples: int) -> bytes:
    return (np.sin(2 * np.pi * 440 * np.arange(samples) / rate) * 8000).astype("<i2").tobytes()


def _audio_frame(pcm: bytes, pts: int) -> av.AudioFrame:
    frame = av.AudioFrame.from_ndarray(np.frombuffer(pcm, dtype="<i2").reshape(1, -1), format="s16", layout="mono")
    frame.sample_rate = 48000
    frame.pts = pts
    frame.time_base = fractions.Fraction(1, 48000)
    return frame


# --- codec -------------------------------------------------------------------------------------


def codec(frames: int = 2000) -> dict[str, float]:
    ours, peer, dec = OurOpusEncoder(), OpusEncoder(), OpusDecoder()
    pcm48 = TONE[:960].tobytes()
    timings: dict[str, list[float]] = {"opus_encode": [], "aiortc_encode": [], "opus_decode": [],
                                       "inbound_convert": [], "outbound_convert": [], "packet_build": [],
                                       "encoder_reset": []}
    inbound, outbound = InboundAudio(RATE), OutboundAudio(capacity=10_000)
    pcm24 = _tone(24000, 480)
    for i in range(frames):
        t = time.perf_counter()
        payload = ours.encode(pcm48)
        timings["opus_encode"].append(time.perf_counter() - t)
        t = time.perf_counter()
        packet = av.Packet(payload)
        packet.pts = i * 960
        packet.time_base = fractions.Fraction(1, 48000)
        timings["packet_build"].append(time.perf_counter() - t)
        frame = _audio_frame(pcm48, i * 960)
        t = time.perf_counter()
        peer.encode(frame)
        timings["aiortc_encode"].append(time.perf_counter() - t)
        t = time.perf_counter()
        decoded = dec.decode(JitterFrame(data=payload, timestamp=i * 960))
        timings["opus_decode"].append(time.perf_counter() - t)
        stereo = bytes(decoded[0].planes[0])[:decoded[0].samples * 4]
        t = time.perf_counter()
        inbound.feed(stereo, channels=2, pts=i * 960)
        timings["inbound_convert"].append(time.perf_counter() - t)
        t = time.perf_counter()
        outbound.push(pcm24, 24000)
        outbound.take()
        timings["outbound_convert"].append(time.perf_counter() - t)
        if i % 10 == 0:
            t = time.perf_counter()
            OurOpusEncoder()
            timings["encoder_reset"].append(time.perf_counter() - t)
    return {k: statistics.median(v) * 1e6 for k, v in timings.items()}


# --- a client peer -------------------------------------------------------------------------------


class _Mic(MediaStreamTrack):
    """A microphone playing a tone (or a scheduled burst) in real time."""

    kind = "audio"

    def __init__(self, tone: bool = True) -> None:
        super().__init__()
        self.tone = tone
        self.bursts: deque[float] = deque()  # loop times of frames handed to aiortc with sound
        self.burst_next = False
        self._next: float | None = None
        self._pts = 0

    async def recv(self) -> av.AudioFrame:
        if self.readyState != "live":
            raise MediaStreamError
        clock = SystemClock()
        now = clock.now()
        if self._next is None or now - self._next > 0.02:
            self._next = now
        else:
            await clock.sleep_until(self._next)
        self._next += 0.02
        loud = self.tone or self.burst_next
        if self.burst_next:
            self.burst_next = False
            self.bursts.append(clock.now())
        pcm = TONE[:960].tobytes() if loud else bytes(1920)
        frame = _audio_frame(pcm, self._pts)
        self._pts += 960
        return frame


class _Peer:
    def __init__(self, tone: bool = True) -> None:
        self.pc = RTCPeerConnection(RTCConfiguration(iceServers=[]))
        self.mic = _Mic(tone)
        self.pc.addTrack(self.mic)
        self.heard: list[tuple[float, int]] = []  # (loop time, peak)
        self.reader: asyncio.Task[None] | None = None

        @self.pc.on("track")
        def on_track(track: MediaStreamTrack) -> None:
            self.reader = asyncio.ensure_future(self._read(track))

    async def offer(self) -> str:
        with host_addresses(("127.0.0.1",)):
            await self.pc.setLocalDescription(await self.pc.createOffer())
        return str(self.pc.localDescription.sdp)

    async def _read(self, track: MediaStreamTrack) -> None:
        clock = SystemClock()
        try:
            while True:
                frame = await track.recv()
                samples = np.frombuffer(bytes(frame.planes[0]), dtype="<i2")
                self.heard.append((clock.now(), int(np.abs(samples).max()) if samples.size else 0))
        except MediaStreamError:
            pass

    async def close(self) -> None:
        await self.pc.close()
        if self.reader is not None:
            self.reader.cancel()
            await asyncio.gather(self.reader, return_exceptions=True)


# --- load ----------------------------------------------------------------------------------------


def _serve_child(port_file: str) -> None:
    from brisvox.server.host import ServerParts, serve
    from brisvox.server.lifecycle import StopRequests
    from brisvox.server.settings import Settings
    from brisvox.server.webrtc_endpoint import WebRtcEndpoint, WhipConfig
    from brisvox.server.ws_endpoint import TransportEndpoint
    from brisvox.transport.echo import echo_call

    async def main() -> None:
        clock = SystemClock()
        webrtc = WebRtcEndpoint(clock, WhipConfig(calls_per_address=1000, offer_burst=1000, offers_per_second=1000))

        async def runner(link: Any, cancel: Any) -> None:
            await echo_call(clock, link)

        ws = TransportEndpoint(clock)
        parts = ServerParts(runner=runner, call_endpoint=ws, description="echo", on_stop_calls=webrtc.close,
                            http_call_endpoints=(webrtc,))
        settings = Settings(port=0, max_calls=1000, audio_rate=None, idle_timeout=3600.0)
        await serve(settings, parts, clock=clock, stops=StopRequests(), out=io.StringIO(),
                    on_ready=lambda port: write_port(port_file, port))

    asyncio.run(main())


def _rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def _webrtc_calls(base: str, n: int, seconds: float) -> int:
    import httpx

    peers = [_Peer() for _ in range(n)]
    async with httpx.AsyncClient(timeout=20) as http:
        for peer in peers:
            answer = await http.post(f"{base}/whip", content=await peer.offer(),
                                     headers={"Content-Type": "application/sdp"})
            assert answer.status_code == 201, answer.text
            await peer.pc.setRemoteDescription(RTCSessionDescription(sdp=answer.text, type="answer"))
            peer.location = answer.headers["location"]  # type: ignore[attr-defined]
        await SystemClock().sleep(seconds)
        heard = sum(len(p.heard) for p in peers)
        for peer in peers:
            await http.delete(f"{base}{peer.location}")  # type: ignore[attr-defined]
    for peer in peers:
        await peer.close()
    return heard


async def _ws_calls(base: str, n: int, seconds: float) -> int:
    from websockets.asyncio.client import connect

    heard = 0

    async def one() -> None:
        nonlocal heard
        async with connect(base.replace("http", "ws") + "/ws", max_size=None) as ws:
            await ws.send(json.dumps({"type": "start", "sample_rate": RATE}))

            async def read() -> None:
                nonlocal heard
                async for msg in ws:
                    if isinstance(msg, bytes):
                        heard += 1

            reader = asyncio.ensure_future(read())
            clock = SystemClock()
            start = clock.now()
            frame = _tone(RATE, FRAME_16K)
            for i in range(int(seconds * 50)):
                await clock.sleep_until(start + i * 0.02)
                await ws.send(frame)
            await ws.send(json.dumps({"type": "stop"}))
            await bounded(clock, 5, reader, "ws close")

    await asyncio.gather(*(one() for _ in range(n)))
    return heard


def load(counts: list[int], seconds: float) -> list[dict[str, Any]]:
    with tempfile.TemporaryDirectory() as tmp:
        port_file = os.path.join(tmp, "port")
        child = subprocess.Popen([sys.executable, __file__, "--serve-child", port_file],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            while not read_port(port_file):
                time.sleep(0.05)
            base = f"http://127.0.0.1:{read_port(port_file)}"
            rows = []
            for n in counts:
                for kind, calls in (("websocket", _ws_calls), ("webrtc", _webrtc_calls)):
                    time.sleep(1.0)
                    rss0, cpu0, t0 = _rss_kib(child.pid), cpu_seconds(child.pid), time.monotonic()
                    peak_rss = [rss0]

                    async def run(calls: Any = calls, n: int = n, peak_rss: list[int] = peak_rss) -> int:
                        async def watch() -> None:
                            while True:
                                peak_rss.append(_rss_kib(child.pid))
                                await SystemClock().sleep(0.25)

                        watcher = asyncio.ensure_future(watch())
                        try:
                            return int(await calls(base, n, seconds))
                        finally:
                            watcher.cancel()
                            await asyncio.gather(watcher, return_exceptions=True)

                    heard = asyncio.run(run())
                    cpu, wall = cpu_seconds(child.pid) - cpu0, time.monotonic() - t0
                    rows.append({"transport": kind, "calls": n, "cpu_per_call_second": cpu / (n * seconds),
                                 "server_cpu_share": cpu / wall, "rss_per_call_kib": (max(peak_rss) - rss0) / n,
                                 "frames_heard_per_call": heard / n})
            return rows
        finally:
            child.terminate()
            child.wait(30)


# --- latency -------------------------------------------------------------------------------------


async def _webrtc_latency(bursts: int) -> tuple[float, float]:
    clock = SystemClock()
    peer = _Peer(tone=False)
    call = await answer_offer(await peer.offer(), clock=clock, config=WebRtcConfig(), stats=WebRtcStats(),
                              call_id="bench")
    await peer.pc.setRemoteDescription(RTCSessionDescription(sdp=call.answer_sdp, type="answer"))
    for transceiver in peer.pc.getTransceivers():  # the client's jitter buffer as the server's (a browser's differs)
        transceiver.receiver._RTCRtpReceiver__jitter_buffer = JitterBuffer(capacity=16, prefetch=1)
    got: asyncio.Future[CallLink] = asyncio.get_running_loop().create_future()

    async def deliver(link: CallLink) -> bool:
        got.set_result(link)
        return True

    run = asyncio.ensure_future(call.run(deliver, asyncio.Event()))
    session = await TransportSession.open(clock, await got)
    inbound, outbound = [], []
    try:
        await clock.sleep(0.5)
        for _ in range(bursts):
            # caller -> engine (the silence queued since the last burst is read first)
            while session.try_recv() is not None:
                pass
            peer.mic.burst_next = True
            while True:
                ev = await bounded(clock, 5, session.recv(), "caller audio")
                if isinstance(ev, CallerAudio) and np.abs(np.frombuffer(ev.frame.pcm, dtype="<i2")).max() > 2000:
                    inbound.append(clock.now() - peer.mic.bursts[-1])
                    break
            # engine -> caller
            await clock.sleep(0.3)
            mark = len(peer.heard)
            sent = clock.now()
            await session.send(SendAudio(OutputAudioFrame(epoch=0, pcm=_tone(24000, 480), sample_rate=24000)))
            while True:
                loud = [t for t, peak in peer.heard[mark:] if peak > 2000]
                if loud:
                    outbound.append(loud[0] - sent)
                    break
                await clock.sleep(0.002)
            await clock.sleep(0.3)
    finally:
        await session.close()
        await peer.close()
        await bounded(clock, 5, run, "call end")
    return statistics.median(inbound), statistics.median(outbound)


async def _ws_latency(bursts: int) -> tuple[float, float]:
    from websockets.asyncio.client import connect

    from brisvox.transport.websocket import ServerConfig, WebSocketServer

    clock = SystemClock()
    inbound, outbound = [], []
    async with WebSocketServer(clock, ServerConfig(port=0, audio_rate=None)) as server, \
            connect(server.url, max_size=None) as ws:
        await ws.send(json.dumps({"type": "start", "sample_rate": RATE}))
        session = await TransportSession.open(clock, await server.accept())
        try:
            await session.recv()  # Started
            for _ in range(bursts):
                sent = clock.now()
                await ws.send(_tone(RATE, FRAME_16K))
                while True:
                    ev = await bounded(clock, 5, session.recv(), "caller audio")
                    if isinstance(ev, CallerAudio):
                        inbound.append(clock.now() - sent)
                        break
                sent = clock.now()
                await session.send(SendAudio(OutputAudioFrame(epoch=0, pcm=_tone(RATE, FRAME_16K),
                                                              sample_rate=RATE)))
                while True:
                    msg = await bounded(clock, 5, ws.recv(), "bot audio")
                    if isinstance(msg, bytes):
                        outbound.append(clock.now() - sent)
                        break
                await clock.sleep(0.1)
        finally:
            await session.close()
    return statistics.median(inbound), statistics.median(outbound)


def latency(bursts: int) -> dict[str, tuple[float, float]]:
    return {"websocket": asyncio.run(_ws_latency(bursts)), "webrtc": asyncio.run(_webrtc_latency(bursts))}


def main() -> None:
    if len(sys.argv) == 3 and sys.argv[1] == "--serve-child":
        _serve_child(sys.argv[2])
        return
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("what", nargs="?", default="all", choices=["codec", "load", "latency", "all"])
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--calls", default="1,10,30")
    parser.add_argument("--bursts", type=int, default=20)
    args = parser.parse_args()
    if args.what in ("codec", "all"):
        for name, us in codec().items():
            print(f"codec {name:18s} {us:7.1f} us per 20 ms frame (median)")
    if args.what in ("latency", "all"):
        for kind, (inbound, outbound) in latency(args.bursts).items():
            print(f"latency {kind:9s} client->engine {inbound * 1000:6.1f} ms  engine->client {outbound * 1000:6.1f} ms"
                  f" (median of {args.bursts})")
    if args.what in ("load", "all"):
        for row in load([int(n) for n in args.calls.split(",")], args.seconds):
            print(f"load {row['transport']:9s} calls {row['calls']:3d}  server cpu/call-second "
                  f"{row['cpu_per_call_second'] * 1000:6.1f} ms  rss/call {row['rss_per_call_kib']:7.0f} KiB  "
                  f"server cpu share {row['server_cpu_share']:.2f}  frames heard/call "
                  f"{row['frames_heard_per_call']:.0f}")


if __name__ == "__main__":
    main()
