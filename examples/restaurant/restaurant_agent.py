"""The restaurant host as a Python agent (its twin: agent.toml).

Tools are methods of one ``Restaurant`` (they share its bookings, as they would share a
database pool); ``book_table`` waits for the caller's yes (``confirm=True``); card numbers
are redacted from what the caller said before the model reads it (a ``BEFORE_LLM`` hook).

    python examples/restaurant/restaurant_agent.py console
    python examples/restaurant/restaurant_agent.py check
"""

from __future__ import annotations

import dataclasses
import re
import sys

from pydantic import BaseModel, Field

import brisvox
from brisvox import Hook, HookPoint, ToolContext, ToolError, providers
from brisvox.agent.interrupt import InterruptionPolicy
from brisvox.core.frames import UserTextFrame

PROMPT = """You are the phone host of Lokanta Deniz. Ask for the day, the time and the party size,
then call check_availability. To book, ask for a name and call book_table.
"""

CARD = re.compile(r"\b(?:\d[ -]?){13,19}\b")


def redact_cards(frame: UserTextFrame) -> UserTextFrame:
    """Card numbers never reach the model (nor the conversation it keeps)."""
    return dataclasses.replace(frame, text=CARD.sub("[card number]", frame.text))


class Slot(BaseModel):
    day: str = Field(description="the day, as YYYY-MM-DD")
    time: str = Field(description="the time, as HH:MM")
    party_size: int = Field(ge=1, le=12)


class Booking(Slot):
    name: str = Field(min_length=1, max_length=64)


class Restaurant:
    def __init__(self, tables: int = 2) -> None:
        self.tables = tables
        self.bookings: dict[str, Booking] = {}  # by idempotency key: a replayed call books nothing new

    def _taken(self, slot: Slot) -> int:
        return sum(1 for b in self.bookings.values() if (b.day, b.time) == (slot.day, slot.time))

    @brisvox.tool.read_only(timeout=2.0)
    async def check_availability(self, args: Slot) -> dict[str, object]:
        """Whether a table is free at a day and time for a party."""
        return {"free": self._taken(args) < self.tables, **args.model_dump()}

    @brisvox.tool.side_effect(confirm=True, timeout=3.0)
    async def book_table(self, args: Booking, ctx: ToolContext) -> dict[str, object]:
        """Book a table. The caller confirms before it is made."""
        key = ctx.idempotency_key().hex()
        if key not in self.bookings and self._taken(args) >= self.tables:
            raise ToolError("that time is full; offer another time")
        self.bookings.setdefault(key, args)
        return {"booked": True, "name": args.name}


def build_agent(restaurant: Restaurant) -> brisvox.Agent:
    return brisvox.Agent(
        name="lokanta-deniz", prompt=PROMPT, greeting="Hello, Lokanta Deniz.",
        tools=[restaurant.check_availability, restaurant.book_table],
        interruption=InterruptionPolicy.recommended(),
        llm=providers.OpenAI(model="gpt-4o-mini", temperature=0.3), stt=providers.Deepgram(),
        tts=providers.Cartesia(voice="a0e99841-438c-4a64-b679-ae501e7d6091"),
        hooks=[Hook(HookPoint.BEFORE_LLM, redact_cards)],
    )


if __name__ == "__main__":
    sys.exit(brisvox.run(build_agent(Restaurant())))
