"""Call set-up CPU of a worker's accept: uvicorn's listener (asyncio's server) against the
accept gate of ``--workers N`` (``host.AcceptGate``: one look at the node's table per accept).

One process, one loop: a client opens and closes ``--n`` connections to 127.0.0.1 one after the
other, the server side accepts each with the mode under test and closes it once its protocol has
it.  The process's CPU time (user + sys) per connection is taken per round; the modes alternate
round by round and the medians are printed with their ratio and the load average.

    python bench/density/accept.py --rounds 7 --n 400
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "src"))

from brisvox.core.clock import SystemClock
from brisvox.core.tasks import TaskScope
from brisvox.server.host import AcceptGate, bind_listener
from brisvox.server.node import NodeRow, NodeSeat, NodeTable


class _Close(asyncio.Protocol):
    def __init__(self, served: asyncio.Queue[None]) -> None:
        self.served = served

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        transport.close()
        self.served.put_nowait(None)


async def _round(mode: str, n: int) -> float:
    loop = asyncio.get_running_loop()
    listener = bind_listener("127.0.0.1", 0)
    served: asyncio.Queue[None] = asyncio.Queue(maxsize=n)
    table = NodeTable(2)
    table.write(1, NodeRow(alive=1, ready=1))  # a sibling that admits: every accept looks at it
    table.over_share(1, 1_000_000, admits=True)
    address = listener.getsockname()[:2]
    try:
        async with TaskScope("bench") as scope:
            server = None
            gate = None
            if mode == "asyncio":
                server = await loop.create_server(lambda: _Close(served), sock=listener)
            else:
                gate = AcceptGate(listener, lambda: _Close(served), NodeSeat(table, 0, pid=os.getpid()), scope,
                                  SystemClock(), held=lambda: 0, admits=lambda: True)
                gate.start()
            t0 = time.process_time()
            for _ in range(n):
                _reader, writer = await asyncio.open_connection(*address)
                await served.get()
                writer.close()
                await writer.wait_closed()
            t1 = time.process_time()
            if gate is not None:
                gate.close()
            if server is not None:
                server.close()
                await server.wait_closed()
    finally:
        listener.close()
        table.close()
    return (t1 - t0) / n * 1e6


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--n", type=int, default=400, help="connections per round")
    args = ap.parse_args()
    cpu: dict[str, list[float]] = {"asyncio": [], "gate": []}
    for _ in range(args.rounds):
        for mode in cpu:
            cpu[mode].append(await _round(mode, args.n))
    med = {mode: statistics.median(v) for mode, v in cpu.items()}
    for mode, v in med.items():
        print(f"{mode}: {v:.0f} us CPU per connection (client and server in this process; "
              f"rounds {', '.join(f'{x:.0f}' for x in cpu[mode])})")
    print(f"gate / asyncio: {med['gate'] / med['asyncio']:.2f}; load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
