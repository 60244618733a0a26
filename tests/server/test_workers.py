"""``brisvox serve --workers N``: the node's shared table, and a real two-worker node."""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from brisvox.server.node import NodeRow, NodeSeat, NodeTable
from brisvox.server.workers import WorkerStart, run_node
from tests.server._nodes import AGENT, Node, call_now, calls_through, metrics_with, readyz, until

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


@pytest.fixture
def node(tmp_path: Path) -> Iterator[Node]:
    agent = tmp_path / "node.toml"
    agent.write_text(AGENT)
    n = Node(agent, workers=2, env={"BRISVOX_MAX_CALLS": "8"})
    try:
        assert re.search(r"listening on .*2 workers", n.url and "".join(n.out)), n.log()
        yield n
    finally:
        n.kill()


@pytest.mark.realtime
def test_a_two_worker_node_answers_for_itself_restarts_a_dead_worker_and_drains_as_one(node: Node) -> None:
    url = node.url
    ready = readyz(url)
    assert ready["status"] == 200 and ready["node"]["workers"] == 2 and ready["node"]["alive"] == 2
    assert ready["node"]["max"] == 8  # BRISVOX_MAX_CALLS is the node's: 4 per worker
    pids = [w["pid"] for w in ready["node"]["each"]]
    assert len(set(pids)) == 2 and node.proc.pid not in pids

    assert call_now(url, 1.0)
    metrics = until("the call in the node's metrics", lambda: metrics_with(
        url, 'brisvox_calls_ended_total{outcome="ok"} 1.0', "brisvox_active_calls 0.0"))  # the table: 0.5 s late
    assert "brisvox_workers_alive 2.0" in metrics and "brisvox_max_calls 8.0" in metrics

    os.kill(pids[0], signal.SIGKILL)  # a worker dies; the node goes on and replaces it
    assert call_now(url, 0.5)

    def replaced() -> dict[str, Any] | None:
        r = readyz(url)
        each = [w["pid"] for w in r["node"]["each"]]
        return r if r["node"]["alive"] == 2 and pids[0] not in each else None

    again = until("the replacement worker", replaced)
    assert pids[1] in [w["pid"] for w in again["node"]["each"]]  # the other worker was untouched
    # the dead worker's count is kept (its multiprocess file stays)
    assert until("the restart and both calls", lambda: metrics_with(
        url, "brisvox_worker_restarts_total 1.0", 'brisvox_calls_ended_total{outcome="ok"} 2.0'))

    assert node.stop(timeout=40) == 0, node.log()
    assert "stopped (2 workers, exit status 0)" in "".join(node.out)
    assert "worker 0 died (exit status -9)" in "".join(node.err)


def test_a_node_whose_workers_cannot_start_exits_1_instead_of_restarting_them(
        capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture) -> None:
    def cannot_start(start: WorkerStart) -> int:
        return 1  # what a worker returns when its providers cannot be built

    assert run_node(2, "127.0.0.1", 0, cannot_start, banner=lambda port: f"listening on {port}") == 1
    assert "listening on" not in capsys.readouterr().out
    assert "failed to start" in caplog.text and "restarting" not in caplog.text


@pytest.mark.realtime
def test_new_calls_go_to_the_worker_with_fewer_calls_when_the_other_is_held_busy(tmp_path: Path) -> None:
    agent = tmp_path / "node.toml"
    agent.write_text(AGENT)
    node = Node(agent, workers=2, env={"BRISVOX_MAX_CALLS": "20"})
    try:
        url = node.url
        busy, idle = [w["pid"] for w in readyz(url)["node"]["each"]]

        def actives() -> dict[int, int]:
            return {w["pid"]: w["active"] for w in readyz(url)["node"]["each"]}

        async def scenario() -> tuple[list[bool], list[bool], dict[int, int]]:
            os.kill(idle, signal.SIGSTOP)  # six calls all land on the other worker
            try:
                held = asyncio.create_task(calls_through(url, 16.0, 6))
                await asyncio.to_thread(until, "six calls on one worker",
                                        lambda: actives().get(busy) == 6)
            finally:
                os.kill(idle, signal.SIGCONT)
            new = asyncio.create_task(calls_through(url, 8.0, 4, gap=0.2))
            await asyncio.sleep(1.5)  # all four sent before a poll's connection counts on a worker
            spread = await asyncio.to_thread(until, "the ten calls", lambda: (
                a if sum((a := actives()).values()) == 10 else None))
            return await held, await new, spread

        held, new, spread = asyncio.run(scenario())
        assert spread == {busy: 6, idle: 4}, spread  # the worker held busy took none of the new calls
        assert held == [True] * 6 and new == [True] * 4
        assert node.stop(timeout=40) == 0, node.log()
    finally:
        node.kill()
