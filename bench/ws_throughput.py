"""Throughput and added latency of the brisvox WebSocket server with N concurrent echo calls.

The server (``WebSocketServer`` + the echo engine of ``brisvox.transport.echo``, every call
a full ``TransportSession`` with its pacer) runs in a child process; the callers run here.
Each caller sends 20 ms PCM16 frames (16 kHz, 640 bytes) in real time, each frame tagged
with its sequence number, and times the echo of every frame.

Reported (median of ``--runs`` runs):
* frames per second per core: frames through the server (in + out) per second of the
  server process's CPU time;
* added latency per frame: from sending a frame to receiving its echo (median and p99),
  and the lowest latency each call saw (the path's own cost).  It includes the pacer's
  wait for the frame's 20 ms slot.  The echo's input arrives exactly in real time, so any
  stall of either process (a busy machine) turns into latency that the pacer may not win
  back: it never sends faster than real time.

    python bench/ws_throughput.py [--calls 50] [--seconds 10] [--runs 3] [--no-uvloop]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

from _procutil import cpu_seconds, read_port, write_port

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

FRAME = 640
RATE = 16000




def serve(port_file: str, use_uvloop: bool) -> None:
    from brisvox.core.clock import SystemClock
    from brisvox.core.tasks import TaskScope
    from brisvox.transport.echo import run_echo
    from brisvox.transport.websocket import ServerConfig, WebSocketServer

    async def main() -> None:
        clock = SystemClock()
        async with TaskScope("bench") as scope, WebSocketServer(clock, ServerConfig(max_calls=10_000)) as server:
            scope.spawn(run_echo(clock, server, scope), name="echo")
            write_port(port_file, server.port)
            await asyncio.Future()

    if use_uvloop:
        import uvloop

        uvloop.run(main())
    else:
        asyncio.run(main())



async def caller(port: int, seconds: float, latencies: list[float], counts: list[int],
                 floors: list[float] | None = None) -> None:
    from websockets.asyncio.client import connect

    sent: dict[int, float] = {}
    n_frames = int(seconds / 0.02)
    async with connect(f"ws://127.0.0.1:{port}/ws", compression=None, ping_interval=None, max_size=None) as ws:
        await ws.send(json.dumps({"type": "start", "sample_rate": RATE}))
        await ws.recv()

        async def receive() -> None:
            got = 0
            async for m in ws:
                if isinstance(m, bytes):
                    seq = struct.unpack_from("<I", m)[0]
                    t = sent.pop(seq, None)
                    if t is not None:
                        latencies.append(time.perf_counter() - t)
                    got += 1
                    if got >= n_frames:
                        break
            counts.append(got)

        first = len(latencies)
        rx = asyncio.ensure_future(receive())
        t0 = time.perf_counter()
        payload = bytearray(FRAME)
        for i in range(n_frames):
            delay = t0 + i * 0.02 - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            struct.pack_into("<I", payload, 0, i)
            sent[i] = time.perf_counter()
            await ws.send(bytes(payload))
        try:
            await asyncio.wait_for(rx, 2.0)
        except TimeoutError:
            counts.append(n_frames - len(sent))
        await ws.send(json.dumps({"type": "stop"}))
        if floors is not None and len(latencies) > first:
            floors.append(min(latencies[first:]))


def run_once(calls: int, seconds: float, use_uvloop: bool) -> tuple[float, float, float, float, int, int]:
    port_file = f"/tmp/ws_throughput_{os.getpid()}"
    if os.path.exists(port_file):
        os.unlink(port_file)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    args = [sys.executable, __file__, "--serve", port_file] + ([] if use_uvloop else ["--no-uvloop"])
    proc = subprocess.Popen(args, env=env)
    try:
        while not (port := read_port(port_file)):
            time.sleep(0.05)
        latencies: list[float] = []
        counts: list[int] = []
        floors: list[float] = []
        before = cpu_seconds(proc.pid)

        async def load() -> None:
            await asyncio.gather(*(caller(port, seconds, latencies, counts, floors) for _ in range(calls)))

        asyncio.run(load())
        used = cpu_seconds(proc.pid) - before
        echoed = sum(counts)
        frames = 2 * echoed  # each echoed frame went in and came out
        lat = sorted(latencies)
        p50 = lat[len(lat) // 2] if lat else float("nan")
        p99 = lat[int(len(lat) * 0.99)] if lat else float("nan")
        floor = statistics.median(floors) if floors else float("nan")
        return frames / max(used, 1e-3), p50, p99, floor, echoed, calls * int(seconds / 0.02)
    finally:
        proc.terminate()
        proc.wait()
        if os.path.exists(port_file):
            os.unlink(port_file)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--serve")
    p.add_argument("--calls", type=int, default=50)
    p.add_argument("--seconds", type=float, default=10.0)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--no-uvloop", action="store_true")
    a = p.parse_args()
    use_uvloop = not a.no_uvloop
    if use_uvloop:
        try:
            import uvloop  # noqa: F401
        except ImportError:
            use_uvloop = False
    if a.serve:
        serve(a.serve, use_uvloop)
        return
    results = [run_once(a.calls, a.seconds, use_uvloop) for _ in range(a.runs)]
    fps = statistics.median(r[0] for r in results)
    p50 = statistics.median(r[1] for r in results)
    p99 = statistics.median(r[2] for r in results)
    floor = statistics.median(r[3] for r in results)
    echoed = sum(r[4] for r in results)
    expected = sum(r[5] for r in results)
    loop = "uvloop" if use_uvloop else "asyncio"
    print(f"{a.calls} echo calls x {a.seconds:g} s, {loop}, median of {a.runs} runs:")
    print(f"  frames per second per core (in + out, server CPU time): {fps:,.0f}")
    print(f"  = {fps / 100:,.0f} concurrent calls per core at 50 frames/s each way")
    print(f"  added latency per frame (send -> echo received): median {p50 * 1000:.1f} ms, p99 {p99 * 1000:.1f} ms")
    print(f"  lowest latency of a call (median over calls): {floor * 1000:.1f} ms")
    print(f"  frames echoed: {echoed} of {expected}")


if __name__ == "__main__":
    main()
