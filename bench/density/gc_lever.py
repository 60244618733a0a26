"""The garbage collector's share of a call: tracked objects per call, and the collections under load.

The server runs with the probe of ``gc_site/`` (``sitecustomize``: every collection timed in
thread CPU per generation, from the moment the start-up heap is frozen; a census of the tracked
objects by type on SIGUSR1).  Two measurements, alternating builds (``--src``, repeat):

* ``census``: listening calls (``call_lever.py``'s silence callers); the census at 1 call and at
  ``--calls`` calls gives the tracked objects each call adds, by type, and its tasks.
* ``run``: one ``run.py`` point (``--ns 100:2``: the density callers, turns and replies) and the
  collections it caused: count, CPU, the longest, per generation.  ``--t0 7000`` (repeatable,
  alternating) sets the generation-0 threshold: the policy lever.

    python bench/density/gc_lever.py census --src /other/src --src src --rounds 2
    python bench/density/gc_lever.py run --ns 100:2 --t0 700 --t0 7000 --rounds 2
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[1] / "src"))  # the client: this checkout's

import call_lever  # noqa: E402
import run  # noqa: E402

from brisvox.loadtest_conn import Connection, open_call  # noqa: E402

SITE = HERE / "gc_site"


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def _census(url: str, pid: int, calls: int, out: Path) -> float:
    conns: list[Connection] = []
    feed = asyncio.ensure_future(call_lever.feed_silence(conns))
    try:
        for n in (1, calls):
            while len(conns) < n:
                conns.append(await open_call(url, 10))
                await asyncio.sleep(0.05)
            await asyncio.sleep(3.0)  # settled: every call with the engine
            os.kill(pid, signal.SIGUSR1)
            await asyncio.sleep(1.0)
    finally:
        feed.cancel()
        await asyncio.wait([feed])
        for conn in conns:
            await conn.close()
    one, many = [r for r in _records(out) if "census" in r]
    per_type = Counter(many["census"])
    per_type.subtract(one["census"])
    top = ", ".join(f"{k} {v / (calls - 1):.0f}" for k, v in per_type.most_common(14))
    tasks = ", ".join(f"{k} {v // calls}" for k, v in Counter(many["tasks"]).most_common(8))
    print(f"  by type per call: {top}\n  tasks per call: {tasks}")
    return float(many["tracked"] - one["tracked"]) / (calls - 1)


def census(args: argparse.Namespace, src: Path) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "gc.jsonl"
        os.environ["GCPROBE_OUT"] = str(out)
        with run.server("brisvox", Path(), Path(tmp) / "server.log", "asyncio", "on",
                        src=Path(f"{src}{os.pathsep}{SITE}")) as (pid, url):
            per_call = asyncio.run(_census(url, pid, args.calls, out))
    print(f"{src}: {per_call:.0f} tracked objects per listening call ({args.calls} calls, load "
          f"{os.getloadavg()[0]:.1f})", flush=True)


def one_run(args: argparse.Namespace, src: Path, t0: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "gc.jsonl"
        os.environ.update(GCPROBE_OUT=str(out), GCPROBE_T0=str(t0))
        load = os.getloadavg()[0]
        run.server.__wrapped__.__kwdefaults__["src"] = Path(f"{src}{os.pathsep}{SITE}")  # type: ignore[attr-defined]
        sys.argv = ["run.py", "--frameworks", "brisvox", "--brisvox-ns", args.ns, "--port", str(args.port),
                    "--out", str(Path(tmp) / "run")]
        run.main()
        last = _records(out)[-1]
    gens = "; ".join(f"gen {g}: {s[0]} collections, {1000 * s[1]:.0f} ms CPU, longest {1000 * s[3]:.1f} ms"
                     for g, s in last["stats"].items())
    print(f"{src} threshold0={t0} (load {load:.1f}): {gens}", flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("mode", choices=("census", "run"))
    ap.add_argument("--src", type=Path, action="append", help="a build to measure (repeat to alternate)")
    ap.add_argument("--calls", type=int, default=20, help="census: listening calls")
    ap.add_argument("--ns", default="100:2", help="run: run.py's N:turns")
    ap.add_argument("--t0", type=int, action="append", help="run: generation-0 thresholds to alternate")
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--port", type=int, default=8821)
    args = ap.parse_args()
    run.use_port(args.port)
    srcs = args.src or [HERE.parents[1] / "src"]
    for _ in range(args.rounds):
        for src in srcs:
            if args.mode == "census":
                census(args, src)
            else:
                for t0 in args.t0 or [700]:
                    one_run(args, src, t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
