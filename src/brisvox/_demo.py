"""``brisvox demo``: the browser demo that ``make demo`` starts.

It is ``brisvox serve`` with no agent file (the demo restaurant agent, its tools and the
local providers; see :mod:`brisvox.server.call_providers` for which LLM runs), plus a
line that says where the page is, printed once the providers are built (a missing extra or
key fails before it).  Settings come from the same ``BRISVOX_*`` variables.
"""

from __future__ import annotations

import argparse
import sys


def run_demo(*, insecure: bool = False) -> int:
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
    return run_serve(argparse.Namespace(agent_file=None, insecure=insecure), ToolSet(), ready_line=line)
