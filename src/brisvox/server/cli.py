"""The ``serve`` and ``check`` subcommands of the ``brisvox`` command line.

``brisvox serve [AGENT_FILE]`` starts the HTTP/WebSocket surface (settings from
``BRISVOX_*``, docs/OPERATIONS.md); with no agent file (argument or ``BRISVOX_AGENT_FILE``)
it serves the demo agent (:mod:`brisvox.server.demo`) with its tools.  The production engine is not wired in yet, so calls
on the WebSocket endpoint run a documented placeholder, the transport's echo engine
(each caller frame is played back), and the ``listening on`` line says so; admission,
health, readiness, metrics, the drain and the exit codes work as documented.

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
    from brisvox.core.clock import Clock
    from brisvox.server.agent_file import AgentDefinition
    from brisvox.server.session import SessionRunner
    from brisvox.server.tools import ToolSet
    from brisvox.transport.link import CallLink

__all__ = ["run_check", "run_serve", "session_runner"]

PLACEHOLDER = ("calls run the echo placeholder (each caller frame is played back): "
               "the call engine is not part of this build yet")


def _summary(d: AgentDefinition) -> str:
    tools = ", ".join(d.tools) if d.tools else "none"
    return f"agent {d.name!r} (tools: {tools}; stt {d.stt.provider}, llm {d.llm.provider}, tts {d.tts.provider})"


def run_check(args: argparse.Namespace, tools: ToolSet) -> int:
    from brisvox.server.agent_file import AgentFileError, load_agent_file

    try:
        definition = load_agent_file(args.agent_file, available_tools=tools,
                                     environ=os.environ if args.env else None)
    except AgentFileError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print(f"{args.agent_file}: {len(exc.problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"{args.agent_file}: ok, {_summary(definition)}")
    return 0


def _copy(tools: ToolSet) -> ToolSet:
    from brisvox.server.tools import ToolSet

    out = ToolSet()
    for name in tools.names():
        spec, tool = tools.spec(name), tools.tool(name)
        assert spec is not None and tool is not None
        out.add(spec, tool)
    return out


def session_runner(
    definition: AgentDefinition, tools: ToolSet, clock: Clock
) -> tuple[SessionRunner[CallLink], str]:
    """The session runner of ``brisvox serve`` and how the start-up line describes it.

    This is the seam for the production engine: it will return a runner that calls
    ``brisvox.engine.run_call`` with the agent's definition and ``tools.registry(...)``.
    Until then it returns the echo placeholder."""
    from brisvox.server.ws_endpoint import echo_runner

    return echo_runner(clock), PLACEHOLDER


def run_serve(args: argparse.Namespace, tools: ToolSet) -> int:
    from brisvox.core.clock import SystemClock
    from brisvox.core.errors import ConfigError
    from brisvox.server.agent_file import AgentFileError, load_agent_file
    from brisvox.server.host import ServerParts, serve
    from brisvox.server.lifecycle import EXIT_STARTUP_FAILURE
    from brisvox.server.settings import Settings
    from brisvox.server.ws_endpoint import TransportEndpoint
    from brisvox.transport.websocket import ServerConfig

    try:
        settings = Settings.from_env()
    except ConfigError as exc:
        print(f"brisvox serve: {exc}", file=sys.stderr)
        return EXIT_STARTUP_FAILURE
    logging.basicConfig(level=settings.log_level.upper(),
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    agent_path = args.agent_file or settings.agent_file
    if agent_path is None:
        from brisvox.server.demo import DEMO_AGENT_FILE, demo_tools

        agent_path = DEMO_AGENT_FILE
        tools = demo_tools(into=_copy(tools))
    try:
        definition = load_agent_file(agent_path, available_tools=tools, environ=os.environ)
    except AgentFileError as exc:
        for problem in exc.problems:
            print(problem, file=sys.stderr)
        print("brisvox serve: the agent file is invalid; not starting", file=sys.stderr)
        return EXIT_STARTUP_FAILURE
    clock = SystemClock()
    runner, what = session_runner(definition, tools, clock)
    description = f"{_summary(definition)}; {what}"
    ws_config = ServerConfig(host=settings.host, port=settings.port, path=settings.ws_path,
                             max_calls=settings.max_calls)
    endpoint = TransportEndpoint(clock, ws_config)
    parts = ServerParts(
        runner=runner, call_endpoint=endpoint, description=description, on_stop_calls=endpoint.close,
        ws_ping_interval=ws_config.ping_interval, ws_ping_timeout=ws_config.ping_timeout - ws_config.ping_interval,
        ws_max_size=max(ws_config.max_audio_bytes, ws_config.max_control_bytes),
    )
    return asyncio.run(serve(settings, parts))
