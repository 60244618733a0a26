"""``brisvox tail [URL]``: the server's calls in the terminal, redrawn every second.

Polls ``GET /api/calls`` (:mod:`brisvox.server.calls_page`; ``--token`` or ``BRISVOX_TOKEN`` as
the bearer token when the server requires one) and draws one line per call: id, transport,
state, turns, and the last turn's stages (turn detection, LLM first token, first audio, voice to
voice), a stage over its budget marked ``!``.  :func:`render` is pure (the JSON in, the lines
out); the loop around it waits on the injected clock and bounds each request.  Ctrl-C ends it
(exit 0); a server that cannot be reached is said on the screen and retried; a refused token
ends it (exit 1).  ``--once`` draws once and exits (scripts, tests).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from typing import Any, TextIO

from brisvox.core.clock import Clock, SystemClock, bounded
from brisvox.core.errors import DeadlineExceeded
from brisvox.server.calllog import LATENCY_BUDGET

__all__ = ["REQUEST_TIMEOUT", "render", "run_tail"]

REQUEST_TIMEOUT = 3.0
_CLEAR = "\x1b[H\x1b[2J"
_STAGES = (("turn_detection", "detect"), ("llm_first_token", "token"), ("first_audio", "audio"),
           ("voice_to_voice", "v2v"))


class _Refused(Exception):
    pass


def _ms(value: float | None, budget: float | None) -> str:
    if value is None:
        return "-"
    mark = "!" if budget is not None and value > budget else ""
    return f"{round(value * 1000)}{mark}"


def render(url: str, calls: Sequence[Mapping[str, Any]], now: str) -> list[str]:
    """The screen for the calls of ``/api/calls`` (times in ms; ``!``: over the stage's budget)."""
    live = sum(1 for c in calls if c.get("live"))
    lines = [f"brisvox tail {url}: {live} live, {len(calls) - live} ended ({now})",
             f"{'CALL':<22} {'TRANSPORT':<10} {'STATE':<14} {'TURNS':>5}  "
             + "  ".join(f"{label:>7}" for _, label in _STAGES)]
    for c in calls:
        state = "live" if c.get("live") else str(c.get("outcome") or "ended")
        last = c.get("last_turn") or {}
        stages = last.get("stages") or {}
        cells = "  ".join(f"{_ms(stages.get(key), LATENCY_BUDGET.get(key)):>7}" for key, _ in _STAGES)
        lines.append(f"{str(c.get('call_id'))[:22]:<22} {str(c.get('transport'))[:10]:<10} {state[:14]:<14} "
                     f"{c.get('turns', 0):>5}  {cells}")
    if not calls:
        lines.append("(no calls yet)")
    return lines


def _fetch(url: str, token: str | None) -> list[dict[str, Any]]:
    request = urllib.request.Request(f"{url.rstrip('/')}/api/calls")
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    try:
        with urllib.request.urlopen(request, timeout=REQUEST_TIMEOUT) as response:
            body = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        if exc.code in (401, 403):
            raise _Refused(f"the server refused the token ({exc.code}): pass --token or set BRISVOX_TOKEN") from None
        raise
    calls = body.get("calls") if isinstance(body, dict) else None
    if not isinstance(calls, list):
        raise ValueError("the server's /api/calls is not a list of calls")
    return [c for c in calls if isinstance(c, dict)]


async def _loop(url: str, token: str | None, interval: float, once: bool, out: TextIO, clock: Clock) -> int:
    while True:
        now = clock.wall().strftime("%H:%M:%S")
        try:
            calls = await bounded(clock, REQUEST_TIMEOUT + 1.0, asyncio.to_thread(_fetch, url, token), "GET /api/calls")
            lines = render(url, calls, now)
        except _Refused as exc:
            print(f"brisvox tail: {exc}", file=sys.stderr)
            return 1
        except (OSError, ValueError, DeadlineExceeded) as exc:
            lines = [f"brisvox tail {url}: cannot reach the server ({exc}); retrying ({now})"]
            if once:
                print(lines[0], file=sys.stderr)
                return 1
        out.write(("" if once else _CLEAR) + "\n".join(lines) + "\n")
        out.flush()
        if once:
            return 0
        await clock.sleep(interval)


def run_tail(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """``brisvox tail`` with the parsed arguments (``url``, ``token``, ``interval``, ``once``)."""
    token = args.token if args.token is not None else os.environ.get("BRISVOX_TOKEN")
    try:
        return asyncio.run(_loop(args.url, token, args.interval, args.once, out or sys.stdout, SystemClock()))
    except KeyboardInterrupt:
        return 0
