"""The WebSocket edge lever: the server's CPU per audio frame in and out, through brisvox's edge.

A server process (uvicorn with ``brisvox.server.edge``'s protocols, the way ``brisvox serve``
runs it, and a Starlette route reading and writing through ``StarletteWsPeer``) echoes every
binary message; ``--calls`` clients each send a 660-byte frame (a 20 ms RTVI audio frame's
size), wait for its echo, and send the next, until ``--frames`` frames went both ways on each.
The server's own CPU time (user + sys, from /proc) over the exchange, divided by the frames,
is the cost of one frame in and one frame out: receive, parse, the app's read, the app's
write, the framing and the socket calls.  It is a cost per unit of work, so a shared machine
stretches the run but not (much) the number; compare builds alternating in one window:

    taskset -c 1 python bench/density/edge_lever.py                    # this checkout's src
    taskset -c 1 python bench/density/edge_lever.py --src /other/src   # another build's
"""

from __future__ import annotations

import argparse
import asyncio
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

from websockets.asyncio.client import ClientConnection, connect

HERE = Path(__file__).resolve().parent
FRAME = bytes(660)
_TICK = os.sysconf("SC_CLK_TCK")

SERVER = r"""
import asyncio, sys, uvicorn
from starlette.applications import Starlette
from starlette.routing import WebSocketRoute
from brisvox.core.clock import SystemClock
from brisvox.server.edge import Edge
from brisvox.server.ws_endpoint import StarletteWsPeer
from brisvox.transport.websocket import PeerClosed

async def echo(websocket):
    await websocket.accept()
    peer = StarletteWsPeer(websocket)
    try:
        while True:
            await peer.send(await peer.recv())
    except PeerClosed:
        pass

async def main():
    http, ws = Edge(SystemClock()).protocols()
    config = uvicorn.Config(Starlette(routes=[WebSocketRoute("/", echo)]), host="127.0.0.1", port=int(sys.argv[1]),
                            log_level="warning", lifespan="off", http=http, ws=ws, ws_ping_interval=None,
                            ws_ping_timeout=None, ws_per_message_deflate=False)
    await uvicorn.Server(config).serve()

asyncio.run(main())
"""


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


async def exchange(url: str, calls: int, frames: int, pid: int) -> tuple[float, float]:
    conns = [await connect(url, compression=None, open_timeout=10) for _ in range(calls)]

    async def one(ws: ClientConnection) -> None:
        for _ in range(frames):
            await ws.send(FRAME)
            await ws.recv()

    before, t0 = cpu_seconds(pid), time.monotonic()
    await asyncio.gather(*(one(ws) for ws in conns))
    used, wall = cpu_seconds(pid) - before, time.monotonic() - t0
    for ws in conns:
        await ws.close()
    return used, wall


def wait_listening(port: int, proc: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"the echo server exited with status {proc.returncode}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"the echo server did not listen on {port} within 60 s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, default=HERE.parents[1] / "src", help="the brisvox build to measure")
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--frames", type=int, default=1500, help="frames each way per call")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=8797)
    args = ap.parse_args()
    env = {**os.environ, "PYTHONPATH": str(args.src)}
    proc = subprocess.Popen(["taskset", "-c", "0", sys.executable, "-c", SERVER, str(args.port)], env=env)
    try:
        wait_listening(args.port, proc)
        results = []
        for _ in range(args.rounds):
            used, wall = asyncio.run(exchange(f"ws://127.0.0.1:{args.port}/", args.calls, args.frames, proc.pid))
            results.append(1e6 * used / (args.calls * args.frames))
            print(f"{results[-1]:.1f} us of server CPU per frame in + out ({used:.2f} s over {wall:.1f} s, "
                  f"load {os.getloadavg()[0]:.1f})", flush=True)
        print(f"median {sorted(results)[len(results) // 2]:.1f} us per frame ({args.src})")
    finally:
        proc.terminate()
        proc.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())
