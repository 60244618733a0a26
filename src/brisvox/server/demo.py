"""The demo agent: the restaurant of ``examples/restaurant/`` (agent file and tools in Python).

:data:`DEMO_AGENT_FILE` is its agent file (``brisvox serve`` with no agent file serves it);
:func:`demo_tools` gives its tools, the methods of ``restaurant_agent.Restaurant`` next to it:
``check_availability`` (ReadOnly) and ``book_table`` (SideEffect, behind the confirmation
gate: the agent file lists it in ``confirm_tools``).  Where the files are: in a source
checkout, ``examples/restaurant/`` itself; in an installed wheel, the copy the wheel puts in
``<prefix>/share/brisvox/examples/restaurant/`` (pyproject's ``data-files``).
"""

from __future__ import annotations

import functools
import sysconfig
from pathlib import Path
from typing import Any

from brisvox.core.errors import ConfigError
from brisvox.server.tools import ToolSet

__all__ = ["DEMO_AGENT_FILE", "DEMO_DIR", "demo_tools", "is_demo_agent_file"]


def _demo_dir() -> Path:
    checkout = Path(__file__).resolve().parents[3] / "examples" / "restaurant"
    if (checkout / "agent.toml").is_file():
        return checkout
    return Path(sysconfig.get_path("data")) / "share" / "brisvox" / "examples" / "restaurant"


DEMO_DIR = _demo_dir()
DEMO_AGENT_FILE = DEMO_DIR / "agent.toml"
_TOOLS_FILE = DEMO_DIR / "restaurant_agent.py"


def is_demo_agent_file(path: Path | str) -> bool:
    """Whether ``path`` is the demo agent's file (served with :func:`demo_tools`)."""
    return Path(path).resolve() == DEMO_AGENT_FILE.resolve()


def _tools_module() -> Any:
    if not _TOOLS_FILE.is_file():
        raise ConfigError(f"the demo agent's tools are not at {_TOOLS_FILE}: a checkout has them in "
                          "examples/restaurant/, an installed wheel in <prefix>/share/brisvox/examples/restaurant/")
    return _imported(_TOOLS_FILE)


@functools.cache
def _imported(path: Path) -> Any:
    from brisvox.server.agent import import_file

    return import_file(path)


def demo_tools(restaurant: Any = None, into: ToolSet | None = None) -> ToolSet:
    """The demo's tools over ``restaurant`` (a ``restaurant_agent.Restaurant``; a new one by
    default), added to ``into`` (a new ToolSet by default)."""
    tools = into if into is not None else ToolSet()
    book = restaurant if restaurant is not None else _tools_module().Restaurant()
    tools.include(book.check_availability, book.book_table)
    return tools
