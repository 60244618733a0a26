"""The example flow: a restaurant reservation (check, offer alternatives, confirm, book).

::

    greeting --check_availability--> confirm (ResetWithSummary, pre: Say) --make_reservation--> done
       |  free=false                    ^   |  status=unavailable (lost the race)       (Reset, post: EndCall)
       '--> alternatives (Append) ------'   '--> alternatives
     end_call (global) --> farewell (Append, post: EndCall)

:class:`Restaurant` is an in-memory book with one table per date and time; some times
are always full.  It is the demo's restaurant too: ``examples/restaurant/restaurant_agent.py``
(the agent ``brisvox demo`` serves) subclasses it and declares its two methods as tools there
(the package cannot import ``examples/``, so the book lives here, once).
:func:`restaurant_tools` gives the three tools (``check_availability``
ReadOnly, ``make_reservation`` SideEffect, ``end_call`` ReadOnly) to register in a tool
registry, and :func:`restaurant_flow` builds the flow over that registry.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from brisvox.agent.flows.definition import (
    Append,
    EndCall,
    Flow,
    FlowBuilder,
    Goto,
    Node,
    Reset,
    ResetWithSummary,
    ResultEquals,
    Rule,
    Rules,
    Say,
    ToolCatalog,
    ToolUse,
)
from brisvox.agent.tools.lines import spoken
from brisvox.agent.tools.spec import ToolKind, ToolSpec

__all__ = [
    "Language",
    "Reservation",
    "Restaurant",
    "restaurant_flow",
    "restaurant_tools",
]

ToolFn = Callable[[dict[str, Any], Any], Awaitable[Any]]


class Language(enum.Enum):
    EN = "en"
    TR = "tr"


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
    bookings: list[Reservation] = field(default_factory=list)
    _by_key: dict[str, Reservation] = field(default_factory=dict, repr=False)  # the bookings made with a key

    def is_free(self, date: str, time: str) -> bool:
        if time in self.always_full or time not in self.times:
            return False
        return all((b.date, b.time) != (date, time) for b in self.bookings)

    def check(self, date: str, time: str, party_size: int) -> dict[str, Any]:
        if party_size > self.max_party:  # no time fits: the answer says why
            return {"free": False, "date": date, "time": time, "alternatives": [], "max_party": self.max_party}
        alternatives = [t for t in self.times if t != time and self.is_free(date, t)]
        return {"free": self.is_free(date, time), "date": date, "time": time, "alternatives": alternatives[:3]}

    # What the agent says of its tools' answers itself (the demo's ``result_line`` and
    # ``declined_line``, docs/TOOLS.md): the 0.5B model, given the look-up's answer, said "I will
    # check the table for you on Saturday" for a free Sunday, and "I will confirm the reservation"
    # after the booking was made.
    DECLINED = "All right, I have not booked it. Is there anything else?"

    @staticmethod
    def availability_line(arguments: Mapping[str, Any], result: Any) -> str | None:
        """check_availability's answer in words: free (ask for the name), or the free times."""
        if not isinstance(result, dict):
            return None
        day, party = spoken(arguments.get("date", result.get("date", ""))), arguments.get("party_size")
        times = [t for t in result.get("alternatives", ()) if isinstance(t, str)]
        if "max_party" in result:
            return f"Sorry, we seat at most {result['max_party']} at one table. Could you make it fewer?"
        if "time" not in arguments:  # a day's question: its free times
            if not times:
                return f"Sorry, nothing is free for {party} on {day}. Would another day suit you?"
            return f"On {day} for {party} I have {_either(times)}. Which time would you like?"
        time = arguments["time"]
        if result.get("free") is True:
            return f"{day} at {time} is free for {party}. What name shall I book it under?"
        if not times:
            return f"Sorry, {day} at {time} is taken, and nothing else is free that day. Would another day suit you?"
        return f"Sorry, {day} at {time} is taken. I have {_either(times)}. Which would you like?"

    @staticmethod
    def booked_line(arguments: Mapping[str, Any], result: Any) -> str | None:
        """book_table's answer in words (also when it runs on the caller's yes)."""
        if not isinstance(result, dict):
            return None
        day, time = spoken(arguments.get("date", "")), arguments.get("time")
        if result.get("status") == "confirmed":
            return (f"Booked, a table for {arguments.get('party_size')} on {day} at {time} under "
                    f"{arguments.get('name')}. Your reference is {result.get('reservation_id')}.")
        if result.get("status") == "unavailable":
            return f"Sorry, {day} at {time} was just taken, so nothing is booked. Shall I look at another time?"
        return None

    def book(self, name: str, date: str, time: str, party_size: int, key: str | None = None) -> dict[str, Any]:
        """Book the table; ``key`` (a call's idempotency key): a replayed call books nothing new."""
        if key is not None and key in self._by_key:
            return {"status": "confirmed", "reservation_id": self._by_key[key].reservation_id}
        if party_size > self.max_party or not self.is_free(date, time):
            return {"status": "unavailable", "date": date, "time": time}
        booking = Reservation(f"R{len(self.bookings) + 1:03d}", name, date, time, party_size)
        self.bookings.append(booking)
        if key is not None:
            self._by_key[key] = booking
        return {"status": "confirmed", "reservation_id": booking.reservation_id}


def _either(times: list[str]) -> str:
    """"18:00, 19:00 or 21:00"."""
    return times[0] if len(times) == 1 else f"{', '.join(times[:-1])} or {times[-1]}"


_SLOT = {
    "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$", "maxLength": 10},
    "time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$", "maxLength": 5},
    "party_size": {"type": "integer", "minimum": 1, "maximum": 20},
}


def restaurant_tools(restaurant: Restaurant) -> list[tuple[ToolSpec, ToolFn]]:
    """The example's tools as (spec, function) pairs for a tool registry."""

    async def check_availability(args: dict[str, Any], ctx: Any) -> Any:
        return restaurant.check(args["date"], args["time"], args["party_size"])

    async def make_reservation(args: dict[str, Any], ctx: Any) -> Any:
        return restaurant.book(args["name"], args["date"], args["time"], args["party_size"])

    async def end_call(args: dict[str, Any], ctx: Any) -> Any:
        return {"ok": True}

    slot_schema = {
        "type": "object",
        "properties": dict(_SLOT),
        "required": list(_SLOT),
        "additionalProperties": False,
    }
    booking_schema = {
        "type": "object",
        "properties": {"name": {"type": "string", "minLength": 1, "maxLength": 64}, **_SLOT},
        "required": ["name", *_SLOT],
        "additionalProperties": False,
    }
    return [
        (
            ToolSpec(
                name="check_availability",
                description="Check whether a table is free at a date (YYYY-MM-DD) and time (HH:MM).",
                parameters=slot_schema,
                kind=ToolKind.READ_ONLY,
            ),
            check_availability,
        ),
        (
            ToolSpec(
                name="make_reservation",
                description="Book the table for the caller. Call once, after the caller confirmed.",
                parameters=booking_schema,
                kind=ToolKind.SIDE_EFFECT,
            ),
            make_reservation,
        ),
        (
            ToolSpec(
                name="end_call",
                description="End the call when the caller wants to stop.",
                parameters={"type": "object", "properties": {}, "additionalProperties": False},
                kind=ToolKind.READ_ONLY,
            ),
            end_call,
        ),
    ]


_TEXT: dict[Language, dict[str, str]] = {
    Language.EN: {
        "role": "You are the phone assistant of Lokanta Deniz, a small restaurant. Speak briefly and warmly; "
        "never read out lists longer than three items.",
        "greeting": "Greet the caller and ask for the date, time and party size of the table they want. "
        "When you have all three, call check_availability.",
        "alternatives": "The table at {time} on {date} is not free. Offer these times instead: "
        "{availability.alternatives}. When the caller picks one, call check_availability again.",
        "confirm": "A table for {party_size} on {date} at {time} is free. Ask for the name for the booking, "
        "read the details back, and when the caller agrees call make_reservation.",
        "done": "The table is booked under {name} for {party_size} on {date} at {time}, reference "
        "{reservation.reservation_id}. Tell the caller and say goodbye.",
        "farewell": "The caller wants to end the call. Thank them and say goodbye.",
        "wait": "One moment please.",
    },
    Language.TR: {
        "role": "Küçük bir restoran olan Lokanta Deniz'in telefon asistanısın. Kısa ve sıcak konuş; "
        "üçten uzun liste okuma.",
        "greeting": "Arayanı selamla; istediği masanın tarihini, saatini ve kişi sayısını sor. "
        "Üçü de belli olunca check_availability çağır.",
        "alternatives": "{date} tarihinde {time} saatindeki masa dolu. Bunun yerine şu saatleri öner: "
        "{availability.alternatives}. Arayan birini seçince check_availability'yi yeniden çağır.",
        "confirm": "{date} tarihinde {time} saatinde {party_size} kişilik masa boş. Rezervasyon için ismi sor, "
        "bilgileri tekrar oku ve arayan onaylayınca make_reservation çağır.",
        "done": "Masa {name} adına {date} {time}, {party_size} kişi olarak ayrıldı, referans "
        "{reservation.reservation_id}. Arayana söyle ve vedalaş.",
        "farewell": "Arayan görüşmeyi bitirmek istiyor. Teşekkür et ve vedalaş.",
        "wait": "Bir dakika lütfen.",
    },
}


def restaurant_flow(language: Language, catalog: ToolCatalog) -> Flow:
    """The reservation flow in ``language`` over the registry that holds :func:`restaurant_tools`."""
    text = _TEXT[language]
    availability = Rules(
        Rule(ResultEquals("free", True), "confirm"),
        Rule(ResultEquals("free", False), "alternatives"),
    )
    check = ToolUse(
        tool="check_availability", transition=availability, capture_args=True, capture_result="availability"
    )
    book = ToolUse(
        tool="make_reservation",
        transition=Rules(
            Rule(ResultEquals("status", "confirmed"), "done"),
            Rule(ResultEquals("status", "unavailable"), "alternatives"),
        ),
        capture_args=True,
        capture_result="reservation",
    )
    return (
        FlowBuilder()
        .role(text["role"])
        .nodes(
            [
                Node(name="greeting", task_messages=(text["greeting"],), tools=(check,)),
                Node(
                    name="alternatives",
                    task_messages=(text["alternatives"],),
                    tools=(check,),
                    strategy=Append(),
                ),
                Node(
                    name="confirm",
                    task_messages=(text["confirm"],),
                    tools=(book,),
                    strategy=ResetWithSummary(summary_input_tokens=1500, summary_max_tokens=300),
                    pre_actions=(Say(text["wait"]),),
                    keep_last_user=True,
                ),
                Node(
                    name="done",
                    task_messages=(text["done"],),
                    strategy=Reset(),
                    post_actions=(EndCall(),),
                    keep_last_user=True,
                ),
                Node(name="farewell", task_messages=(text["farewell"],), post_actions=(EndCall(),)),
            ]
        )
        .global_tool(ToolUse(tool="end_call", transition=Goto("farewell")))
        .initial("greeting")
        .build(catalog)
    )
