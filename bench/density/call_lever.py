"""The per-call transport lever: the server's CPU per call-second for callers that stream silence.

``brisvox serve`` (the density bench's agent, from ``--src``: this checkout's or another build's)
pinned to core 0 takes ``--calls`` RTVI calls; each streams real-time 20 ms frames of digital
silence (the silence between the density callers' turns, which the VAD skips), the callers'
send phases spread over the frame, for ``--seconds`` once all are connected.  The server's CPU
time (user + sys, from /proc) over that window per call-second is the cost of a call that
listens: the edge, the RTVI adapter, the transport session, the listen stage, the VAD's silence
skip, the mock STT, and each call's own timers.  The work is the same per frame whatever else
runs on the machine (the frames come in real time and the server keeps up), so builds compare
by alternating in one window even on a shared machine:

    python bench/density/call_lever.py --src /other/checkout/src --src src --rounds 3
    python bench/density/call_lever.py --loops asyncio,uvloop     # the event loop, alternating
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))  # the client: this checkout's

import run  # noqa: E402  (bench/density/run.py: the servers)

from brisvox.loadtest_conn import Connection, open_call  # noqa: E402
from brisvox.loadtest_wire import Kind, client_frame  # noqa: E402
from brisvox.transport.rtvi.wire import encode_audio  # noqa: E402

_TICK = os.sysconf("SC_CLK_TCK")
SILENCE = client_frame(Kind.BINARY, encode_audio(bytes(640), 16000))


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICK


async def feed_silence(conns: list[Connection]) -> None:
    """Every caller's 20 ms frames of silence in real time from one task, the callers' phases
    spread over the frame; runs until cancelled (callers appended meanwhile join)."""
    loop = asyncio.get_running_loop()
    t = loop.time()
    while True:
        for i, conn in enumerate(list(conns)):
            if i % 10 == 0:
                t += 0.002
                await asyncio.sleep(max(0.0, t - loop.time()))
            conn.send(SILENCE)
        t += 0.02 - 0.002 * ((len(conns) + 9) // 10)
        await asyncio.sleep(max(0.0, t - loop.time()))


async def stream(url: str, calls: int, seconds: float, pid: int) -> tuple[float, float]:
    """Open the calls, stream silence from all of them; (server CPU s, call-seconds) over the window."""
    conns: list[Connection] = []
    feed = asyncio.ensure_future(feed_silence(conns))
    try:
        for _ in range(calls):
            conns.append(await open_call(url, 10))
            await asyncio.sleep(0.05)
        await asyncio.sleep(2.0)  # every call is with the engine and settled
        before, t0 = cpu_seconds(pid), time.monotonic()
        await asyncio.sleep(seconds)
        used, wall = cpu_seconds(pid) - before, time.monotonic() - t0
    finally:
        feed.cancel()
        await asyncio.wait([feed])
        for conn in conns:
            await conn.close()
    return used, wall * calls


def one_round(src: Path, calls: int, seconds: float, loop: str = "asyncio") -> float:
    """One fresh server of ``src`` on ``loop``: its CPU ms per call-second."""
    with tempfile.TemporaryDirectory() as tmp, \
            run.server("brisvox", Path(), Path(tmp) / "server.log", loop, "on", src=src) as (pid, url):
        used, call_seconds = asyncio.run(stream(url, calls, seconds, pid))
    return 1000 * used / call_seconds


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--src", type=Path, action="append", help="a build to measure (repeat to alternate builds)")
    ap.add_argument("--calls", type=int, default=60)
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--port", type=int, default=8813, help="the server's port on 127.0.0.1")
    ap.add_argument("--loops", default="asyncio", help="event loops to alternate: asyncio, uvloop or asyncio,uvloop")
    args = ap.parse_args()
    run.use_port(args.port)
    srcs = args.src or [HERE.parents[1] / "src"]
    runs = [(src, loop) for src in srcs for loop in args.loops.split(",")]
    results: dict[tuple[Path, str], list[float]] = {r: [] for r in runs}
    for _ in range(args.rounds):
        for src, loop in runs:
            ms = one_round(src, args.calls, args.seconds, loop)
            results[src, loop].append(ms)
            print(f"{src} ({loop}): {ms:.2f} ms of server CPU per call-second ({args.calls} calls, load "
                  f"{os.getloadavg()[0]:.1f})", flush=True)
    for (src, loop), got in results.items():
        print(f"median {sorted(got)[len(got) // 2]:.2f} ms per call-second: {src} ({loop})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
