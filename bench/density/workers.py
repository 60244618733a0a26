"""Calls per machine: ``brisvox serve --workers 1`` against ``--workers 2``, in one run.

The agent, the client and the pass rule are ``run.py``'s (p95 overhead under 100 ms, every turn
answered, no underrun with a 40 ms client buffer).  For each mode a ladder of call counts is
run, each point on a fresh node; calls per machine is the largest count that passes with every
smaller one passing too.  The modes alternate point by point (1, 2, 1, 2, ...), so a neighbour's
load falls on both.

Placement: nothing is pinned.  On a machine with as many cores as workers the client cannot have
a core of its own, so it shares them with the node; the table gives the client's own CPU (its
process, over the run) next to the node's (the supervisor and every worker), so the reader can
see what the client took from the node.  The node's CPU per worker and each worker's calls at the
node's peak (sampled from ``/readyz`` once a second) show how the calls were spread over the workers.

    python bench/density/workers.py            # the ladders, 6 turns per caller (about 20 minutes)
    python bench/density/workers.py --short    # 2 turns per caller, two points per mode (about 6 minutes)
    python bench/density/workers.py --ns1 40,60 --ns2 80,120 --turns 3

Results go to ``--out`` (default bench/density/results/workers-<UTC time>/): summary.jsonl, the
nodes' logs and table.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from run import loadtest, machine, parser, passes, record, report, results_dir, server, speech_wav, use_port

LADDERS = {1: "40,50,60,70", 2: "80,100,120,140"}
SHORT = {1: "50,60", 2: "100,120"}
_TICK = os.sysconf("SC_CLK_TCK")


def tree(pid: int) -> list[int]:
    """``pid`` and every process under it (Linux /proc)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as f:
                    todo.extend(int(c) for c in f.read().split())
        except OSError:
            continue  # gone meanwhile
    return out


def cpu_seconds(pids: Sequence[int]) -> dict[int, float]:
    """utime + stime of each process still there, in seconds."""
    out = {}
    for p in pids:
        try:
            with open(f"/proc/{p}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        out[p] = (int(fields[11]) + int(fields[12])) / _TICK
    return out


class Spread:
    """Each worker's active calls over a run, read from the node's ``/readyz`` once a second
    (its ``node.each`` rows: the table the workers publish every 0.5 s)."""

    def __init__(self, url: str) -> None:
        self.url = url.replace("ws://", "http://").rsplit("/", 1)[0] + "/readyz"
        self.samples: list[list[int]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Spread:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            try:
                with urllib.request.urlopen(self.url, timeout=2) as r:
                    body = r.read()
            except urllib.error.HTTPError as exc:  # 503 while full still has the body
                body = exc.read()
            except OSError:
                continue  # the node is busy or gone: a missing sample, not a failure of the run
            each = json.loads(body).get("node", {}).get("each", [])
            if each:  # a single process has no node table
                self.samples.append([int(w["active"]) for w in each])

    def peak(self) -> dict[str, Any]:
        """The sample with the most calls (each worker's calls then), the widest gap between the
        busiest and the idlest worker while the calls arrive and are held (up to the last sample at
        the peak: after it the gap is how the calls end, not how they were accepted), and every sample."""
        if not self.samples:
            return {"spread_at_peak": [], "spread_max_gap": None}
        peak = max(map(sum, self.samples))
        last = max(i for i, s in enumerate(self.samples) if sum(s) == peak)
        return {"spread_at_peak": self.samples[last],
                "spread_max_gap": max(max(s) - min(s) for s in self.samples[:last + 1]),
                "spread_series": self.samples}


def point(workers: int, n: int, turns: int, args: argparse.Namespace, wav: Path) -> dict[str, Any]:
    log = args.out / f"workers{workers}_n{n}.log"
    with server("brisvox", Path(), log, "asyncio", "on", workers=workers, cpus=None) as (pid, url):
        pids = tree(pid)
        before, t0 = cpu_seconds(pids), time.monotonic()
        with Spread(url) as spread:
            summary = loadtest(f"workers={workers} n={n}", url, n, turns, args, wav,
                               args.out / f"workers{workers}_n{n}.json")
        after, t1 = cpu_seconds(pids), time.monotonic()
    used = {p: after[p] - before[p] for p in after if p in before}
    wall = t1 - t0
    summary.update({
        "workers": workers, "load_before": os.getloadavg()[0],
        "node_cpu_pct": round(100 * sum(used.values()) / wall, 1),
        # the supervisor first, then each worker: how the kernel spread the calls
        "process_cpu_pct": [round(100 * used[p] / wall, 1) for p in pids if p in used],
        **spread.peak(),
    })
    return summary


def table(points: Sequence[dict[str, Any]]) -> str:
    rows = ["| workers | calls per machine |", "| --- | --- |"]
    for w in (1, 2):
        best = 0
        for p in sorted((p for p in points if p["workers"] == w), key=lambda p: p["n"]):
            if not passes(p):
                break
            best = p["n"]
        rows.append(f"| {w} | {best} |")
    rows.append("\nEvery point (node CPU: the supervisor and its workers, % of one core, over the client's run; "
                "client CPU: the load client's own process, the same window):\n")
    rows.append("| workers | calls | replies | overhead p50 / p95 ms | underrun turns (40 ms) | node CPU % | "
                "per process % | calls per worker at the peak | widest gap between workers | client CPU % | client CPU ms per call-second | client lag max ms | load avg | pass |")
    rows.append("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for p in points:
        rows.append(f"| {p['workers']} | {p['n']} | {p['replies']}/{p['turns']} | {p['ovh_p50_ms']} / {p['ovh_p95_ms']} | "
                    f"{p['underrun_turns']} | {p['node_cpu_pct']} | {' + '.join(map(str, p['process_cpu_pct']))} | "
                    f"{' + '.join(map(str, p.get('spread_at_peak', []))) or '-'} | "
                    f"{p.get('spread_max_gap') if p.get('spread_max_gap') is not None else '-'} | "
                    f"{p['client_cpu_pct']} | {p.get('client_cpu_ms_per_call_s', '-')} | {p['client_send_lag_max_ms']} | {p['load_before']:.2f} | "
                    f"{'yes' if passes(p) else 'no'} |")
    return "\n".join(rows)


def main() -> int:
    ap = parser(__doc__)
    ap.add_argument("--short", action="store_true", help="2 turns per caller, two points per mode")
    ap.add_argument("--ns1", default=None, help="call counts for --workers 1 (comma-separated)")
    ap.add_argument("--ns2", default=None, help="call counts for --workers 2")
    ap.add_argument("--turns", type=int, default=None, help="turns per caller (default 6, 2 with --short)")
    args = ap.parse_args()
    stamp = results_dir(args, "workers-")
    use_port(args.port)
    ladders = SHORT if args.short else LADDERS
    turns = args.turns or (2 if args.short else 6)
    ns = {1: [int(x) for x in (args.ns1 or ladders[1]).split(",")],
          2: [int(x) for x in (args.ns2 or ladders[2]).split(",")]}
    order = [(w, n) for i in range(max(map(len, ns.values()))) for w in (1, 2) if i < len(ns[w]) for n in [ns[w][i]]]
    wav = speech_wav(args.out)
    points: list[dict[str, Any]] = []
    with (args.out / "summary.jsonl").open("a") as sink:
        for w, n in order:
            summary = point(w, n, turns, args, wav)
            record(sink, points, summary, f"workers={w} n={n}", f"node cpu {summary['node_cpu_pct']} %, client cpu "
                                                                  f"{summary['client_cpu_pct']} %")
    text = (f"# Calls per machine, --workers 1 and 2, {stamp}\n\nMachine: {machine()}; nothing pinned (node and client "
            f"share the cores); {turns} turns per caller; load average at the end {os.getloadavg()}.\n\n"
            f"{table(points)}\n")
    return report(args.out, text)


if __name__ == "__main__":
    sys.exit(main())
