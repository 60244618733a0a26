"""``brisvox serve --workers N``: the node's shared table, and a real two-worker node."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from brisvox.audio.wav import WavAudio
from brisvox.server.node import NodeRow, NodeSeat, NodeTable
from brisvox.transport.websocket.client import ClientOptions, run

ROOT = Path(__file__).resolve().parents[2]
AGENT = '[agent]\nname = "node"\nprompt = "You answer briefly."\n[llm]\nprovider = "scripted"\n'


# --- the table ---------------------------------------------------------------------------------


def test_the_node_totals_sum_the_live_workers_and_ready_needs_one_ready_worker() -> None:
    table = NodeTable(3)
    table.write(0, NodeRow(pid=10, alive=1, ready=0, active=4, reserved=1, max_calls=4))
    table.write(1, NodeRow(pid=11, alive=1, ready=1, active=2, max_calls=4))
    table.write(2, NodeRow(pid=12, alive=0, ready=1, active=9, max_calls=4))  # dead: not counted
    t = table.totals()
    assert (t.alive, t.ready, t.active, t.reserved, t.max_calls, t.admits) == (2, 1, 6, 1, 8, True)
    table.write(1, NodeRow(pid=11, alive=1, ready=0, active=4, max_calls=4))
    assert not table.totals().admits


def test_a_node_whose_live_workers_all_drain_is_draining() -> None:
    table = NodeTable(2)
    table.write(0, NodeRow(pid=1, alive=1, draining=1))
    table.write(1, NodeRow(pid=2, alive=1, ready=1))
    assert not table.totals().draining
    table.write(1, NodeRow(pid=2, alive=1, ready=1, draining=1))
    assert table.totals().draining and not table.totals().admits


def test_a_dead_workers_counters_stay_in_the_node_after_its_row_is_cleared() -> None:
    table = NodeTable(2)
    seat = NodeSeat(table, 1, pid=7)
    edge = type("E", (), {"handshake_timeouts": 3, "evicted_unstarted": 0, "pongs_dropped": 0, "refused_frames": 1,
                          "close_deadlines": 0})()
    seat.publish(alive=True, ready=True, draining=False, active=2, reserved=0, max_calls=5, edge=edge, wire=None)  # type: ignore[arg-type]
    table.retire(1)
    t = table.totals()
    assert t.edge["handshake_timeouts"] == 3 and t.edge["refused_frames"] == 1
    assert (t.restarts, t.alive, t.active) == (1, 0, 0)
    seat.publish(alive=True, ready=True, draining=False, active=0, reserved=0, max_calls=5, edge=edge, wire=None)  # type: ignore[arg-type]
    assert table.totals().edge["handshake_timeouts"] == 6  # the replacement counts from zero again


def test_a_seat_outside_the_node_is_refused_by_name() -> None:
    with pytest.raises(IndexError, match="worker 2 is not in a node of 2"):
        NodeSeat(NodeTable(2), 2, pid=1)


# --- a real node ---------------------------------------------------------------------------------


def _get(url: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def _until(what: str, check: Callable[[], Any], timeout: float = 30.0) -> Any:
    for _ in range(int(timeout / 0.1)):
        value = check()
        if value:
            return value
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], str]]:
    agent = tmp_path / "node.toml"
    agent.write_text(AGENT)
    env = {**os.environ, "BRISVOX_PORT": "0", "BRISVOX_HOST": "127.0.0.1", "PYTHONPATH": str(ROOT / "src"),
           "BRISVOX_MAX_CALLS": "8"}
    proc = subprocess.Popen([sys.executable, "-m", "brisvox", "serve", "--workers", "2", str(agent)], env=env,
                            cwd=ROOT, text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+) .*2 workers", line)
        assert m, line + (proc.stderr.read() if proc.stderr and proc.poll() is not None else "")
        yield proc, m.group(1)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _readyz(url: str) -> dict[str, Any]:
    status, body = _get(f"{url}/readyz")
    data: dict[str, Any] = json.loads(body)
    data["status"] = status
    return data


def _metrics_with(url: str, *lines: str) -> str | None:
    text = _get(f"{url}/metrics")[1].decode()
    return text if all(line in text for line in lines) else None


def _call(url: str, seconds: float) -> bool:
    audio = WavAudio(pcm=b"\0\0" * int(16000 * seconds), sample_rate=16000)
    result = asyncio.run(run(ClientOptions(url=url.replace("http", "ws") + "/ws", audio=audio, linger=0.2)))
    return result.ok


@pytest.mark.realtime
def test_a_two_worker_node_answers_for_itself_restarts_a_dead_worker_and_drains_as_one(
        node: tuple[subprocess.Popen[str], str]) -> None:
    proc, url = node
    ready = _readyz(url)
    assert ready["status"] == 200 and ready["node"]["workers"] == 2 and ready["node"]["alive"] == 2
    assert ready["node"]["max"] == 8  # BRISVOX_MAX_CALLS is the node's: 4 per worker
    pids = [w["pid"] for w in ready["node"]["each"]]
    assert len(set(pids)) == 2 and proc.pid not in pids

    assert _call(url, 1.0)
    metrics = _until("the call in the node's metrics", lambda: _metrics_with(
        url, 'brisvox_calls_ended_total{outcome="ok"} 1.0', "brisvox_active_calls 0.0"))  # the table: 0.5 s late
    assert "brisvox_workers_alive 2.0" in metrics and "brisvox_max_calls 8.0" in metrics

    os.kill(pids[0], signal.SIGKILL)  # a worker dies; the node goes on and replaces it
    assert _call(url, 0.5)
    def replaced() -> dict[str, Any] | None:
        r = _readyz(url)
        each = [w["pid"] for w in r["node"]["each"]]
        return r if r["node"]["alive"] == 2 and pids[0] not in each else None

    again = _until("the replacement worker", replaced)
    assert pids[1] in [w["pid"] for w in again["node"]["each"]]  # the other worker was untouched
    # the dead worker's count is kept (its multiprocess file stays)
    assert _until("the restart and both calls", lambda: _metrics_with(
        url, "brisvox_worker_restarts_total 1.0", 'brisvox_calls_ended_total{outcome="ok"} 2.0'))

    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=40)
    assert proc.returncode == 0, err
    assert "stopped (2 workers, exit status 0)" in out
    assert "worker 0 died (exit status -9)" in err
