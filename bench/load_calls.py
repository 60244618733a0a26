"""Load: N real-time calls against ``brisvox serve`` (the demo agent), slots sampled as they go.

Starts ``python -m brisvox serve`` (the demo agent with the scripted LLM; its STT and TTS
are the agent file's, the local Whisper and hibari) on a free port of 127.0.0.1, then for
each N of ``--calls`` offers N calls at once (spread over ``--ramp`` seconds).  Each call
sends ``start`` (pcm16, 16 kHz), streams silence in real time for ``--duration`` seconds,
sends ``stop`` and reads everything until the close.  A sampler asks ``/readyz`` every
``--interval`` seconds and counts, for the same moment, the client's open call sockets.

It asserts, at every sample:

* admitted calls (``active + reserved`` in ``/readyz``) never exceed ``max``;
* open call sockets never exceed admitted calls + the unstarted cap.  A socket counts as
  open from its upgrade until the server's goodbye (the ``stop`` message that precedes its
  close frame; or the connection's end) and only when it was open for the whole sample
  (from before the request to after the answer): the server holds a call's place from
  before the upgrade to after its close frame, so that count is a lower bound of the
  server's admitted calls at the sampled moment.  The cap of connections that have
  not started is the server's own (``BRISVOX_MAX_UNSTARTED``, read through the settings;
  ``--unstarted-cap`` sets it for the server and the check alike);

and at the end that every call that got ``started`` heard its greeting (bot audio with a
peak over ``--loud``) and no call ended with an error.  It reports, per N: calls offered,
admitted (peak), refused (503), greetings heard, the time to the first bot audio (median,
p90), and the server's CPU (cores per call over the calls' steady part) and RSS growth per
call.  Exit status 1 when an assertion failed.

    python bench/load_calls.py --calls 10,50
    BRISVOX_MAX_CALLS=50 python bench/load_calls.py --calls 50 --max-calls 50
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import numpy as np
from websockets.asyncio.client import connect
from websockets.exceptions import ConnectionClosed, InvalidStatus

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))  # this checkout's brisvox, as the server's
from _procutil import cpu_seconds
from brisvox.server.settings import Settings

ROOT = Path(__file__).resolve().parents[1]
FRAME = bytes(640)  # 20 ms of 16 kHz pcm16 silence
LLM_VARIABLES = ("BRISVOX_LLM_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY", "BRISVOX_AGENT_FILE")


@dataclass
class Call:
    index: int
    offered: float
    upgraded: float | None = None
    started: float | None = None
    first_audio: float | None = None
    goodbye: float | None = None  # the server's stop message arrived
    closed: float | None = None
    refused: int | None = None
    peak: int = 0
    audio_bytes: int = 0
    errors: list[str] = field(default_factory=list)
    busy_events: list[str] = field(default_factory=list)  # the engine's error events (a model at capacity)
    stop_reason: str | None = None
    close_code: int | None = None
    failure: str | None = None


@dataclass
class Sample:
    at: float
    active: int
    reserved: int
    max: int
    open_sockets: int
    status: int
    saturated: list[str]
    cpu: float
    rss_kb: int


class Server:
    def __init__(self, max_calls: int | None, max_unstarted: int) -> None:
        env = {**os.environ, "BRISVOX_PORT": "0", "BRISVOX_HOST": "127.0.0.1", "PYTHONPATH": str(ROOT / "src"),
               "BRISVOX_LLM_SCRIPTED": "1"}
        for name in LLM_VARIABLES:
            env.pop(name, None)
        if max_calls is not None:
            env["BRISVOX_MAX_CALLS"] = str(max_calls)
        env["BRISVOX_MAX_UNSTARTED"] = str(max_unstarted)
        self.log_path = Path(os.environ.get("TMPDIR", "/tmp")) / f"brisvox-load-{os.getpid()}.log"
        self.log = self.log_path.open("w")
        self.proc = subprocess.Popen([sys.executable, "-m", "brisvox", "serve", "--workers", "1"], env=env, cwd=ROOT, text=True,
                                     stdout=subprocess.PIPE, stderr=self.log)

    def wait_ready(self, timeout: float = 180.0) -> str:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        if m is None:
            raise SystemExit(f"the server did not start: {line!r}\n{self.log_path.read_text()}")
        deadline = time.monotonic() + timeout
        while "call providers warm" not in self.log_path.read_text():
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise SystemExit(f"the server did not warm up\n{self.log_path.read_text()}")
            time.sleep(0.2)
        return m.group(1)

    def rss_kb(self) -> int:
        with open(f"/proc/{self.proc.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return 0

    def stop(self) -> int:
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout=60)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
            self.log.close()


def peak(pcm: bytes) -> int:
    samples = np.frombuffer(pcm[: len(pcm) // 2 * 2], dtype="<i2")
    return int(np.abs(samples.astype(np.int32)).max()) if samples.size else 0


async def one_call(ws_url: str, call: Call, duration: float) -> None:
    try:
        async with connect(ws_url, compression=None, open_timeout=20, close_timeout=5, max_size=2**20) as ws:
            call.upgraded = time.monotonic()
            await ws.send(json.dumps({"type": "start", "encoding": "pcm16", "sample_rate": 16000,
                                      "call_id": f"load-{call.index}"}))
            sender = asyncio.ensure_future(_send_silence(ws, duration))
            try:
                async for message in ws:
                    if isinstance(message, bytes):
                        if call.first_audio is None:
                            call.first_audio = time.monotonic()
                        call.audio_bytes += len(message)
                        call.peak = max(call.peak, peak(message))
                        continue
                    msg = json.loads(message)
                    if msg.get("type") == "started":
                        call.started = time.monotonic()
                    elif msg.get("type") == "error":
                        call.errors.append(str(msg.get("code")))
                    elif msg.get("type") == "event" and msg.get("kind") == "error":
                        call.busy_events.append(str(msg.get("code")))
                    elif msg.get("type") == "stop":
                        call.goodbye = time.monotonic()
                        call.stop_reason = str(msg.get("reason"))
            finally:
                sender.cancel()
                await asyncio.gather(sender, return_exceptions=True)
            call.close_code = ws.close_code
    except InvalidStatus as exc:
        call.refused = exc.response.status_code
    except (ConnectionClosed, OSError, TimeoutError) as exc:
        call.failure = f"{type(exc).__name__}: {exc}"
    finally:
        call.closed = time.monotonic()


async def _send_silence(ws: object, duration: float) -> None:
    send = ws.send  # type: ignore[attr-defined]
    t0 = time.monotonic()
    n = int(duration / 0.02)
    try:
        for i in range(n):
            delay = t0 + i * 0.02 - time.monotonic()
            if delay > 0:
                await asyncio.sleep(delay)
            await send(FRAME)
        await send(json.dumps({"type": "stop"}))
    except ConnectionClosed:
        return


def open_during(calls: list[Call], start: float, end: float) -> int:
    """Call sockets open for the whole of [start, end]: upgraded before, and neither the server's
    goodbye (``stop``, sent before its close frame) nor the connection's end came before ``end``."""
    count = 0
    for c in calls:
        over = c.goodbye if c.goodbye is not None else c.closed
        if c.upgraded is not None and c.upgraded < start and (over is None or over > end):
            count += 1
    return count


async def sampler(http: httpx.AsyncClient, server: Server, calls: list[Call], samples: list[Sample],
                  interval: float, done: asyncio.Event) -> None:
    while not done.is_set():
        t0 = time.monotonic()
        try:
            r = await http.get("/readyz", timeout=10)
        except httpx.HTTPError:
            await asyncio.sleep(interval)
            continue
        t1 = time.monotonic()
        body = r.json()
        samples.append(Sample(at=t1, active=body["active"], reserved=body["reserved"], max=body["max"],
                              open_sockets=open_during(calls, t0, t1), status=r.status_code,
                              saturated=list(body.get("saturated", [])), cpu=cpu_seconds(server.proc.pid),
                              rss_kb=server.rss_kb()))
        await asyncio.sleep(max(0.0, interval - (time.monotonic() - t0)))


async def run_load(base: str, server: Server, n: int, args: argparse.Namespace) -> tuple[bool, dict[str, object]]:
    ws_url = base.replace("http://", "ws://") + "/ws"
    calls = [Call(i, 0.0) for i in range(n)]
    samples: list[Sample] = []
    done = asyncio.Event()
    rss_idle = server.rss_kb()
    async with httpx.AsyncClient(base_url=base) as http:
        sampling = asyncio.ensure_future(sampler(http, server, calls, samples, args.interval, done))
        tasks = []
        for c in calls:
            c.offered = time.monotonic()
            tasks.append(asyncio.ensure_future(one_call(ws_url, c, args.duration)))
            await asyncio.sleep(args.ramp / max(1, n))
        await asyncio.gather(*tasks)
        await asyncio.sleep(1.0)  # the slots of the last calls come back
        done.set()
        await sampling
        final = (await http.get("/readyz")).json()
    problems: list[str] = []
    for s in samples:
        admitted = s.active + s.reserved
        if admitted > s.max:
            problems.append(f"t={s.at:.2f}: admitted {admitted} > max {s.max}")
        if s.open_sockets > admitted + args.unstarted_cap:
            problems.append(f"t={s.at:.2f}: {s.open_sockets} open sockets > admitted {admitted} "
                            f"+ unstarted cap {args.unstarted_cap}")
    started = [c for c in calls if c.started is not None]
    silent = [c.index for c in started if c.peak < args.loud]
    if silent:
        problems.append(f"{len(silent)} admitted call(s) heard no greeting: {silent[:10]}")
    errored = [(c.index, c.errors) for c in calls if c.errors]
    if errored:
        problems.append(f"{len(errored)} call(s) got errors: {errored[:5]}")
    failed = [(c.index, c.failure) for c in calls if c.failure]
    if failed:
        problems.append(f"{len(failed)} call(s) failed: {failed[:5]}")
    if final["active"] or final["reserved"]:
        problems.append(f"after the calls /readyz still counts {final['active']} active, {final['reserved']} reserved")
    to_audio = sorted(c.first_audio - c.started for c in started if c.first_audio is not None and c.started)
    busy = [s for s in samples if s.active > 0]
    cores_per_call = None
    if len(busy) >= 2:
        cpu = busy[-1].cpu - busy[0].cpu
        call_seconds = sum((b.at - a.at) * a.active for a, b in itertools.pairwise(busy))
        cores_per_call = cpu / call_seconds if call_seconds > 0 else None
    peak_admitted = max((s.active + s.reserved for s in samples), default=0)
    peak_rss = max((s.rss_kb for s in samples), default=rss_idle)
    report: dict[str, object] = {
        "offered": n,
        "max_calls": samples[0].max if samples else None,
        "unstarted_cap": args.unstarted_cap,
        "admitted_peak": peak_admitted,
        "open_sockets_peak": max((s.open_sockets for s in samples), default=0),
        "started": len(started),
        "refused_503": sum(1 for c in calls if c.refused == 503),
        "greetings_heard": len(started) - len(silent),
        "silent_but_told_busy": sum(1 for c in started if c.peak < args.loud and c.busy_events),
        "first_audio_median_s": round(statistics.median(to_audio), 3) if to_audio else None,
        "first_audio_p90_s": round(to_audio[int(0.9 * (len(to_audio) - 1))], 3) if to_audio else None,
        "readyz_503_samples": sum(1 for s in samples if s.status == 503),
        "saturated_samples": sum(1 for s in samples if s.saturated),
        "samples": len(samples),
        "cores_per_call": round(cores_per_call, 4) if cores_per_call is not None else None,
        "rss_idle_mb": round(rss_idle / 1024, 1),
        "rss_per_call_mb": round((peak_rss - rss_idle) / 1024 / peak_admitted, 2) if peak_admitted else None,
        "load_average_1m": round(os.getloadavg()[0], 2),  # the whole machine's, at the round's end
        "problems": problems,
    }
    return not problems, report


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", default="10,50", help="comma-separated numbers of calls offered at once")
    parser.add_argument("--duration", type=float, default=10.0, help="seconds each call streams audio")
    parser.add_argument("--ramp", type=float, default=1.0, help="seconds over which the calls of a round start")
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between samples")
    parser.add_argument("--max-calls", type=int, default=None, help="BRISVOX_MAX_CALLS (unset: the server's default)")
    parser.add_argument("--unstarted-cap", type=int, default=None,
                        help="BRISVOX_MAX_UNSTARTED: connections the server lets sit before start "
                             "(unset: the settings' value, from the environment or the default)")
    parser.add_argument("--loud", type=int, default=500, help="a greeting is bot audio with a peak over this")
    args = parser.parse_args()
    if args.unstarted_cap is None:
        args.unstarted_cap = Settings.from_env().max_unstarted
    server = Server(args.max_calls, args.unstarted_cap)
    ok = True
    try:
        base = server.wait_ready()
        for n in (int(x) for x in args.calls.split(",")):
            passed, report = asyncio.run(run_load(base, server, n, args))
            ok = ok and passed
            print(json.dumps(report), flush=True)
    finally:
        code = server.stop()
        print(f"server exit status {code}; log {server.log_path}", flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
