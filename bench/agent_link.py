"""Added latency of a remote tool call over the agent link, against the same tool in process.

One ReadOnly tool (returns at once) runs through the tool engine two ways in the same run:
in process (a ``brisvox.tool`` method of a Brain), and remote (the same Brain served by
``brisvox.sdk.serve`` in a child process on 127.0.0.1, called over an ``AgentLink``).
Reported: p50 and p95 of one ``execute`` in microseconds, and the added latency (remote
minus in process).

    python bench/agent_link.py [--repeats 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
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


class Query(BaseModel):
    q: str


class Lookup(Brain):
    @brisvox.tool.read_only
    async def look(self, args: Query) -> dict[str, str]:
        """Look something up."""
        return {"found": args.q}


async def _serve_child(port_file: str) -> None:
    server = await serve(Lookup, "127.0.0.1", 0)
    write_port(port_file, server.sockets[0].getsockname()[1])
    await server.serve_forever()


def _percentiles(samples: list[int]) -> tuple[float, float]:
    q = statistics.quantiles(samples, n=100)
    return statistics.median(samples) / 1000.0, q[94] / 1000.0


async def _time(registry: ToolRegistry, repeats: int) -> tuple[float, float]:
    samples: list[int] = []
    async with ToolEngine(registry, "bench", SystemClock()) as engine:
        for n in range(repeats + 100):
            calls = [ToolCall(id=f"t{n}.0", name="look", arguments={"q": "x"})]
            t0 = monotonic_ns()
            ex = await engine.execute(calls, n + 1, CancelToken())
            dt = monotonic_ns() - t0
            ex.mark_delivered()
            if n >= 100:
                samples.append(dt)
    return _percentiles(samples)


async def _measure(repeats: int, port: int) -> None:
    local = ToolRegistry()
    tool = Lookup().look
    local.register(tool.spec, tool)
    in_process = await _time(local, repeats)
    async with TaskScope("bench") as scope:
        link = await AgentLink.open(AgentLinkConfig(url=f"ws://127.0.0.1:{port}"), SystemClock(), call_id="bench",
                                    agent="bench", transport="bench", parameters={}, scope=scope)
        assert link is not None, "the agent did not answer"
        remote = await _time(link.tools_into(None), repeats)
        await link.close()
    print(f"{'':24}{'p50 us':>10}{'p95 us':>10}")
    print(f"{'in process':24}{in_process[0]:10.1f}{in_process[1]:10.1f}")
    print(f"{'remote (agent link)':24}{remote[0]:10.1f}{remote[1]:10.1f}")
    print(f"{'added by the link':24}{remote[0] - in_process[0]:10.1f}{remote[1] - in_process[1]:10.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # the child: serve the brain, write the port here
    args = parser.parse_args()
    if args.serve:
        asyncio.run(_serve_child(args.serve))
        return
    with tempfile.TemporaryDirectory() as tmp:
        port_file = os.path.join(tmp, "port")
        child = subprocess.Popen([sys.executable, __file__, "--serve", port_file], env=os.environ)
        try:
            for _ in range(500):
                if read_port(port_file) or child.poll() is not None:
                    break
                time.sleep(0.01)
            asyncio.run(_measure(args.repeats, read_port(port_file)))
        finally:
            child.terminate()
            child.wait(timeout=5)


if __name__ == "__main__":
    main()
