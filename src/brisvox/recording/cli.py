"""``brisvox replay FILE``: re-run a recorded call on virtual time and show what changed.

Prints the recorded events and the replay's side by side (``!`` marks a row that differs)
and exits 0 when they match, 1 when they differ, 2 when the recording or the agent cannot
be read.  The agent is the file named in the recording (``--agent`` names another); its
tools' specs come from ``tools`` (the program's, as for ``serve``), their results from the
recording.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TextIO

from brisvox.core.clock import SystemClock, run_virtual
from brisvox.core.errors import ConfigError
from brisvox.recording.format import Recording
from brisvox.recording.io import load_recording
from brisvox.recording.replay import judge, render, replay_recording
from brisvox.server.agent_file import AgentDefinition, AgentFileError, load_agent_file
from brisvox.server.tools import ToolSet

__all__ = ["EXIT_DIFFERS", "EXIT_UNREADABLE", "replay_agent", "run_replay"]

EXIT_DIFFERS = 1
EXIT_UNREADABLE = 2


def replay_agent(recording: Recording, given: Path | None, tools: ToolSet) -> tuple[AgentDefinition, ToolSet]:
    """The agent to replay (the file ``given``, else the one the recording names) and its tools."""
    path = given if given is not None else recording.header.agent_file
    if path is None:
        raise ConfigError("the recording names no agent file: pass --agent")
    offered = _offered(Path(path), tools)
    return load_agent_file(path, available_tools=offered), offered


def _offered(path: Path, tools: ToolSet) -> ToolSet:
    """The program's tools; the demo agent's own when it is the demo agent (``serve`` with no file)."""
    from brisvox.server.demo import DEMO_AGENT_FILE, demo_tools

    return demo_tools() if path == DEMO_AGENT_FILE and not len(tools) else tools


def run_replay(args: argparse.Namespace, tools: ToolSet, out: TextIO = sys.stdout) -> int:
    try:
        recording = load_recording(args.recording)
        if args.silence is not None and not 0 <= args.silence <= 10:
            raise ConfigError(f"--silence: expected seconds from 0 to 10, got {args.silence}")
        agent, offered = replay_agent(recording, args.agent, tools)
    except AgentFileError as exc:
        print("brisvox replay: the agent file has problems:", *map(str, exc.problems), sep="\n", file=sys.stderr)
        return EXIT_UNREADABLE
    except ConfigError as exc:  # RecordingError is one
        print(f"brisvox replay: {exc}", file=sys.stderr)
        return EXIT_UNREADABLE
    replayed = run_virtual(lambda: replay_recording(recording, agent, offered, SystemClock(), silence=args.silence))
    judgement = judge(recording, replayed, args.tolerance)
    rows, differences, tolerance = judgement.rows, judgement.differences, judgement.tolerance
    print(render(rows), file=out)
    if recording.dropped:
        print(f"note: the recording lost {recording.dropped} records when it was made", file=out)
    if differences:
        print(f"{len(differences)} difference(s) (tolerance {tolerance * 1000:.0f} ms)", file=out)
        return EXIT_DIFFERS
    print(f"the replay matches ({len(rows)} events, tolerance {tolerance * 1000:.0f} ms)", file=out)
    return 0
