"""The slot reader on what Whisper writes: one value or none, never one its schema refuses."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from brisvox.agent.tools.slots import SlotKind, accepts, read_count, read_date, read_slots, read_time

FRIDAY = datetime.date(2026, 12, 4)  # a Friday
SLOTS = {"date": SlotKind.DATE, "time": SlotKind.TIME, "party_size": SlotKind.COUNT}
PROPS = {
    "date": {"type": "string", "pattern": "^[0-9]{4}-[0-9]{2}-[0-9]{2}$", "maxLength": 10},
    "time": {"type": "string", "pattern": "^[0-9]{2}:[0-9]{2}$", "maxLength": 5},
    "party_size": {"type": "integer", "minimum": 1, "maximum": 20},
}

# (the words as Whisper wrote them, date, time, party); None: not read for sure
PHRASINGS = [
    ("Is there a table tomorrow at seven for two?", "2026-12-05", "19:00", 2),
    ("A table for two, tomorrow at seven, please.", "2026-12-05", "19:00", 2),
    ("at table 42 tomorrow at seven", "2026-12-05", "19:00", None),  # "a table for two", misheard
    ("At table 42, tomorrow at 7.", "2026-12-05", "19:00", None),
    ("Hello, are you open on Sunday?", "2026-12-06", None, None),
    ("Can I book for four people on the 12th at half past seven?", "2026-12-12", "19:30", 4),
    ("December 12th at 7 p.m. for 6", "2026-12-12", "19:00", 6),
    ("The 12th of December at 19:30, party of three.", "2026-12-12", "19:30", 3),
    ("We are five, December 12 at half past seven in the evening.", "2026-12-12", "19:30", 5),  # not "five December"
    ("Five December, at eight, for two.", "2026-12-05", "20:00", 2),
    ("We are four, next Friday at 8pm.", "2026-12-11", "20:00", 4),
    ("For two at 7.30 tonight.", "2026-12-04", "19:30", 2),
    ("Tomorrow, seven thirty, for two.", "2026-12-05", "19:30", 2),
    ("a table for 7 pm tomorrow", "2026-12-05", "19:00", None),  # 7 pm is a time, not a party
    ("Quarter to eight for twenty two people.", None, "19:45", 22),
    ("A table for two tomorrow at eight o'clock.", "2026-12-05", "20:00", 2),
    ("Six of us on Saturday at 6:30.", "2026-12-05", "18:30", 6),
    ("The day after tomorrow at nine in the morning for 3", "2026-12-06", "09:00", 3),
    ("On the first of January at noon for one person", "2027-01-01", "12:00", 1),
    ("This is my first time calling, a table for two.", None, None, 2),  # "first" is not a date
    ("Seven or eight, for two, tomorrow.", "2026-12-05", None, 2),  # two times: not sure
    ("Tomorrow or Sunday at seven", None, "19:00", None),
    ("My name is Maria.", None, None, None),
    ("Yes.", None, None, None),
    ("No, cancel it.", None, None, None),
    ("Hello.", None, None, None),
    ("A table for 6 on 2026-12-10 at 18:30, is that possible?", "2026-12-10", "18:30", 6),
    ("A table for two on 2026-12-05 at 19:00?", "2026-12-05", "19:00", 2),
    ("Tomorrow at seven forty-five for two.", "2026-12-05", "19:45", 2),
]


@pytest.mark.parametrize(("text", "date", "time", "party"), PHRASINGS)
def test_the_reader_reads_what_a_caller_says_and_nothing_it_is_not_sure_of(
        text: str, date: str | None, time: str | None, party: int | None) -> None:
    day = read_date(text, FRIDAY)
    assert (None if day is None else day.isoformat(), read_time(text), read_count(text)) == (date, time, party)


def test_read_slots_leaves_out_a_value_the_schema_refuses() -> None:
    # "for forty" is a count the reader is sure of, but the schema's maximum is 20
    assert read_slots("a table for forty tomorrow at seven", FRIDAY, SLOTS, PROPS) == {
        "date": "2026-12-05", "time": "19:00"}
    assert read_slots("a table for four tomorrow at seven", FRIDAY, SLOTS, PROPS) == {
        "date": "2026-12-05", "time": "19:00", "party_size": 4}


def test_a_day_that_has_passed_this_month_is_next_months() -> None:
    assert read_date("on the 3rd", FRIDAY) == datetime.date(2027, 1, 3)
    assert read_date("on the 31st", datetime.date(2026, 11, 4)) == datetime.date(2026, 12, 31)  # November has 30


def test_a_schema_the_reader_cannot_check_is_not_trusted() -> None:
    assert not accepts({"anyOf": [{"type": "integer"}]}, 2)
    assert not accepts({"type": "string"}, 2) and not accepts({"type": "integer", "enum": [1, 3]}, 2)


_WORDS = st.sampled_from(
    ["a", "table", "for", "two", "at", "seven", "tomorrow", "the", "12th", "of", "december", "half", "past", "quarter", "to", "pm", "p.m.", "o'clock", "42", "19:30", "7.30", "people", "party", "we", "are", "next", "friday", "sunday", "day", "after", "twenty", "one", "first", "0", "99", "2026-13-45", ":", "-", ".", ",", "thirty", "forty", "five", "us", "oh", "noon", "morning"])


@given(st.lists(_WORDS, max_size=14).map(" ".join) | st.text(max_size=60),
       st.dates(min_value=datetime.date(2000, 1, 1), max_value=datetime.date(2099, 12, 31)))
def test_the_reader_never_raises_nor_returns_a_value_its_schema_refuses(text: str, today: datetime.date) -> None:
    found = read_slots(text, today, SLOTS, PROPS)
    assert all(accepts(PROPS[name], value) for name, value in found.items())
    if "party_size" in found:
        assert 1 <= found["party_size"] <= 20
    if "date" in found:
        assert datetime.date.fromisoformat(found["date"]) >= today
