"""Two brisvox nodes behind HAProxy with the shipped configuration (deploy/haproxy/haproxy.cfg):
calls spread, a drained node finishes its calls while new ones go to the other, nothing dropped."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server._nodes import ROOT, Node, balancer_up, check_a_drain_behind, free_port, two_nodes, until

HAPROXY_CFG = ROOT / "deploy" / "haproxy" / "haproxy.cfg"

pytestmark = [pytest.mark.realtime,
              pytest.mark.skipif(shutil.which("haproxy") is None, reason="haproxy is not installed (make deps-test "
                                                                          "installs the Debian package)")]


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    with two_nodes(tmp_path) as pair:
        yield pair


@pytest.fixture
def haproxy(nodes: tuple[Node, Node]) -> Iterator[str]:
    port = free_port()
    env = {**os.environ, "BRISVOX_LB_BIND": f"127.0.0.1:{port}", "BRISVOX_NODE1": nodes[0].address,
           "BRISVOX_NODE2": nodes[1].address}
    proc = subprocess.Popen(["haproxy", "-db", "-f", str(HAPROXY_CFG)], env=env, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        until("HAProxy and both nodes up", lambda: balancer_up(url))
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_drained_node_finishes_its_calls_while_new_calls_go_to_the_other_and_none_is_dropped(
        nodes: tuple[Node, Node], haproxy: str) -> None:
    # The first new call comes before HAProxy's health check has seen a's 503.
    check_a_drain_behind(haproxy, *nodes)
