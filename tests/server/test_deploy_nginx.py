"""Two brisvox nodes behind nginx with the shipped configuration (deploy/nginx/brisvox.conf.template):
calls spread, a drained node finishes its calls while new ones go to the other, nothing dropped.

nginx has no active health checks: the draining node is found out by the 503 it answers a new
call with, which nginx retries on the other node (``proxy_next_upstream http_503``)."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server._nodes import ROOT, Node, balancer_up, check_a_drain_behind, free_port, two_nodes, until

TEMPLATE = ROOT / "deploy" / "nginx" / "brisvox.conf.template"
NGINX = shutil.which("nginx") or next((p for p in ("/usr/sbin/nginx",) if os.access(p, os.X_OK)), None)

pytestmark = [pytest.mark.realtime,
              pytest.mark.skipif(NGINX is None, reason="nginx is not installed (make deps-test installs the "
                                                       "Debian package)")]


def rendered(listen: str, node1: str, node2: str) -> str:
    """The template with the three addresses, as ``envsubst`` given only their names makes it."""
    text = TEMPLATE.read_text()
    for name, value in (("BRISVOX_LB_LISTEN", listen), ("BRISVOX_NODE1", node1), ("BRISVOX_NODE2", node2)):
        text = text.replace("${" + name + "}", value)
    return text


def main_conf(prefix: Path, site: Path) -> str:
    """A distribution's nginx.conf in miniature: everything under ``prefix``, the site included."""
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers of a root master would run as nobody
    temps = "".join(f"    {kind}_temp_path {prefix / kind};\n" for kind in ("client_body", "proxy", "fastcgi", "uwsgi",
                                                                           "scgi"))
    return (f"{user}worker_processes 2;\npid {prefix / 'nginx.pid'};\nerror_log {prefix / 'error.log'} info;\n"
            f"events {{ worker_connections 256; }}\nhttp {{\n    access_log {prefix / 'access.log'};\n{temps}"
            f"    include {site};\n}}\n")


def test_the_template_names_only_the_three_addresses() -> None:
    # envsubst is given these names alone: any other ${...} would reach nginx unsubstituted
    text = rendered("127.0.0.1:1", "127.0.0.1:2", "127.0.0.1:3")
    assert "${" not in text
    assert "listen 127.0.0.1:1;" in text and "server 127.0.0.1:2 " in text and "server 127.0.0.1:3 " in text


@pytest.fixture
def nodes(tmp_path: Path) -> Iterator[tuple[Node, Node]]:
    with two_nodes(tmp_path) as pair:
        yield pair


@pytest.fixture
def nginx(nodes: tuple[Node, Node], tmp_path: Path) -> Iterator[str]:
    assert NGINX is not None
    port = free_port()
    prefix = tmp_path / "nginx"
    prefix.mkdir()
    site = prefix / "brisvox.conf"
    site.write_text(rendered(f"127.0.0.1:{port}", nodes[0].address, nodes[1].address))
    conf = prefix / "nginx.conf"
    conf.write_text(main_conf(prefix, site))
    check = subprocess.run([NGINX, "-t", "-p", str(prefix), "-c", str(conf)], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    proc = subprocess.Popen([NGINX, "-p", str(prefix), "-c", str(conf), "-g", "daemon off;"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        until("nginx and a node up", lambda: proc.poll() is None and balancer_up(url))
        yield url
    finally:
        proc.terminate()  # SIGTERM: nginx's fast shutdown
        proc.wait(timeout=10)


def test_a_drained_node_finishes_its_calls_while_new_calls_go_to_the_other_and_none_is_dropped(
        nodes: tuple[Node, Node], nginx: str) -> None:
    # Every new call may reach the draining node first: its 503 is retried on the other one.
    check_a_drain_behind(nginx, *nodes)
