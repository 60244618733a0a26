"""Raw echo throughput of two WebSocket libraries (`websockets` vs `picows`), no brisvox code.

The server runs in a child process (one core); the load generator (a picows client, the
cheaper of the two, so it disturbs the measurement least) runs here with N connections,
each keeping a window of 20 ms PCM16 frames (640 bytes, 16 kHz) in flight.  Reported:
frames echoed per second of *server CPU time* (frames per second per core), median of
three runs.  Used for the library decision in docs/DECISIONS.md.

    python bench/ws_libs.py [--calls 20] [--frames 4000] [--window 8]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys

from _procutil import cpu_seconds, read_port, write_port

FRAME = b"\x01\x02" * 320




def server_main(lib: str, port_file: str) -> None:
    async def run_websockets() -> None:
        from websockets.asyncio.server import serve

        async def handler(ws):  # type: ignore[no-untyped-def]
            async for msg in ws:
                await ws.send(msg)

        async with serve(handler, "127.0.0.1", 0, compression=None) as server:
            port = next(iter(server.sockets)).getsockname()[1]
            write_port(port_file, port)
            await asyncio.Future()

    async def run_picows() -> None:
        from picows import WSListener, WSMsgType, ws_create_server

        class Echo(WSListener):  # type: ignore[misc]
            def on_ws_frame(self, transport, frame):  # type: ignore[no-untyped-def]
                if frame.msg_type == WSMsgType.CLOSE:
                    transport.send_close(frame.get_close_code())
                    transport.disconnect()
                else:
                    transport.send(frame.msg_type, frame.get_payload_as_bytes())

        server = await ws_create_server(lambda _r: Echo(), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        write_port(port_file, port)
        await asyncio.Future()

    asyncio.run(run_websockets() if lib == "websockets" else run_picows())



async def load(port: int, calls: int, frames: int, window: int) -> None:
    from picows import WSListener, WSMsgType, ws_connect

    class Client(WSListener):  # type: ignore[misc]
        def __init__(self) -> None:
            self.got = 0
            self.sent = 0
            self.done = asyncio.get_running_loop().create_future()

        def on_ws_connected(self, transport):  # type: ignore[no-untyped-def]
            self.t = transport
            for _ in range(window):
                self.t.send(WSMsgType.BINARY, FRAME)
                self.sent += 1

        def on_ws_frame(self, transport, frame):  # type: ignore[no-untyped-def]
            if frame.msg_type != WSMsgType.BINARY:
                return
            self.got += 1
            if self.sent < frames:
                transport.send(WSMsgType.BINARY, FRAME)
                self.sent += 1
            elif self.got >= frames and not self.done.done():
                self.done.set_result(None)

    conns = [await ws_connect(Client, f"ws://127.0.0.1:{port}/") for _ in range(calls)]
    await asyncio.gather(*(c[1].done for c in conns))
    for t, _ in conns:
        t.send_close()
        t.disconnect()


def measure(lib: str, calls: int, frames: int, window: int) -> float:
    port_file = f"/tmp/ws_libs_{os.getpid()}_{lib}"
    if os.path.exists(port_file):
        os.unlink(port_file)
    proc = subprocess.Popen([sys.executable, __file__, "--serve", lib, port_file])
    try:
        while not (port := read_port(port_file)):
            asyncio.run(asyncio.sleep(0.05))
        before = cpu_seconds(proc.pid)
        asyncio.run(load(port, calls, frames, window))
        used = cpu_seconds(proc.pid) - before
        return calls * frames / max(used, 1e-3)
    finally:
        proc.terminate()
        proc.wait()
        os.unlink(port_file)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--serve", nargs=2)
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--frames", type=int, default=4000)
    p.add_argument("--window", type=int, default=8)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    if a.serve:
        server_main(*a.serve)
        return
    results = {}
    for lib in ("websockets", "picows"):
        runs = [measure(lib, a.calls, a.frames, a.window) for _ in range(a.runs)]
        results[lib] = statistics.median(runs)
        print(f"{lib:>10}: {results[lib]:>10.0f} echoed frames per server CPU second (median of {a.runs})")
    print(f"picows / websockets: {results['picows'] / results['websockets']:.2f}x")


if __name__ == "__main__":
    main()
