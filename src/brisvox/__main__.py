"""The ``brisvox`` command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from brisvox import __version__

if TYPE_CHECKING:
    from brisvox.server.agent import Agent
    from brisvox.server.tools import ToolSet


_REF_HELP = "a Python agent as module:name or path/to/file.py:name (a brisvox.Agent)"


def _add_server_parsers(sub: Any) -> None:
    # Defined here, not in brisvox.server, so that --help and --version import nothing heavy.
    serve_p = sub.add_parser("serve", help="run the voice-agent server (settings from BRISVOX_* variables)",
                             description="Run the server. Settings come from BRISVOX_* environment variables "
                                         "(see docs/OPERATIONS.md).")
    serve_p.add_argument("agent_file", nargs="?", type=Path,
                         help=f"agent file, or {_REF_HELP} (default: $BRISVOX_AGENT_FILE)")
    serve_p.add_argument("--insecure", action="store_true",
                         help="serve without authentication on an address that is not loopback")
    serve_p.add_argument("--workers", default="auto", type=_workers,
                         help="worker processes behind the one port: a count, or auto for the number of cores "
                              "(default); see docs/SCALING.md")
    token_p = sub.add_parser("token", help="print a signed call token (key from BRISVOX_AUTH_SECRET)",
                             description="Print a call token signed with BRISVOX_AUTH_SECRET, for a server run "
                                         "with BRISVOX_AUTH=signed (see docs/OPERATIONS.md, Security).")
    token_p.add_argument("--ttl", type=float, default=600.0, help="seconds the token is valid (default 600)")
    token_p.add_argument("--agent", default=None, help="valid only for the agent with this name")
    token_p.add_argument("--subject", default=None, help="who the call is for (the token's sub claim)")
    token_p.add_argument("--new-secret", action="store_true", help="print a new random signing key instead")
    check_p = sub.add_parser("check", help="validate an agent file offline",
                             description="Validate an agent file offline; exit 0 when it is valid, 1 otherwise.")
    check_p.add_argument("agent_file", nargs="?", type=Path,
                         help=f"agent file, or {_REF_HELP} (default: the program's own agent, with brisvox.run(agent))")
    check_p.add_argument("--env", action="store_true", help="also require every api_key_env variable to be set")
    types_p = sub.add_parser("types", help="write the TypeScript types of the agent's UI actions and app events",
                             description="Write TypeScript declarations for the agent's UI actions (ui-command) "
                                         "and app events (ui-event): of the program's own agent "
                                         "(brisvox.run(agent)) or of a UiContract or Agent named with --ui.")
    types_p.add_argument("--ts", action="store_true", required=True, help="TypeScript (the only format)")
    types_p.add_argument("--ui", default=None, metavar="MODULE:NAME",
                         help="a UiContract or an Agent to import (default: the program's own agent)")
    types_p.add_argument("-o", "--out", type=Path, default=None, help="write to this file (default: stdout)")
    console_p = sub.add_parser("console", help="talk to the agent in the terminal by typing",
                               description="Talk to the agent by typing: replies stream, tool calls and their "
                                           "outcomes show as they happen, a line typed while it answers "
                                           "interrupts it. /quit or Ctrl-D ends.")
    console_p.add_argument("agent_file", nargs="?", type=Path,
                           help=f"agent file, or {_REF_HELP} (default: the program's own agent, with brisvox.run(agent))")


def _workers(raw: str) -> str:
    if raw == "auto" or (raw.isdigit() and 1 <= int(raw) <= 256):
        return raw
    raise argparse.ArgumentTypeError(f"expected auto or a count from 1 to 256, not {raw!r}")


def _positive(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, not {raw!r}") from None
    if not value > 0:
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, not {raw!r}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="brisvox", description="brisvox voice-agent framework")
    parser.add_argument("--version", action="version", version=f"brisvox {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    _add_server_parsers(sub)
    tail_p = sub.add_parser("tail", help="show a server's calls and their last turn's stages, redrawn every second",
                            description="Show a server's live and recent calls (GET /api/calls), redrawn every "
                                        "second; Ctrl-C ends it.")
    tail_p.add_argument("url", nargs="?", default="http://127.0.0.1:8765", help="the server (default %(default)s)")
    tail_p.add_argument("--token", default=None, help="bearer token (default: $BRISVOX_TOKEN)")
    tail_p.add_argument("--interval", type=_positive, default=1.0, help="seconds between redraws (default 1)")
    tail_p.add_argument("--once", action="store_true", help="draw once and exit")
    demo_p = sub.add_parser("demo", help="run the local demonstration")
    demo_p.add_argument("agent_file", nargs="?", type=Path,
                        help=f"agent file, or {_REF_HELP} (default: the program's own agent, else the demo agent)")
    demo_p.add_argument("--insecure", action="store_true",
                        help="serve without authentication on an address that is not loopback")
    _add_models_parser(sub)
    from brisvox.loadtest import add_loadtest_parser

    add_loadtest_parser(sub)
    replay_p = sub.add_parser("replay", help="re-run a recorded call on virtual time and compare its events",
                              description="Re-run a recorded call ([record] in the agent file) against this code "
                                          "on virtual time with the recorded providers and tools; exit 1 where the "
                                          "turns, tool calls or what was heard differ, 2 when it cannot be read.")
    replay_p.add_argument("recording", type=Path, help="the recording (.jsonl.gz)")
    replay_p.add_argument("--agent", type=Path, default=None,
                          help="agent file (default: the one the recording names)")
    replay_p.add_argument("--silence", type=float, default=None,
                          help="end turns after this many seconds of silence (a fixed-silence policy) in the replay")
    replay_p.add_argument("--tolerance", type=float, default=None,
                          help="seconds two event times may differ (default: 0.001 for a recording made on "
                               "virtual time, 0.5 for a production call made on real time)")
    return parser


def _add_models_parser(sub: Any) -> None:
    # Here rather than in brisvox.inference: importing that package loads numpy and onnxruntime.
    models = sub.add_parser("models", help="fetch or list the local model files")
    msub = models.add_subparsers(dest="models_command", metavar="ACTION")
    fetch = msub.add_parser("fetch", help="download, verify and cache the pinned model files")
    fetch.add_argument("names", nargs="*", help="models to fetch (default: all but the optional ones)")
    fetch.add_argument("--dir", type=Path, default=None, help="cache directory (default: $BRISVOX_MODEL_DIR)")
    msub.add_parser("list", help="show each model, its licence and where it is read from")


def main(argv: list[str] | None = None, *, tools: ToolSet | None = None, agent: Agent | None = None) -> int:
    """Run the command line; ``tools`` are the Python tools agent files may list (see
    :func:`brisvox.run_with_tools`); ``agent`` is the agent ``serve`` and ``check`` use when
    no agent file is named (see :func:`brisvox.run`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    named = getattr(args, "agent_file", None)
    if named is not None and ":" in str(named):
        # A Python agent named on the command line takes the place of the program's own: from
        # here on it runs exactly as brisvox.run(agent) does.
        from brisvox.server.agent import AgentError, import_agent, is_agent_ref

        if is_agent_ref(str(named)):
            try:
                agent = import_agent(str(named))
            except AgentError as exc:
                print(f"brisvox {args.command}: {exc}", file=sys.stderr)
                return 1
            args.agent_file = None
    if args.command in ("serve", "check"):
        from brisvox.server.cli import run_check, run_serve
        from brisvox.server.tools import ToolSet

        toolset = tools if tools is not None else agent.toolset() if agent is not None else ToolSet()
        if args.command == "check" and args.agent_file is None and agent is None:
            parser.error("check: name an agent file")
        return run_serve(args, toolset, agent) if args.command == "serve" else run_check(args, toolset, agent)
    if args.command == "console":
        return _console(parser, args, tools, agent)
    if args.command == "types":
        from brisvox.server.types_cli import run_types

        return run_types(args, agent)
    if args.command == "token":
        from brisvox.server.cli import run_token

        return run_token(args)
    if args.command == "tail":
        from brisvox.server.tail import run_tail

        return run_tail(args)
    if args.command == "replay":
        from brisvox.server.replay import run_replay
        from brisvox.server.tools import ToolSet

        toolset = tools if tools is not None else agent.toolset() if agent is not None else ToolSet()
        return run_replay(args, toolset, agent)
    if args.command == "demo":
        from brisvox._demo import run_demo

        return run_demo(insecure=args.insecure, agent=agent, agent_file=args.agent_file, tools=tools)
    if args.command == "loadtest":
        from brisvox.loadtest import run_loadtest

        return run_loadtest(args)
    if args.command == "models":
        from brisvox.inference._cli import run_models_command

        return run_models_command(args)
    parser.print_help()
    return 2


def _console(parser: argparse.ArgumentParser, args: argparse.Namespace, tools: ToolSet | None,
             agent: Agent | None) -> int:
    from brisvox.console import run_console
    from brisvox.core.errors import ConfigError
    from brisvox.server.agent import Agent
    from brisvox.tool import FunctionTool

    if args.agent_file is not None:
        from brisvox.server.demo import demo_tools, is_demo_agent_file

        try:
            if not tools and is_demo_agent_file(args.agent_file):  # the demo agent's file: its tools come with it
                tools = demo_tools()
            offered = [t for name in (tools or ()) if isinstance(t := tools.tool(name), FunctionTool)] if tools else []
            agent = Agent.from_file(args.agent_file, tools=offered)
        except ConfigError as exc:
            print(exc, file=sys.stderr)
            return 1
    if agent is None:
        parser.error("console: name an agent file (or run it with brisvox.run(agent))")
    return run_console(agent)


if __name__ == "__main__":
    sys.exit(main())
