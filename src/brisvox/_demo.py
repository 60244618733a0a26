"""``brisvox demo``: the browser demo that ``make demo`` starts.

It is ``brisvox serve`` with no agent file (the demo restaurant agent, its tools and the
local providers; see :mod:`brisvox.server.call_providers` for which LLM runs; a program
run with ``brisvox.run(agent)`` serves its own agent instead), plus a
line that says where the page is, printed once the providers are built (a missing extra or
key fails before it).  Settings come from the same ``BRISVOX_*`` variables.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from brisvox.server.agent import Agent
    from brisvox.server.tools import ToolSet


def run_demo(*, insecure: bool = False, agent: Agent | None = None, agent_file: Path | None = None,
             tools: ToolSet | None = None) -> int:
    """``agent``: the program's own (``brisvox.run(agent)``), or ``agent_file`` (with the
    program's ``tools``), served in place of the demo agent."""
    from brisvox.core.errors import ConfigError
    from brisvox.server.cli import run_serve
    from brisvox.server.settings import Settings
    from brisvox.server.tools import ToolSet

    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"brisvox demo: {exc}", file=sys.stderr)
        return 1
    # printed by run_serve once the providers are built: a missing extra or key fails before any URL
    line = (f"brisvox demo: open http://{settings.host}:{settings.port}/ in Chromium, Chrome or Firefox and click "
            f"Talk (the models load first; Ctrl-C stops)")
    offered = tools if tools is not None else agent.toolset() if agent is not None else ToolSet()
    return run_serve(argparse.Namespace(agent_file=agent_file, insecure=insecure), offered, agent, ready_line=line)
