"""Stop requests, the drain and the exit status, on virtual time; one real SIGTERM."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from brisvox.core.clock import SimClock
from brisvox.server.lifecycle import (
    EXIT_ABORTED,
    EXIT_CANCELLED,
    EXIT_DRAINED,
    StopRequests,
    drain_on_stop,
)
from brisvox.server.session import SessionCancel, SessionManager, SessionSlot, ShutdownPolicy

ROOT = Path(__file__).resolve().parents[2]


async def timed(seconds: float, cancel: SessionCancel) -> None:
    """A call that lasts ``seconds`` unless asked to stop; a negative length ignores the stop."""
    clock = SimClock()
    if seconds < 0:
        await clock.sleep(-seconds)
        return
    sleeper = asyncio.ensure_future(clock.sleep(seconds))
    stopper = asyncio.ensure_future(cancel.wait())
    try:
        await asyncio.wait([sleeper, stopper], return_when=asyncio.FIRST_COMPLETED)
    finally:
        for t in (sleeper, stopper):
            t.cancel()
        await asyncio.gather(sleeper, stopper, return_exceptions=True)


def start(m: SessionManager[float], *lengths: float) -> None:
    for seconds in lengths:
        slot = m.try_admit()
        assert isinstance(slot, SessionSlot)
        slot.spawn(seconds)


POLICY = ShutdownPolicy(drain_timeout=10, cancel_timeout=2, abort_timeout=1)


async def test_nothing_drains_before_the_first_stop_request() -> None:
    m: SessionManager[float] = SessionManager(timed, max_sessions=4, clock=SimClock())
    stops = StopRequests()
    start(m, 3.0)
    drain = asyncio.ensure_future(drain_on_stop(m, stops, POLICY))
    await SimClock().sleep(5)
    assert not m.draining and not drain.done()
    stops.request("SIGTERM")
    assert (await drain).exit_code == EXIT_DRAINED


async def test_the_first_stop_drains_and_calls_that_finish_in_time_exit_0() -> None:
    clock = SimClock()
    m: SessionManager[float] = SessionManager(timed, max_sessions=4, clock=clock)
    stops = StopRequests()
    start(m, 4.0, 6.0)
    drain = asyncio.ensure_future(drain_on_stop(m, stops, POLICY))
    await clock.sleep(1)
    stops.request("SIGTERM")
    await asyncio.sleep(0)
    assert m.draining and not m.ready
    report = await drain
    assert report.exit_code == EXIT_DRAINED and report.drain_seconds == pytest.approx(5.0)


async def test_calls_outliving_the_drain_timeout_are_cancelled_exit_3() -> None:
    m: SessionManager[float] = SessionManager(timed, max_sessions=4, clock=SimClock())
    stops = StopRequests()
    start(m, 60.0)
    stops.request()
    report = await drain_on_stop(m, stops, POLICY)
    assert report.exit_code == EXIT_CANCELLED and report.drain_seconds == pytest.approx(10.0)


async def test_a_second_stop_skips_the_rest_of_the_drain() -> None:
    clock = SimClock()
    m: SessionManager[float] = SessionManager(timed, max_sessions=4, clock=clock)
    stops = StopRequests()
    start(m, 60.0)
    drain = asyncio.ensure_future(drain_on_stop(m, stops, POLICY))
    stops.request("SIGTERM")
    await clock.sleep(2)
    stops.request("SIGINT")
    report = await drain
    assert report.drain_skipped and report.drain_seconds == pytest.approx(2.0)
    assert report.exit_code == EXIT_CANCELLED


async def test_a_call_that_ignores_its_stop_request_is_aborted_exit_4() -> None:
    m: SessionManager[float] = SessionManager(timed, max_sessions=4, clock=SimClock())
    stops = StopRequests()
    start(m, -60.0)
    stops.request()
    report = await drain_on_stop(m, stops, POLICY)
    assert report.exit_code == EXIT_ABORTED
    assert (report.drain_seconds, report.cancel_seconds) == (pytest.approx(10.0), pytest.approx(2.0))


@pytest.mark.realtime
def test_sigterm_drains_a_real_server_with_no_calls_and_it_exits_0() -> None:
    env = {**os.environ, "BRISVOX_PORT": "0", "BRISVOX_HOST": "127.0.0.1", "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.Popen([sys.executable, "-m", "brisvox", "serve", "--workers", "1"], env=env, cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert m, line + proc.stderr.read() if proc.stderr else line
        url = m.group(1)
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as r:
            assert r.status == 200
        with urllib.request.urlopen(f"{url}/readyz", timeout=5) as r:
            assert r.status == 200 and b'"active":0' in r.read()
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "stopped (drained, exit status 0)" in out
    assert "SIGTERM: draining" in err
