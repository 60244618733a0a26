"""The slot reader: a date, a time and a count, read from the caller's words as a speech
recognizer writes them.  Pure (no I/O, no clock: the call's date is an input).

A lookup tool may declare which of its arguments are slots the caller says
(``lookup_when_heard``, docs/TOOLS.md, "Offered now"); when the caller's turn gives them, the
engine offers only that tool and requires a call (the 0.5B model otherwise answered "is there
a table tomorrow at seven?" in words, inventing the answer).  So this reader must be *sure*:
it returns a slot only when the words hold exactly one value of it, and only a value the
argument's JSON Schema accepts (bounds, pattern, enum).  What it reads:

* dates: today / tonight / this evening, tomorrow, the day after tomorrow, weekday names
  ("Friday", "next Friday": the next such day, today when it is that day and "next" is not
  said), "the 12th" / "the twelfth" (this month, or the next when the day has passed),
  "December 12" / "12 December" / "the 12th of December", ISO "2026-12-12";
* times: "19:30", "7:30", "7 pm", "seven p.m.", "at seven", "seven o'clock", "seven
  thirty", "half past seven", "quarter past/to eight", "noon".  A bare hour from 1 to 11
  ("at seven") is read in the afternoon or evening (19:00) unless "am" or "morning" is
  said: the reading of a booking line, where "seven" is never 7 in the morning;
* counts: "for two", "table for 4", "two people", "party of six", "four of us", "we are
  three".  A bare number is not a count: Whisper hears "a table for two" as "at table 42",
  and 42 must not become a party.

Numbers may be words or digits.  A count or an hour follows its cue word directly, so a
mishearing leaves the slot unread rather than read wrong.
"""

from __future__ import annotations

import calendar
import datetime
import enum
import re
from collections.abc import Mapping
from typing import Any

__all__ = ["SlotKind", "read_count", "read_date", "read_slots", "read_time"]


class SlotKind(enum.Enum):
    """What an argument holds, and the form the reader writes it in."""

    DATE = "date"  # "YYYY-MM-DD"
    TIME = "time"  # "HH:MM", 24-hour
    COUNT = "count"  # an integer (a party size)


_UNITS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen"]
_TENS = {"twenty": 20, "thirty": 30, "forty": 40, "fifty": 50}
_ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth", "eleventh", "twelfth", "thirteenth", "fourteenth", "fifteenth", "sixteenth", "seventeenth", "eighteenth", "nineteenth"]
_ORDINAL_TENS = {"twentieth": 20, "thirtieth": 30}
_MONTHS = {name.lower(): i for i, name in enumerate(calendar.month_name) if name}
_MONTHS.update({name.lower(): i for i, name in enumerate(calendar.month_abbr) if name and name.lower() != "may"})
_WEEKDAYS = {name.lower(): i for i, name in enumerate(calendar.day_name)}
_TODAY = {"today", "tonight"}
_COUNT_NOUNS = {"people", "persons", "person", "guests", "guest", "adults", "pax", "diners"}
_TIME_WORDS = {"am", "pm", "oclock", "thirty", "fifteen", "forty", "hundred", "hours"}

_TOKEN = re.compile(r"\d{4}-\d{2}-\d{2}|\d{1,2}[:.]\d{2}|\d+(?:st|nd|rd|th)?|[a-z]+")
_CLOCK = re.compile(r"\d{1,2}[:.]\d{2}")
_ORDINAL_DIGITS = re.compile(r"^(\d+)(st|nd|rd|th)$")


def _tokens(text: str) -> list[str]:
    plain = text.casefold()
    plain = re.sub(r"\b([ap])\.?\s?m\b\.?", r" \1m ", plain)  # "p.m." "p. m." "pm" -> "pm"
    plain = plain.replace("o'clock", " oclock ").replace("o’clock", " oclock ")
    plain = re.sub(r"(?<!\d)-|-(?!\d)", " ", plain)  # "forty-five" -> "forty five"; "2026-12-10" stays
    plain = plain.replace("'", "").replace("’", "")
    plain = re.sub(r"(\d)(am|pm)\b", r"\1 \2", plain)  # "7pm" -> "7 pm"
    return _TOKEN.findall(plain)


def _number(toks: list[str], i: int) -> tuple[int, int] | None:
    """The cardinal number at ``toks[i]`` (digits or words, "twenty two") and how many tokens it took."""
    if i >= len(toks):
        return None
    tok = toks[i]
    if tok.isdigit():
        return int(tok), 1
    if tok in _TENS:
        if i + 1 < len(toks) and toks[i + 1] in _UNITS[1:10]:
            return _TENS[tok] + _UNITS.index(toks[i + 1]), 2
        return _TENS[tok], 1
    if tok in _UNITS:
        return _UNITS.index(tok), 1
    return None


def _ordinal(toks: list[str], i: int) -> tuple[int, int] | None:
    """The ordinal at ``toks[i]`` ("12th", "twelfth", "twenty first") and its token count."""
    if i >= len(toks):
        return None
    tok = toks[i]
    if (m := _ORDINAL_DIGITS.match(tok)) is not None:
        return int(m.group(1)), 1
    if tok in _ORDINALS:
        return _ORDINALS.index(tok) + 1, 1
    if tok in _ORDINAL_TENS:
        return _ORDINAL_TENS[tok], 1
    if tok in _TENS and i + 1 < len(toks) and toks[i + 1] in _ORDINALS[:9]:
        return _TENS[tok] + _ORDINALS.index(toks[i + 1]) + 1, 2
    return None


def _one(found: set[Any]) -> Any:
    """The value when the words hold exactly one (two different ones: not sure, None)."""
    return next(iter(found)) if len(found) == 1 else None


# -- dates -------------------------------------------------------------------------------------

def _day_in(year: int, month: int, day: int) -> datetime.date | None:
    try:
        return datetime.date(year, month, day)
    except ValueError:
        return None


def _next_with_day(today: datetime.date, day: int) -> datetime.date | None:
    """The first date from ``today`` on whose day of the month is ``day``."""
    year, month = today.year, today.month
    for _ in range(3):
        found = _day_in(year, month, day)
        if found is not None and found >= today:
            return found
        year, month = (year + 1, 1) if month == 12 else (year, month + 1)
    return None


def _month_day(today: datetime.date, month: int, day: int) -> datetime.date | None:
    found = _day_in(today.year, month, day)
    if found is not None and found < today:
        found = _day_in(today.year + 1, month, day)
    return found


def _month_has_day(toks: list[str], m: int) -> bool:
    """Whether the month at ``toks[m]`` is followed by its own day ("December 12", "December the 12th")."""
    j = m + 1 + (toks[m + 1:m + 2] == ["the"])
    return (_ordinal(toks, j) or _number(toks, j)) is not None


def read_date(text: str, today: datetime.date) -> datetime.date | None:
    """The one date ``text`` names, relative to ``today``; None when it names none or several."""
    toks = _tokens(text)
    found: set[datetime.date] = set()
    i = 0
    while i < len(toks):
        tok = toks[i]
        step = 1
        if tok in _TODAY or (tok == "this" and i + 1 < len(toks) and toks[i + 1] in ("evening", "afternoon")):
            found.add(today)
        elif tok == "day" and toks[i + 1:i + 3] == ["after", "tomorrow"]:
            found.add(today + datetime.timedelta(days=2))
            step = 3
        elif tok == "tomorrow":
            found.add(today + datetime.timedelta(days=1))
        elif tok in _WEEKDAYS:
            ahead = (_WEEKDAYS[tok] - today.weekday()) % 7
            if ahead == 0 and i > 0 and toks[i - 1] == "next":
                ahead = 7
            found.add(today + datetime.timedelta(days=ahead))
        elif re.fullmatch(r"\d{4}-\d{2}-\d{2}", tok):
            year, month, dom = (int(p) for p in tok.split("-"))
            if (iso := _day_in(year, month, dom)) is not None and iso >= today:
                found.add(iso)
        elif tok in _MONTHS:
            month = _MONTHS[tok]
            j = i + 1 + (toks[i + 1:i + 2] == ["the"])
            day = _ordinal(toks, j) or _number(toks, j)
            if day is not None and (d := _month_day(today, month, day[0])) is not None:
                found.add(d)
                step = j - i + day[1]
        elif (day := _ordinal(toks, i)) is not None and (toks[i - 1:i] in (["the"], ["on"]) or _MONTHS.keys() & set(toks[i + day[1]:i + day[1] + 2])):
            # "the 12th", "on the twelfth", "12th of December" (not "my first time")
            j = i + day[1]
            j += toks[j:j + 1] == ["of"]
            if j < len(toks) and toks[j] in _MONTHS:
                d = _month_day(today, _MONTHS[toks[j]], day[0])
                step = j - i + 1
            else:
                d = _next_with_day(today, day[0])
            if d is not None:
                found.add(d)
        elif ((num := _number(toks, i)) is not None and i + num[1] < len(toks) and toks[i + num[1]] in _MONTHS
              and not _month_has_day(toks, i + num[1])):
            # "12 December" (a cardinal then a month; "we are five, December 12" is the month's own day)
            if (d := _month_day(today, _MONTHS[toks[i + num[1]]], num[0])) is not None:
                found.add(d)
            step = num[1] + 1
        i += step
    result: datetime.date | None = _one(found)
    return result


# -- times -------------------------------------------------------------------------------------

def _clock(hour: int, minute: int, meridiem: str | None) -> tuple[int, int] | None:
    if not (0 <= minute < 60):
        return None
    if meridiem == "am":
        if not 1 <= hour <= 12:
            return None
        return (0 if hour == 12 else hour), minute
    if meridiem == "pm" or 1 <= hour <= 11:  # a bare hour is an afternoon or evening one
        if not 1 <= hour <= 12:
            return None
        return (12 if hour == 12 else hour + 12), minute
    if 12 <= hour <= 23:
        return hour, minute
    return None


def _minutes_after(toks: list[str], j: int) -> tuple[int, int]:
    """Minutes spoken after an hour ("thirty", "forty five", "fifteen", "oh five") and their tokens."""
    if j < len(toks) and toks[j] == "oh" and (n := _number(toks, j + 1)) is not None and n[0] < 10:
        return n[0], 1 + n[1]
    n = _number(toks, j)
    if n is not None and 10 <= n[0] < 60 and not (j + n[1] < len(toks) and toks[j + n[1]] in _COUNT_NOUNS):
        return n[0], n[1]
    return 0, 0


def read_time(text: str) -> str | None:
    """The one time of day ``text`` names, as "HH:MM"; None when it names none or several."""
    toks = _tokens(text)
    morning = "morning" in toks or "am" in toks
    found: set[tuple[int, int]] = set()
    for i, tok in enumerate(toks):
        if tok == "noon" or tok == "midday":
            found.add((12, 0))
            continue
        if _CLOCK.fullmatch(tok):
            h, m = (int(p) for p in re.split(r"[:.]", tok))
            after = toks[i + 1] if i + 1 < len(toks) else None
            meridiem = after if after in ("am", "pm") else ("am" if morning and h < 12 else None)
            if meridiem is None and h >= 12:
                meridiem = "24h"
            if (c := _clock(h, m, meridiem if meridiem != "24h" else None)) is not None:
                found.add(c)
            continue
        if tok in ("half", "quarter") and i + 1 < len(toks) and toks[i + 1] in ("past", "to", "after"):
            hour = _number(toks, i + 2)
            if hour is not None and 1 <= hour[0] <= 12:
                minutes = 30 if tok == "half" else 15
                h = hour[0]
                if toks[i + 1] == "to":
                    if tok == "half":
                        continue
                    h, minutes = (h - 1 or 12), 45
                if (c := _clock(h, minutes, "am" if morning else None)) is not None:
                    found.add(c)
            continue
        cue = i > 0 and toks[i - 1] in ("at", "around", "about", "by")
        num = _number(toks, i)
        if num is None or num[0] > 12 or num[0] < 1:
            continue
        j = i + num[1]
        minute, used = _minutes_after(toks, j)
        k = j + used
        after = toks[k] if k < len(toks) else None
        counted = after in _COUNT_NOUNS or after in ("of", "us") or toks[i - 1:i] in (["for"], ["of"])
        if after in ("am", "pm"):
            c = _clock(num[0], minute, after)
        elif after == "oclock" or (not counted and (cue or used)):  # "at seven", "seven thirty"
            c = _clock(num[0], minute, "am" if morning else None)
        else:
            continue
        if c is not None:
            found.add(c)
    clock: tuple[int, int] | None = _one(found)
    return None if clock is None else f"{clock[0]:02d}:{clock[1]:02d}"


# -- counts ------------------------------------------------------------------------------------

def read_count(text: str) -> int | None:
    """The one party size ``text`` names ("for two", "four people", "party of six"); None when none or several."""
    toks = _tokens(text)
    found: set[int] = set()
    skip = 0
    for i in range(len(toks)):
        if i < skip or (num := _number(toks, i)) is None:
            continue
        j = skip = i + num[1]  # "twenty two people" is 22, not also 2
        after = toks[j] if j < len(toks) else None
        before = toks[i - 1] if i > 0 else None
        before2 = toks[i - 2] if i > 1 else None
        if after in _TIME_WORDS or (after is not None and _CLOCK.fullmatch(after)):
            continue  # "for seven pm", "for 7 o'clock": a time
        if (after in _COUNT_NOUNS or toks[j:j + 2] == ["of", "us"]
                or (before == "for" and (after is None or _number(toks, j) is None))
                or (before, before2) == ("of", "party")
                or (before == "are" and before2 == "we") or before == "were"):
            found.add(num[0])
    count: int | None = _one(found)
    return count


# -- one tool's slots --------------------------------------------------------------------------

def read_slots(text: str, today: datetime.date, slots: Mapping[str, SlotKind],
               properties: Mapping[str, Any]) -> dict[str, Any]:
    """The slots of ``slots`` (argument name -> kind) that ``text`` names for sure, each a value
    its schema in ``properties`` accepts (a value outside its bounds is left out: not sure)."""
    out: dict[str, Any] = {}
    for name, kind in slots.items():
        value: Any
        if kind is SlotKind.DATE:
            day = read_date(text, today)
            value = None if day is None else day.isoformat()
        elif kind is SlotKind.TIME:
            value = read_time(text)
        else:
            value = read_count(text)
        if value is not None and accepts(properties.get(name, {}), value):
            out[name] = value
    return out


def accepts(schema: Mapping[str, Any], value: Any) -> bool:
    """Whether ``value`` passes the schema keywords a slot's schema uses (type, bounds,
    pattern, length, enum, const); a schema with others (``$ref``, ``anyOf``) is not trusted."""
    if any(k in schema for k in ("$ref", "anyOf", "oneOf", "allOf", "not")):
        return False
    kind = schema.get("type")
    if isinstance(value, int):
        if kind not in ("integer", "number"):
            return False
        if ("minimum" in schema and value < schema["minimum"]) or ("maximum" in schema and value > schema["maximum"]):
            return False
        if (("exclusiveMinimum" in schema and value <= schema["exclusiveMinimum"])
                or ("exclusiveMaximum" in schema and value >= schema["exclusiveMaximum"])):
            return False
    else:
        if kind != "string":
            return False
        if "pattern" in schema and re.search(schema["pattern"], value) is None:
            return False
        if len(value) > schema.get("maxLength", len(value)) or len(value) < schema.get("minLength", 0):
            return False
    if "enum" in schema and value not in schema["enum"]:
        return False
    return "const" not in schema or schema["const"] == value
