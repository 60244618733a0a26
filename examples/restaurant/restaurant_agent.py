"""The demo restaurant's tools (its agent file: agent.toml, next to this one).

``brisvox demo`` and ``brisvox serve`` with no agent file serve this agent, and so does
``brisvox serve examples/restaurant/agent.toml``: the server offers these tools with that file.
Copy the directory to start your own agent; ``python restaurant_agent.py console`` (or
``serve``, ``check``) runs the copy with its tools.

Tools are methods of one ``Restaurant`` (they share its bookings, as they would share a
database pool): ``check_availability`` (ReadOnly) and ``book_table`` (SideEffect; the agent
file lists it in ``confirm_tools``, so it runs only after the caller's yes; it is offered only
after ``check_availability`` said free, for that slot, under a name the caller said).  The restaurant
is in memory (``brisvox.agent.flows.example.Restaurant``, the flow example's book, which this
class extends): one table per hour from 18:00 to 21:00, 20:00 always full, so asking for
eight shows the alternatives.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, Field

import brisvox
from brisvox import ToolContext
from brisvox.agent.flows.example import Restaurant as Book

HERE = Path(__file__).resolve().parent
AGENT_FILE = HERE / "agent.toml"


# The caller's words that drop a booking waiting for the yes ("no", "don't book it", "cancel").
DECLINES = ("no", "not", "don't", "dont", "nope", "cancel", "stop", "instead")
QUESTION = "A table for {party_size} on {date} at {time}, under the name {name}. Shall I book it?"
CONFIRMS = ("yes", "yeah", "yep", "sure", "correct", "right", "ok", "okay", "please do", "go ahead", "confirm")


class Slot(BaseModel):
    date: str = Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", max_length=10, description="the day, as YYYY-MM-DD")
    time: str = Field(pattern=r"^[0-9]{2}:[0-9]{2}$", max_length=5, description="the time, as 24-hour HH:MM")
    party_size: int = Field(ge=1, le=20, description="how many people")


class Booking(Slot):
    name: str = Field(min_length=1, max_length=64, description="the caller's name")


@dataclass
class Restaurant(Book):
    """The book (one table per date and time, ``always_full`` times never free, its
    ``bookings`` a list of ``Reservation``) with its two methods declared as the agent's tools.
    Your own agent would wrap its database here instead."""

    # The caller's turn that names the day, the time and the party is answered through this
    # look-up (the only tool offered then, a call required, the heard values as constants): the
    # 0.5B model otherwise said "yes, I have a table" itself (docs/TOOLS.md, "Offered now"). Its
    # answer is spoken in the restaurant's own words ("Sunday 6 December at 19:00 is free for 2.
    # What name shall I book it under?"), with no model round after it.
    @brisvox.tool.read_only(timeout=2.0, lookup_when_heard={"date": "date", "time": "time", "party_size": "count"},
                            result_line=Book.availability_line)
    async def check_availability(self, args: Slot) -> dict[str, object]:
        """Check whether a table is free at a date (YYYY-MM-DD) and time (HH:MM) for a party."""
        return self.check(args.date, args.time, args.party_size)

    # Offered only after check_availability said free, with its date, time and party as
    # constants (the model writes only the name); the name must be one the caller said, and
    # not the restaurant's; a no in the caller's reply drops the booking waiting for the yes,
    # a yes makes confirming it the only choice, and the agent asks for the yes, says it booked
    # ("Booked, a table for 2 ... Your reference is R001.") and answers the no in its own words
    # (docs/TOOLS.md, "Offered now").
    @brisvox.tool.side_effect(timeout=3.0, from_caller=("name",), declined_by=DECLINES, confirmed_by=CONFIRMS,
                              confirm_question=QUESTION, result_line=Book.booked_line, declined_line=Book.DECLINED,
                              requires=brisvox.tool.Requirement("check_availability", {"free": True},
                                                                bind=("date", "time", "party_size")))
    async def book_table(self, args: Booking, ctx: ToolContext) -> dict[str, object]:
        """Book a table for a name at a date and time. The caller confirms before it is made."""
        # The call's idempotency key: a replayed call books nothing new.
        return self.book(args.name, args.date, args.time, args.party_size, key=ctx.idempotency_key().hex())


def build_agent(restaurant: Restaurant | None = None) -> brisvox.Agent:
    """The agent file with this restaurant's tools."""
    r = restaurant if restaurant is not None else Restaurant()
    return brisvox.Agent.from_file(AGENT_FILE, tools=[r.check_availability, r.book_table])


if __name__ == "__main__":
    sys.exit(brisvox.run(build_agent()))
