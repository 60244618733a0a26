"""``brisvox types --ts``: the TypeScript types of an agent's UI actions and app events
(:func:`brisvox.transport.rtvi.typescript.typescript_types`), for the page that shows them."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from brisvox.server.agent import Agent
    from brisvox.transport.rtvi.ui import UiContract

__all__ = ["load_contract", "run_types"]


def load_contract(spec: str) -> UiContract:
    """The UiContract ``MODULE:NAME`` names (a UiContract, or an Agent's ``ui``); raises ValueError saying why not."""
    from brisvox.server.agent import Agent
    from brisvox.transport.rtvi.ui import UiContract

    module_name, sep, name = spec.partition(":")
    if not sep or not module_name or not name:
        raise ValueError(f"--ui {spec!r}: give MODULE:NAME")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--ui {spec!r}: cannot import {module_name!r}: {exc}") from None
    value = getattr(module, name, None)
    if isinstance(value, Agent):
        value = value.ui
        if value is None:
            raise ValueError(f"--ui {spec!r}: the agent declares no UI (Agent(ui=UiContract(...)))")
    if not isinstance(value, UiContract):
        raise ValueError(f"--ui {spec!r}: {name!r} is not a UiContract or an Agent")
    return value


def run_types(args: argparse.Namespace, agent: Agent | None) -> int:
    from brisvox.core.errors import ConfigError
    from brisvox.transport.rtvi.typescript import typescript_types

    try:
        if args.ui is not None:
            contract = load_contract(args.ui)
        elif agent is not None and agent.ui is not None:
            contract = agent.ui
        else:
            raise ValueError("no UI to describe: name one with --ui MODULE:NAME, or run brisvox.run(agent) "
                             "with an Agent(ui=...)")
        text = typescript_types(contract)
    except (ValueError, ConfigError) as exc:
        print(f"brisvox types: {exc}", file=sys.stderr)
        return 1
    if args.out is None:
        sys.stdout.write(text)
    else:
        args.out.write_text(text, encoding="utf-8")
    return 0
