"""The demo's scripted LLM: a rule-based restaurant host for when no real model is configured.

It reads the conversation like a model would, but with keyword rules: it collects the
party size, the day and the time from everything the caller said, calls
``check_availability`` once it has all three, offers the alternatives when the time is
taken, asks for a name, calls ``book_table`` (which the confirmation gate holds), and
calls ``confirm_pending`` when the caller's next turn says yes.  Good enough to show the
pipeline, the tools and the gate end to end with no model installed; it understands
only simple English requests ("a table for four tomorrow at seven").
"""

from __future__ import annotations

import json
import re
from collections.abc import AsyncGenerator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from brisvox.agent.context import AssistantMessage, Message, ToolMessage, UserMessage
from brisvox.agent.tools.registry import CONFIRM_PENDING
from brisvox.core.clock import Clock
from brisvox.providers.llm import (
    Done,
    FinishReason,
    GeneratorLlmStream,
    LlmEvent,
    LlmProvider,
    LlmRequest,
    TextDelta,
    ToolCallDelta,
)

__all__ = ["Call", "DemoHostLlm", "DemoSlots", "Say", "demo_script", "scripted_demo_llm"]


@dataclass(frozen=True, slots=True)
class Say:
    text: str


@dataclass(frozen=True, slots=True)
class Call:
    name: str
    arguments: dict[str, Any]


Script = list[Say | Call]

_NUMBERS = {"one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7, "eight": 8,
            "nine": 9, "ten": 10, "eleven": 11, "twelve": 12}
_NUM = r"(\d{1,2}|" + "|".join(_NUMBERS) + ")"
_WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
_YES = re.compile(r"\b(yes|yeah|yep|sure|please do|go ahead|correct|confirm|book it|that's right|ok|okay)\b")
_NO = re.compile(r"\b(no|nope|don't|do not|cancel)\b")


def _number(word: str) -> int:
    return int(word) if word.isdigit() else _NUMBERS[word]


@dataclass(slots=True)
class DemoSlots:
    """What the caller asked for so far (later words win)."""

    party: int | None = None
    date: str | None = None
    time: str | None = None
    name: str | None = None

    def update(self, text: str, today: datetime) -> None:
        t = text.lower()
        if (m := re.search(r"\bfor " + _NUM + r"\b(?! ?(?:o'clock|pm|p\.m|am|:))", t)) or (m := re.search(_NUM + r" (?:people|persons|guests|of us)", t)):
            self.party = _number(m.group(1))
        if m := re.search(r"\b(\d{1,2}):(\d{2})\b", t):
            self.time = f"{int(m.group(1)) % 24:02d}:{m.group(2)}"
        elif m := re.search(r"\bat " + _NUM + r"\b", t):
            hour = _number(m.group(1))
            self.time = f"{hour + 12 if hour < 12 else hour:02d}:00"
        if "tomorrow" in t:
            self.date = (today + timedelta(days=1)).date().isoformat()
        elif "today" in t or "tonight" in t:
            self.date = today.date().isoformat()
        else:
            for i, day in enumerate(_WEEKDAYS):
                if day in t:
                    ahead = (i - today.weekday()) % 7 or 7
                    self.date = (today + timedelta(days=ahead)).date().isoformat()
        m = re.search(r"\b(?:name is|under(?: the name)?|it's|i am|i'm|this is) ([a-z][a-z'-]+)", t)
        if m and m.group(1) not in {"a", "the", "for", "looking", "calling"}:
            self.name = m.group(1).capitalize()

    def missing(self) -> list[str]:
        return [what for what, value in (("how many people", self.party), ("which day", self.date),
                                         ("what time", self.time)) if value is None]


def _json(message: ToolMessage) -> dict[str, Any]:
    try:
        body = json.loads(message.content)
    except ValueError:
        return {}
    return body if isinstance(body, dict) else {}


def demo_script(messages: tuple[Message, ...], today: datetime) -> Script:
    """The next response of the scripted host for ``messages``."""
    slots = DemoSlots()
    names: dict[str, str] = {}
    last_check: dict[str, Any] | None = None
    pending: str | None = None
    for message in messages:
        if isinstance(message, UserMessage):
            slots.update(message.text, today)
        elif isinstance(message, AssistantMessage):
            names.update({c.id: c.name for c in message.tool_calls})
        elif isinstance(message, ToolMessage):
            body = _json(message)
            tool = names.get(message.call_id, "")
            if tool == "check_availability":
                last_check = body
            if body.get("status") == "confirmation_required":
                pending = str(body.get("call_id", message.call_id))
            elif tool in ("book_table", CONFIRM_PENDING):
                pending = None
    last = messages[-1] if messages else None
    if isinstance(last, ToolMessage):
        return _after_tool(names.get(last.call_id, ""), _json(last), slots)
    text = last.text.lower() if isinstance(last, UserMessage) else ""
    if pending is not None and _YES.search(text) and not _NO.search(text):
        return [Call(name=CONFIRM_PENDING, arguments={"call_id": pending})]
    missing = slots.missing()
    if missing:
        return [Say(f"Happy to help with a table. Could you tell me {' and '.join(missing)}?")]
    assert slots.party is not None and slots.date is not None and slots.time is not None
    request = {"date": slots.date, "time": slots.time, "party_size": slots.party}
    checked = last_check is not None and all(last_check.get(k) == v for k, v in request.items() if k != "party_size")
    if not checked or not (last_check or {}).get("free"):
        return [Say("Let me check. "), Call(name="check_availability", arguments=request)]
    if slots.name is None:
        return [Say("What name should I put the booking under?")]
    return [Call(name="book_table", arguments={"name": slots.name, **request})]


def _after_tool(tool: str, body: dict[str, Any], slots: DemoSlots) -> Script:
    status = body.get("status")
    if tool == "check_availability":
        if body.get("free"):
            ask = " Shall I book it? What name should it be under?" if slots.name is None else " Shall I book it?"
            return [Say(f"Good news: {body.get('time')} on {body.get('date')} is free for {slots.party}.{ask}")]
        alternatives = [str(t) for t in body.get("alternatives", [])]
        if alternatives:
            return [Say(f"Sorry, {body.get('time')} is taken. I can offer {', '.join(alternatives)}. Which would you like?")]
        return [Say("Sorry, we are fully booked that day. Would another day work?")]
    if status == "confirmation_required":
        return [Say(f"To confirm: a table for {slots.party} on {slots.date} at {slots.time}, "
                    f"under the name {slots.name}. Shall I book it?")]
    if status == "confirmed":
        return [Say(f"Done! Your table is booked, reservation {body.get('reservation_id')}. See you then!")]
    if status == "unavailable":
        return [Say("Sorry, that table was just taken. Shall I look for another time?")]
    return [Say("Sorry, something went wrong with that. Could you say it again?")]


class DemoHostLlm(LlmProvider):
    """The scripted host as an LLM provider: text streamed a word at a time, calls in one piece."""

    def __init__(self, clock: Clock) -> None:
        self._clock = clock

    @property
    def name(self) -> str:
        return "scripted-demo-host"

    def stream(self, request: LlmRequest) -> GeneratorLlmStream:
        return GeneratorLlmStream(self.name, self._events(demo_script(request.messages, self._clock.wall())))

    async def _events(self, script: Script) -> AsyncGenerator[LlmEvent, None]:
        calls = 0
        for step in script:
            if isinstance(step, Say):
                for piece in re.findall(r"\s*\S+\s*", step.text):
                    yield TextDelta(text=piece)
            else:
                yield ToolCallDelta(index=calls, id=f"call_{calls}", name=step.name,
                                    arguments_fragment=json.dumps(step.arguments, separators=(",", ":")))
                calls += 1
        yield Done(finish_reason=FinishReason.TOOL_CALLS if calls else FinishReason.STOP)


def scripted_demo_llm(clock: Clock) -> DemoHostLlm:
    """The scripted host (``today`` from the clock's wall time)."""
    return DemoHostLlm(clock)
