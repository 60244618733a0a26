"""Two brisvox nodes behind HAProxy with the shipped configuration (deploy/haproxy/haproxy.cfg):
calls spread, a drained node finishes its calls while new ones go to the other, nothing dropped."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server._nodes import AGENT, ROOT, Node, call, calls_ended, readyz, until

HAPROXY_CFG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"

pytestmark = [pytest.mark.realtime,
              pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed (make deps-test "
                                                                          "installs the Debian package)")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    agent = tmp_path / "node.toml"
    agent.write_text(AGENT)
    a, b = Node(agent), Node(agent)
    try:
        yield a, b
    finally:
        a.kill()
        b.kill()


@pytest.fixture
def haproxy(nodes: tuple[Node, Node]) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "BRISVOX_LB_BIND": f"127.0.0.1:{port}", "BRISVOX_NODE1": nodes[0].address,
           "BRISVOX_NODE2": nodes[1].address}
    proc = subprocess.Popen(["haproxy", "-db", "-f", str(HAPROXY_CFG)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        until("HAProxy and both nodes up", lambda: _up(url))
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def _up(url: str) -> bool:
    try:
        return bool(readyz(url)["status"] == 200)
    except OSError:
        return False


async def _calls(url: str, seconds: float, n: int, gap: float = 0.0) -> list[bool]:
    ws = url.replace("http://", "ws://") + "/ws"
    tasks = []
    for _ in range(n):
        tasks.append(asyncio.create_task(call(ws, seconds)))
        await asyncio.sleep(gap)
    return list(await asyncio.gather(*tasks))


def test_a_drained_node_finishes_its_calls_while_new_calls_go_to_the_other_and_none_is_dropped(
        nodes: tuple[Node, Node], haproxy: str) -> None:
    a, b = nodes

    async def scenario() -> tuple[list[bool], list[bool]]:
        long = asyncio.create_task(_calls(haproxy, 6.0, 4))  # least-connections: two on each node
        for _ in range(100):  # the loop carries the calls: poll without blocking it
            actives = [(await asyncio.to_thread(readyz, n.url))["active"] for n in (a, b)]
            if actives == [2, 2]:
                break
            await asyncio.sleep(0.1)
        else:
            raise AssertionError(f"calls per node: {actives}, not two on each")
        a.proc.terminate()  # SIGTERM: node a drains
        # New calls while a drains, the first before HAProxy's health check has seen a's 503.
        short = await _calls(haproxy, 1.0, 4, gap=0.4)
        return await long, short

    long, short = asyncio.run(scenario())
    assert long == [True] * 4 and short == [True] * 4
    assert a.proc.wait(timeout=30) == 0, a.log()  # drained: its calls ended on their own
    assert "stopped (drained, exit status 0)" in "".join(a.out)
    assert calls_ended(a) == 2, a.log()  # a took none of the new calls
    until("b's six calls ended", lambda: calls_ended(b) == 6)
