"""The note-taker: the brisvox program with two tools of its own.

    python examples/note_taker/main.py check examples/note_taker/agent.toml
    python examples/note_taker/main.py serve examples/note_taker/agent.toml
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tools import NoteBook, build_tools

import brisvox

if __name__ == "__main__":
    sys.exit(brisvox.run_with_tools(build_tools(NoteBook())))
