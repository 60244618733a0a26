"""A long fuzz run of hostile clients against a real server (the suite's short one is
tests/server/test_fuzz_server.py; both use tests/server/_fuzz.py).

The server is the real Starlette app under uvicorn as ``brisvox serve`` runs it (the edge's
protocol classes, the limits from ``BRISVOX_*``), with the echo engine, in a child process.
Hypothesis generates each client's life: a first message (a valid ``start`` or anything
else), 25 to 40 messages (audio of any size, documented and arbitrary JSON, text, JSON
nested thousands deep, text that is not UTF-8, oversized messages, pings) and an ending
(stop, close frame, dropped socket), or a raw TCP pattern.  Every answer must be a
documented message, error code and close code (the tables of docs/WEBSOCKET_PROTOCOL.md);
every ``--batch`` sessions ``/healthz`` and a normal call must work; at the end the
server's log must hold no traceback and no ERROR line.

Reported: sessions, messages, wall time, messages per second, the server's RSS before and
after, its CPU time, and the close codes and error codes seen.

    python bench/fuzz_server.py [--messages 100000] [--batch 50] [--seed 0]
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "src"), str(ROOT)]

from hypothesis import HealthCheck, given, seed, settings  # noqa: E402
from tests.server._fuzz import FuzzServer, Session, Tally, healthy, no_traceback, play, sessions  # noqa: E402


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=50, help="sessions between two health checks")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    tally = Tally()
    examples = args.messages // 25 + 1  # at least 25 messages a WebSocket session
    with FuzzServer() as server:
        healthy(server)
        rss0, cpu0, t0 = server.rss_kib(), _cpu_seconds(server.proc.pid), time.monotonic()

        @seed(args.seed)
        @settings(max_examples=examples, deadline=None, database=None,
                  suppress_health_check=list(HealthCheck))
        @given(sessions())
        def attack(session: Session) -> None:
            if tally.messages >= args.messages:
                return
            play(server.url, session, tally)
            if tally.sessions % args.batch == 0:
                healthy(server)

        while tally.messages < args.messages:
            attack()
        healthy(server)
        wall = time.monotonic() - t0
        rss1, cpu1 = server.rss_kib(), _cpu_seconds(server.proc.pid)
        no_traceback(server)
    print(f"sessions {tally.sessions}, messages {tally.messages} in {wall:.1f} s "
          f"({tally.messages / wall:.0f} messages/s); server CPU {cpu1 - cpu0:.1f} s; "
          f"server RSS {rss0 / 1024:.1f} -> {rss1 / 1024:.1f} MiB")
    print("close codes:", dict(sorted(tally.closes.items(), key=lambda kv: (kv[0] is None, kv[0] or 0))))
    print("error codes:", dict(tally.errors.most_common()))
    print("ok: only documented answers, healthy after every batch, no traceback in the server's log")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
