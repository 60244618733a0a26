"""The note-taker as a Python agent: the same agent as agent.toml, built in code.

    python examples/note_taker/note_taker_agent.py console     # talk to it by typing
    python examples/note_taker/note_taker_agent.py serve       # the voice server (BRISVOX_* settings)
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from tools import NoteBook, NoteTaker

import brisvox
from brisvox import providers
from brisvox.agent.interrupt import InterruptionPolicy
from brisvox.agent.tools import FillerConfig
from brisvox.agent.turn import Adaptive

PROMPT = """You are a friendly assistant on the phone. You can tell the caller the time in any
time zone (get_time) and write down a note for them (save_note). Keep answers short.
"""


def build_agent(taker: NoteTaker) -> brisvox.Agent:
    return brisvox.Agent(
        name="note-taker", prompt=PROMPT, language="en",
        greeting="Hi! I can tell you the time or take a note.",
        tools=[taker.get_time, taker.save_note],
        turn=Adaptive(fallback_silence=2.5),
        interruption=InterruptionPolicy.recommended(),
        filler=FillerConfig(delay=1.0),
        stt=providers.LocalWhisper(), llm=providers.Scripted(), tts=providers.Hibari(),
    )


if __name__ == "__main__":
    sys.exit(brisvox.run(build_agent(NoteTaker(NoteBook()))))
