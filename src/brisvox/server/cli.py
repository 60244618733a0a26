"""The ``serve`` and ``check`` subcommands of the ``brisvox`` command line.

``brisvox serve [AGENT_FILE]`` starts the HTTP/WebSocket surface (settings from
``BRISVOX_*``, docs/OPERATIONS.md).  The production engine is not wired in yet, so every
call is refused (WebSocket close 1013, "this server runs no call engine yet") and the
``listening on`` line says so; health, readiness, metrics, the drain and the exit codes
work as documented.

``brisvox check AGENT_FILE`` validates an agent file offline against the tools this
program provides (exit 0, or 1 with every problem on stderr); ``--env`` also checks that
each ``api_key_env`` variable is set.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the heavy imports wait until a command runs (``--help`` stays fast)
    from brisvox.server.agent_file import AgentDefinition
    from brisvox.server.tools import ToolSet

__all__ = ["run_check", "run_serve"]

NO_ENGINE = "calls refused: the call engine is not part of this build yet"


def _summary(d: AgentDefinition) -> str:
    tools = ", ".join(d.tools) if d.tools else "none"
    return f"agent {d.name!r} (tools: {tools}; stt {d.stt.provider}, llm {d.llm.provider}, tts {d.tts.provider})"


def run_check(args: argparse.Namespace, tools: ToolSet) -> int:
    from brisvox.server.agent_file import AgentFileError, load_agent_file

    try:
        definition = load_agent_file(args.agent_file, available_tools=tools.names(),
                                     environ=os.environ if args.env else None)
    except AgentFileError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"{args.agent_file}: {len(exc.problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"{args.agent_file}: ok, {_summary(definition)}")
    return 0


async def _no_engine(item: object, cancel: asyncio.Event) -> None:
    from brisvox.core.errors import BrisvoxError

    raise BrisvoxError("no call engine in this build")


def run_serve(args: argparse.Namespace, tools: ToolSet) -> int:
    from brisvox.core.errors import ConfigError
    from brisvox.server.agent_file import AgentFileError, load_agent_file
    from brisvox.server.host import ServerParts, serve
    from brisvox.server.lifecycle import EXIT_STARTUP_FAILURE
    from brisvox.server.settings import Settings

    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"brisvox serve: {exc}", file=sys.stderr)
        return EXIT_STARTUP_FAILURE
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    agent_path = args.agent_file or settings.agent_file
    description = NO_ENGINE
    if agent_path is not None:
        try:
            definition = load_agent_file(agent_path, available_tools=tools.names(), environ=os.environ)
        except AgentFileError as exc:
            for problem in exc.problems:
                print(problem, file=sys.stderr)
            print("brisvox serve: the agent file is invalid; not starting", file=sys.stderr)
            return EXIT_STARTUP_FAILURE
        description = f"{_summary(definition)}; {NO_ENGINE}"
    else:
        description = f"no agent file; {NO_ENGINE}"
    parts = ServerParts(runner=_no_engine, description=description)
    return asyncio.run(serve(settings, parts))
