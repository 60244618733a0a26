"""Added latency of a remote tool call served by the TypeScript client, against the Python SDK and in process.

One ReadOnly tool (``opening_hours``: returns at once) runs through the tool engine three ways in
the same run: in process (a ``brisvox.tool`` method of a Brain), remote served by the Python SDK
(``brisvox.sdk.serve`` in a child process) and remote served by the TypeScript client
(``clients/ts/examples/shop.ts`` under Node, a child process), both on 127.0.0.1 over an
``AgentLink``.  Reported: p50 and p95 of one ``execute`` in microseconds, what each link adds
over in process, and the Node agent's p50 as a ratio of the Python SDK's.

Needs ``npm ci`` in clients/ts (the Node example is compiled here when its build is missing).

    python bench/agent_link_ts.py [--repeats 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel

import brisvox
from brisvox.agent.context import ToolCall
from brisvox.agent.tools import CancelToken, ToolEngine, ToolRegistry
from brisvox.core.clock import SystemClock, monotonic_ns
from brisvox.core.tasks import TaskScope
from brisvox.sdk import Brain, serve
from brisvox.server.agent_link import AgentLink, AgentLinkConfig

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _procutil import read_port, write_port
from agent_link import _percentiles

CLIENT = Path(__file__).resolve().parents[1] / "clients" / "ts"


class Day(BaseModel):
    day: str


class Shop(Brain):
    @brisvox.tool.read_only(timeout=2.0)
    async def opening_hours(self, args: Day) -> str:
        """When the shop is open on a day."""
        return f"{args.day}: nine to five"


async def _serve_child(port_file: str) -> None:
    server = await serve(Shop, "127.0.0.1", 0)
    write_port(port_file, server.sockets[0].getsockname()[1])
    await server.serve_forever()


async def _time(registry: ToolRegistry, repeats: int) -> tuple[float, float]:
    samples: list[int] = []
    async with ToolEngine(registry, "bench", SystemClock()) as engine:
        for n in range(repeats + 100):
            calls = [ToolCall(id=f"t{n}.0", name="opening_hours", arguments={"day": "monday"})]
            t0 = monotonic_ns()
            ex = await engine.execute(calls, n + 1, CancelToken())
            dt = monotonic_ns() - t0
            ex.mark_delivered()
            if n >= 100:  # warm-up
                samples.append(dt)
    return _percentiles(samples)


async def _remote(port: int, repeats: int) -> tuple[float, float]:
    async with TaskScope("bench") as scope:
        link = await AgentLink.open(AgentLinkConfig(url=f"ws://127.0.0.1:{port}"), SystemClock(), call_id="bench",
                                    agent="bench", transport="bench", parameters={}, scope=scope)
        assert link is not None, f"the agent on port {port} did not answer"
        timed = await _time(link.tools_into(None), repeats)
        await link.close()
    return timed


async def _measure(repeats: int, python_port: int, node_port: int) -> None:
    local = ToolRegistry()
    tool = Shop().opening_hours
    local.register(tool.spec, tool)
    rows = [("in process", await _time(local, repeats)), ("Python SDK (link)", await _remote(python_port, repeats)),
            ("TypeScript client (link)", await _remote(node_port, repeats))]
    base = rows[0][1]
    print(f"{'':28}{'p50 us':>10}{'p95 us':>10}{'added p50':>11}{'added p95':>11}")
    for name, (p50, p95) in rows:
        print(f"{name:28}{p50:10.1f}{p95:10.1f}{p50 - base[0]:11.1f}{p95 - base[1]:11.1f}")
    print(f"TypeScript / Python SDK, p50: {rows[2][1][0] / rows[1][1][0]:.2f}")


def _node_agent() -> tuple[subprocess.Popen[str], int]:
    example = CLIENT / "build-test" / "examples" / "shop.js"
    if not example.exists():
        subprocess.run([str(CLIENT / "node_modules" / ".bin" / "tsc"), "-p", "tsconfig.test.json"], cwd=CLIENT,
                       check=True)
    child = subprocess.Popen(["node", str(example), "0"], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None
    first = json.loads(child.stdout.readline())
    return child, int(first["listening"])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # the child: serve the Python brain, write the port here
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve_child(args.serve))
        return
    node, node_port = _node_agent()
    with tempfile.TemporaryDirectory() as tmp:
        port_file = os.path.join(tmp, "port")
        child = subprocess.Popen([sys.executable, __file__, "--serve", port_file], env=os.environ)
        try:
            for _ in range(500):
                if read_port(port_file) or child.poll() is not None:
                    break
                time.sleep(0.01)
            asyncio.run(_measure(args.repeats, read_port(port_file), node_port))
        finally:
            child.terminate()
            child.wait(timeout=5)
            node.terminate()
            node.wait(timeout=5)


if __name__ == "__main__":
    main()
