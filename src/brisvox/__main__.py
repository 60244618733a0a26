"""The ``brisvox`` command line."""

from __future__ import annotations

import argparse
import sys

from brisvox import __version__


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="brisvox", description="brisvox voice-agent framework")
    parser.add_argument("--version", action="version", version=f"brisvox {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.add_parser("demo", help="run the local demonstration")
    from brisvox.inference._cli import add_models_parser

    add_models_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "demo":
        from brisvox._demo import run_demo

        return run_demo()
    if args.command == "models":
        from brisvox.inference._cli import run_models_command

        return run_models_command(args)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
