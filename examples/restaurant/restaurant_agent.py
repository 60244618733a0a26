"""The demo restaurant's tools (its agent file: agent.toml, next to this one).

``brisvox demo`` and ``brisvox serve`` with no agent file serve this agent, and so does
``brisvox serve examples/restaurant/agent.toml``: the server offers these tools with that file.
Copy the directory to start your own agent; ``python restaurant_agent.py console`` (or
``serve``, ``check``) runs the copy with its tools.

Tools are methods of one ``Restaurant`` (they share its bookings, as they would share a
database pool): ``check_availability`` (ReadOnly) and ``book_table`` (SideEffect; the agent
file lists it in ``confirm_tools``, so it runs only after the caller's yes; it is offered only
after ``check_availability`` said free, for that slot, under a name the caller said).  The restaurant
is in memory: one table per hour from 18:00 to 21:00, 20:00 always full, so asking for
eight shows the alternatives.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel, Field

import brisvox
from brisvox import ToolContext

HERE = Path(__file__).resolve().parent
AGENT_FILE = HERE / "agent.toml"


# The caller's words that drop a booking waiting for the yes ("no", "don't book it", "cancel").
DECLINES = ("no", "not", "don't", "dont", "nope", "cancel", "stop", "instead")


class Slot(BaseModel):
    date: str = Field(pattern=r"^[0-9]{4}-[0-9]{2}-[0-9]{2}$", max_length=10, description="the day, as YYYY-MM-DD")
    time: str = Field(pattern=r"^[0-9]{2}:[0-9]{2}$", max_length=5, description="the time, as 24-hour HH:MM")
    party_size: int = Field(ge=1, le=20, description="how many people")


class Booking(Slot):
    name: str = Field(min_length=1, max_length=64, description="the caller's name")


@dataclass(frozen=True, slots=True)
class Reservation:
    reservation_id: str
    name: str
    date: str
    time: str
    party_size: int


@dataclass
class Restaurant:
    """One table per date and time; ``always_full`` times are never free."""

    times: tuple[str, ...] = ("18:00", "19:00", "20:00", "21:00")
    always_full: frozenset[str] = frozenset({"20:00"})
    max_party: int = 8
    bookings: dict[str, Reservation] = field(default_factory=dict)  # by idempotency key

    def is_free(self, date: str, time: str) -> bool:
        if time in self.always_full or time not in self.times:
            return False
        return all((b.date, b.time) != (date, time) for b in self.bookings.values())

    # The caller's turn that names the day, the time and the party is answered through this
    # look-up (the only tool offered then, a call required, the heard values as constants): the
    # 0.5B model otherwise said "yes, I have a table" itself (docs/TOOLS.md, "Offered now").
    @brisvox.tool.read_only(timeout=2.0, lookup_when_heard={"date": "date", "time": "time", "party_size": "count"})
    async def check_availability(self, args: Slot) -> dict[str, object]:
        """Check whether a table is free at a date (YYYY-MM-DD) and time (HH:MM) for a party."""
        free = args.party_size <= self.max_party and self.is_free(args.date, args.time)
        alternatives = [t for t in self.times if t != args.time and self.is_free(args.date, t)]
        return {"free": free, "date": args.date, "time": args.time, "alternatives": alternatives[:3]}

    # Offered only after check_availability said free, with its date, time and party as
    # constants (the model writes only the name); the name must be one the caller said, and
    # not the restaurant's; a no in the caller's reply drops the booking waiting for the yes
    # (docs/TOOLS.md, "Offered now").
    @brisvox.tool.side_effect(timeout=3.0, from_caller=("name",), declined_by=DECLINES,
                              requires=brisvox.tool.Requirement("check_availability", {"free": True},
                                                                bind=("date", "time", "party_size")))
    async def book_table(self, args: Booking, ctx: ToolContext) -> dict[str, object]:
        """Book a table for a name at a date and time. The caller confirms before it is made."""
        key = ctx.idempotency_key().hex()
        if key in self.bookings:  # a replayed call books nothing new
            return {"status": "confirmed", "reservation_id": self.bookings[key].reservation_id}
        if args.party_size > self.max_party or not self.is_free(args.date, args.time):
            return {"status": "unavailable", "date": args.date, "time": args.time}
        booking = Reservation(f"R{len(self.bookings) + 1:03d}", args.name, args.date, args.time, args.party_size)
        self.bookings[key] = booking
        return {"status": "confirmed", "reservation_id": booking.reservation_id}


def build_agent(restaurant: Restaurant | None = None) -> brisvox.Agent:
    """The agent file with this restaurant's tools."""
    r = restaurant if restaurant is not None else Restaurant()
    return brisvox.Agent.from_file(AGENT_FILE, tools=[r.check_availability, r.book_table])


if __name__ == "__main__":
    sys.exit(brisvox.run(build_agent()))
