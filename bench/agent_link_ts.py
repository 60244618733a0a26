"""Added latency of a remote tool call served by the TypeScript client, against the Python SDK and in process.

One ReadOnly tool (``opening_hours``: returns at once) runs through the tool engine three ways in
the same run: in process (a ``brisvox.tool`` method of a Brain), remote served by the Python SDK
(``brisvox.sdk.serve`` in a child process) and remote served by the TypeScript client
(``clients/ts/examples/shop.ts`` under Node, a child process), both on 127.0.0.1 over an
``AgentLink``.  Reported: p50 and p95 of one ``execute`` in microseconds, what each link adds
over in process, and the Node agent's p50 as a ratio of the Python SDK's.  The driver (the agent
processes, the timing) is ``bench/agent_link.py``'s, given each agent's command.

Needs ``npm ci`` in clients/ts (the Node example is compiled here when its build is missing).

    python bench/agent_link_ts.py [--repeats 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

import brisvox
from brisvox.agent.tools import ToolRegistry
from brisvox.sdk import Brain

sys.path.insert(0, str(Path(__file__).resolve().parent))
from agent_link import agent_process, serve_child, time_calls, time_remote

CLIENT = Path(__file__).resolve().parents[1] / "clients" / "ts"
MONDAY = {"day": "monday"}


class Day(BaseModel):
    day: str


class Shop(Brain):
    @brisvox.tool.read_only(timeout=2.0)
    async def opening_hours(self, args: Day) -> str:
        """When the shop is open on a day."""
        return f"{args.day}: nine to five"


async def _measure(repeats: int, python_port: int, node_port: int) -> None:
    local = ToolRegistry()
    tool = Shop().opening_hours
    local.register(tool.spec, tool)
    rows = [("in process", await time_calls(local, "opening_hours", MONDAY, repeats)),
            ("Python SDK (link)", await time_remote(python_port, "opening_hours", MONDAY, repeats)),
            ("TypeScript client (link)", await time_remote(node_port, "opening_hours", MONDAY, repeats))]
    base = rows[0][1]
    print(f"{'':28}{'p50 us':>10}{'p95 us':>10}{'added p50':>11}{'added p95':>11}")
    for name, (p50, p95) in rows:
        print(f"{name:28}{p50:10.1f}{p95:10.1f}{p50 - base[0]:11.1f}{p95 - base[1]:11.1f}")
    print(f"TypeScript / Python SDK, p50: {rows[2][1][0] / rows[1][1][0]:.2f}")


def _node_example() -> Path:
    example = CLIENT / "build-test" / "examples" / "shop.js"
    if not example.exists():
        subprocess.run([str(CLIENT / "node_modules" / ".bin" / "tsc"), "-p", "tsconfig.test.json"], cwd=CLIENT,
                       check=True)
    return example


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=2000)
    parser.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)  # the child: serve the Python brain
    args = parser.parse_args()
    if args.serve:
        serve_child(Shop)
        return
    with agent_process(["node", str(_node_example()), "0"]) as node_port, \
            agent_process([sys.executable, __file__, "--serve"]) as python_port:
        asyncio.run(_measure(args.repeats, python_port, node_port))


if __name__ == "__main__":
    main()
