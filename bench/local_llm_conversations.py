"""Whole conversations with the demo restaurant agent, typed, through the real engine.

Each conversation is a call of ``examples/restaurant/`` run by :class:`brisvox.testing.AgentTest`
in text mode on the system clock: the engine's runner with the agent's tools, the
confirmation gate and the filler, the chosen LLM (``--llm local``: the embedded Qwen through
``XLlamaLlm``, its prompt prefix warmed first as ``brisvox serve`` does; ``--llm scripted``:
the demo's scripted host, the reference), the caller's turns typed (the transport's text
input, so no audio and no STT: a conversation takes seconds) and the mock voice.

What a conversation did is read from the engine's typed events (``ToolCallStarted`` with
its parsed arguments, ``ToolCallSettled`` with its outcome, ``EngineFailure``, ``LlmRound``)
and from the bookings in the call's own ``Restaurant``, never from the transcript.  Scenarios
(at least 3 phrasings each): greeting, opening hours, availability with day, time and party
(must call ``check_availability`` with them), one fact missing (must ask: no tool), a booking
(request, name, yes: booked exactly once, after the yes, under the caller's name), a booking
then "no" (the gate reached, nothing booked), a full slot (20:00) then an alternative, a
party over 8 (looked up, nothing booked), a change of mind on the time (looked up again),
a spelled name (booked under it), thanks and goodbye (no tool).

Prints per scenario the conversations passed, one line per miss, the median model time per
round (``LlmRound``: request to its end) and the median prompt tokens a round evaluated
(not from the cache; the local model reports them) after a caller's words and after a
tool result; then the totals and the load average.

Usage: ``python bench/local_llm_conversations.py [--llm local|scripted] [--only SCENARIO ...]``
(``--llm local`` needs the ``local-llm`` extra and ``brisvox models fetch qwen2_5_coder_0_5b_q4``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import os
import statistics
import sys
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from brisvox.agent import ToolMessage
from brisvox.core.clock import Clock, SystemClock
from brisvox.engine import events as ev
from brisvox.engine.config import LlmConfig
from brisvox.providers.llm import Done, GeneratorLlmStream, LlmEvent, LlmProvider, LlmRequest, PrefixWarm
from brisvox.server.call import warm_request
from brisvox.server.demo import DEMO_DIR
from brisvox.server.demo_llm import scripted_demo_llm
from brisvox.testing import AgentTest

sys.path.insert(0, str(DEMO_DIR))
import restaurant_agent

CONFIRM = "confirm_pending"
CHECK = "check_availability"
BOOK = "book_table"
ROUND_LIMIT = LlmConfig().max_tool_rounds  # a turn of this many rounds (calls) ends on the fallback line


@dataclass(frozen=True, slots=True)
class ToolUse:
    """One tool call of a turn: its parsed arguments and how it settled (None: never settled)."""

    name: str
    arguments: Mapping[str, Any] | None
    outcome: str | None


@dataclass(slots=True)
class TurnSeen:
    text: str
    tools: list[ToolUse] = field(default_factory=list)
    bookings_after: int = 0  # bookings in the restaurant once the turn was answered
    failed: bool = False  # the engine answered with its fallback line (an LLM failure)
    rounds: int = 0  # model rounds (all of them calls: the round limit's fallback line)
    answered: bool = False  # some text was said


@dataclass(slots=True)
class Seen:
    """What one conversation did (from events and the restaurant)."""

    turns: list[TurnSeen] = field(default_factory=list)
    bookings: list[tuple[str, str, str, int]] = field(default_factory=list)  # name, date, time, party

    def calls(self, name: str) -> list[ToolUse]:
        return [t for turn in self.turns for t in turn.tools if t.name == name]


Check = Callable[[Seen], str | None]  # None: passed; else what went wrong, one line


@dataclass(frozen=True, slots=True)
class Conversation:
    scenario: str
    turns: tuple[str, ...]
    check: Check


def _slot(date: str, time: str, party: int) -> dict[str, Any]:
    return {"date": date, "time": time, "party_size": party}


def _shown(uses: Sequence[ToolUse]) -> str:
    return "; ".join(f"{u.name}({dict(u.arguments or {})})->{u.outcome}" for u in uses) or "no tool call"


def _failed(seen: Seen) -> str | None:
    n = [i + 1 for i, t in enumerate(seen.turns) if t.failed]
    if n:
        return f"fallback line in turn {n[0]}"
    n = [i + 1 for i, t in enumerate(seen.turns) if t.rounds >= ROUND_LIMIT]
    return f"all {ROUND_LIMIT} rounds used (the round limit's fallback line) in turn {n[0]}" if n else None


def talk_only(seen: Seen) -> str | None:
    """Every turn answered in words, no tool called."""
    if (bad := _failed(seen)) is not None:
        return bad
    for i, turn in enumerate(seen.turns, 1):
        if turn.tools:
            return f"turn {i} called {_shown(turn.tools)}"
        if not turn.answered:
            return f"turn {i} got no words"
    return None


def looked_up(*slots: dict[str, Any]) -> Check:
    """``check_availability`` called with each slot, in order (other calls may come between);
    nothing booked."""

    def check(seen: Seen) -> str | None:
        if (bad := _failed(seen)) is not None:
            return bad
        uses = seen.calls(CHECK)
        at = 0
        for want in slots:
            while at < len(uses) and dict(uses[at].arguments or {}) != want:
                at += 1
            if at == len(uses):
                return f"no {CHECK}({want}); calls: {_shown([t for turn in seen.turns for t in turn.tools])}"
            at += 1
        if seen.bookings:
            return f"booked {seen.bookings}"
        return None

    return check


def _unchecked(seen: Seen, slot: dict[str, Any]) -> str | None:
    """The fallback line, or ``slot`` never looked up (None: neither)."""
    if (bad := _failed(seen)) is not None:
        return bad
    if not any(dict(u.arguments or {}) == slot for u in seen.calls(CHECK)):
        return f"never looked {slot} up; calls: {_shown([t for turn in seen.turns for t in turn.tools])}"
    return None


def booked(name: str, slot: dict[str, Any]) -> Check:
    """The last turn is the caller's yes: looked up first, then booked exactly once, in that
    turn, with the caller's name and the slot."""

    def check(seen: Seen) -> str | None:
        if (bad := _unchecked(seen, slot)) is not None:
            return bad
        every = [t for turn in seen.turns for t in turn.tools]
        before_yes = seen.turns[-2].bookings_after if len(seen.turns) > 1 else 0
        if before_yes:
            return f"booked {before_yes} before the yes"
        if len(seen.bookings) != 1:
            return f"{len(seen.bookings)} bookings after the yes; calls: {_shown(every)}"
        got = seen.bookings[0]
        if got[0].replace(" ", "").lower() != name.replace(" ", "").lower() or \
                (got[1], got[2], got[3]) != (slot["date"], slot["time"], slot["party_size"]):
            return f"booked {got}, want {name!r} {slot}"
        return None

    return check


def declined(slot: dict[str, Any]) -> Check:
    """Looked up, the booking held at the gate, then nothing booked after the caller's no."""

    def check(seen: Seen) -> str | None:
        if (bad := _unchecked(seen, slot)) is not None:
            return bad
        every = [t for turn in seen.turns for t in turn.tools]
        if not any(u.outcome == "confirmation_required" for u in seen.calls(BOOK)):
            return f"the booking never reached the gate; calls: {_shown(every)}"
        if seen.bookings:
            return f"booked {seen.bookings} after the no"
        return None

    return check


def conversations(today: datetime.date) -> tuple[Conversation, ...]:
    """The set, dated from ``today`` (the call's date: the engine tells the model the same one)."""
    tomorrow = (today + datetime.timedelta(days=1)).isoformat()
    later = today + datetime.timedelta(days=3)
    weekday, later_iso = f"{later:%A}", later.isoformat()
    tonight = today.isoformat()
    c = Conversation
    talk = talk_only
    return (
        c("greeting", ("Hello?",), talk),
        c("greeting", ("Hi there, good evening.",), talk),
        c("greeting", ("Hello, is this Lokanta Deniz?",), talk),
        c("greeting", ("Good evening, how are you?",), talk),
        c("hours", ("What time do you open?",), talk),
        c("hours", ("What are your opening hours?",), talk),
        c("hours", ("Are you open in the evening?",), talk),
        c("hours", ("Until when are you open tonight?",), talk),
        c("availability", ("Do you have a table for two tomorrow at 19:00?",), looked_up(_slot(tomorrow, "19:00", 2))),
        c("availability", ("Is there room for four people tomorrow at 18:00?",),
          looked_up(_slot(tomorrow, "18:00", 4))),
        c("availability", (f"A table for three on {weekday} at 21:00, please.",),
          looked_up(_slot(later_iso, "21:00", 3))),
        c("availability", ("Can two of us come tonight at 19:00?",), looked_up(_slot(tonight, "19:00", 2))),
        c("missing", ("I'd like a table for two tomorrow.",), talk),
        c("missing", ("Do you have a table tomorrow at 19:00?",), talk),
        c("missing", ("Can I book for four people at 18:00?",), talk),
        c("missing", ("A table for six, please.",), talk),
        c("booking", ("A table for two tomorrow at 19:00, please.", "The name is Brown.", "Yes, please book it."),
          booked("Brown", _slot(tomorrow, "19:00", 2))),
        c("booking", ("Do you have a table for four tomorrow at 18:00?", "My name is Maria.", "Yes."),
          booked("Maria", _slot(tomorrow, "18:00", 4))),
        c("booking", (f"Is there a table for three on {weekday} at 19:00?", "Under Kemal, please.",
                      "Yes, that's right, go ahead."), booked("Kemal", _slot(later_iso, "19:00", 3))),
        c("booking", ("Two people tonight at 21:00, is that possible?", "It's for Ayse.", "Yes please."),
          booked("Ayse", _slot(tonight, "21:00", 2))),
        c("declined", ("A table for two tomorrow at 19:00, please.", "The name is Brown.", "No, cancel that."),
          declined(_slot(tomorrow, "19:00", 2))),
        c("declined", ("Do you have a table for four tomorrow at 18:00?", "My name is Maria.",
                       "No, forget it, don't book."), declined(_slot(tomorrow, "18:00", 4))),
        c("declined", (f"Is there a table for three on {weekday} at 19:00?", "Under Kemal, please.",
                       "Actually no, I changed my mind."), declined(_slot(later_iso, "19:00", 3))),
        c("full", ("A table for two tomorrow at 20:00?", "Then 19:00, please."),
          looked_up(_slot(tomorrow, "20:00", 2), _slot(tomorrow, "19:00", 2))),
        c("full", ("Do you have room for four tomorrow at 20:00?", "OK, 21:00 then."),
          looked_up(_slot(tomorrow, "20:00", 4), _slot(tomorrow, "21:00", 4))),
        c("full", (f"Three people on {weekday} at 20:00, please.", "How about 18:00?"),
          looked_up(_slot(later_iso, "20:00", 3), _slot(later_iso, "18:00", 3))),
        c("big party", ("A table for twelve tomorrow at 19:00, please.",), looked_up(_slot(tomorrow, "19:00", 12))),
        c("big party", ("Do you have room for 10 people tomorrow at 18:00?",),
          looked_up(_slot(tomorrow, "18:00", 10))),
        c("big party", (f"We are fifteen, {weekday} at 19:00. Is there space?",),
          looked_up(_slot(later_iso, "19:00", 15))),
        c("change time", ("A table for two tomorrow at 19:00, please.", "Actually, make it 18:00 instead."),
          looked_up(_slot(tomorrow, "19:00", 2), _slot(tomorrow, "18:00", 2))),
        c("change time", ("Is there a table for four tomorrow at 18:00?", "Sorry, can we do 21:00 instead?"),
          looked_up(_slot(tomorrow, "18:00", 4), _slot(tomorrow, "21:00", 4))),
        c("change time", (f"Three of us on {weekday} at 21:00.", "No wait, 19:00 is better."),
          looked_up(_slot(later_iso, "21:00", 3), _slot(later_iso, "19:00", 3))),
        c("spelled name", ("A table for two tomorrow at 19:00, please.", "The name is Kaya, K A Y A.", "Yes."),
          booked("Kaya", _slot(tomorrow, "19:00", 2))),
        c("spelled name", ("Do you have a table for four tomorrow at 18:00?",
                           "Put it under Yilmaz, that's Y I L M A Z.", "Yes, book it."),
          booked("Yilmaz", _slot(tomorrow, "18:00", 4))),
        c("spelled name", (f"Is there a table for three on {weekday} at 21:00?",
                           "My name is Oz, spelled O Z.", "Yes please."), booked("Oz", _slot(later_iso, "21:00", 3))),
        c("goodbye", ("Thank you, goodbye.",), talk),
        c("goodbye", ("That's all, thanks. Bye!",), talk),
        c("goodbye", ("OK, thank you very much. Have a nice evening.",), talk),
        c("goodbye", ("Great, thanks for your help. Goodbye.",), talk),
        c("booking", ("Hello.", "I need a table for two tomorrow at 18:00.", "The name is Lee.", "Yes, go ahead."),
          booked("Lee", _slot(tomorrow, "18:00", 2))),
        c("declined", ("Hello.", "A table for two tomorrow at 21:00?", "Name is Lee.", "No thanks."),
          declined(_slot(tomorrow, "21:00", 2))),
        c("full", ("Hello.", "Four people tomorrow at 20:00.", "19:00 is fine then."),
          looked_up(_slot(tomorrow, "20:00", 4), _slot(tomorrow, "19:00", 4))),
    )


@dataclass(slots=True)
class RoundUse:
    """One request's prompt as the provider reported it: tokens evaluated (not from the cache)
    and whether the request ended in a tool result (a result round)."""

    evaluated: int
    after_result: bool


class Metered(LlmProvider):
    """The LLM with each request's prompt tokens noted (from its ``Done`` usage)."""

    def __init__(self, inner: LlmProvider) -> None:
        self.inner = inner
        self.rounds: list[RoundUse] = []

    @property
    def name(self) -> str:
        return self.inner.name

    def stream(self, request: LlmRequest) -> GeneratorLlmStream:
        return GeneratorLlmStream(self.name, self._events(request))

    async def _events(self, request: LlmRequest) -> AsyncGenerator[LlmEvent, None]:
        after_result = bool(request.messages) and isinstance(request.messages[-1], ToolMessage)
        async with self.inner.stream(request) as stream:
            async for event in stream:
                if isinstance(event, Done) and event.usage is not None and event.usage.input_tokens:
                    usage = event.usage
                    self.rounds.append(RoundUse(usage.input_tokens - usage.cached_input_tokens, after_result))
                yield event

    async def warm(self) -> None:
        await self.inner.warm()


class Recorder:
    """Folds a call's events into :class:`Seen` (and the model's round times)."""

    def __init__(self, seen: Seen, round_times: list[float]) -> None:
        self.seen = seen
        self.round_times = round_times
        self._turn: dict[int, TurnSeen] = {}
        self._open: dict[str, int] = {}  # call id -> index in its turn's tools

    def begin(self, text: str) -> TurnSeen:
        turn = TurnSeen(text)
        self.seen.turns.append(turn)
        return turn

    def __call__(self, event: ev.EngineEvent) -> None:
        if isinstance(event, ev.UserTurn):
            self._turn[event.epoch] = self.seen.turns[-1]
            return
        if isinstance(event, ev.LlmRound):
            self.round_times.append(event.at - event.requested)
        turn = self._turn.get(event.epoch)
        if turn is None:  # the greeting
            return
        if isinstance(event, ev.LlmRound):
            turn.rounds += 1
        if isinstance(event, ev.ToolCallStarted):
            self._open[event.call_id] = len(turn.tools)
            turn.tools.append(ToolUse(event.name, event.parsed, None))
        elif isinstance(event, ev.ToolCallSettled) and (at := self._open.pop(event.call_id, None)) is not None:
            use = turn.tools[at]
            turn.tools[at] = ToolUse(use.name, use.arguments, event.outcome.value)
        elif isinstance(event, ev.EngineFailure) and event.stage == "llm":
            turn.failed = True
        elif isinstance(event, ev.BotText) and event.text.strip():
            turn.answered = True


async def converse(conversation: Conversation, llm: LlmProvider, clock: Clock,
                   round_times: list[float]) -> Seen:
    """Run one conversation as a call; what it did."""
    restaurant = restaurant_agent.Restaurant()
    seen = Seen()
    recorder = Recorder(seen, round_times)

    def bookings() -> list[tuple[str, str, str, int]]:
        return [(b.name, b.date, b.time, b.party_size) for b in restaurant.bookings]

    async with AgentTest(restaurant_agent.build_agent(restaurant), llm=llm, clock=clock,
                         on_event=recorder) as test:
        for text in conversation.turns:
            turn = recorder.begin(text)
            await test.user_says(text)
            turn.bookings_after = len(restaurant.bookings)
    seen.bookings = bookings()
    return seen


def _median(values: Sequence[float], unit: str = " s") -> str:
    return f"{statistics.median(values):.2f}{unit}" if values else "-"


async def run(which: str, only: Sequence[str]) -> int:
    clock = SystemClock()
    inner: LlmProvider
    close: Callable[[], Awaitable[None]] | None = None
    if which == "local":
        from brisvox.providers.local.xllama import XLlamaLlm

        inner = local = XLlamaLlm(clock=clock)
        close = local.aclose
    else:
        inner = scripted_demo_llm(clock)
    llm = Metered(inner)
    today = clock.wall().date()
    chosen = [c for c in conversations(today) if not only or c.scenario in only]
    by_scenario: dict[str, list[tuple[Conversation, str | None, list[float]]]] = {}
    try:
        if isinstance(inner, PrefixWarm):  # as `brisvox serve` does at start
            agent = restaurant_agent.build_agent()
            prefix = warm_request(agent.definition(), agent.toolset(), today)
            if prefix is not None:
                await inner.warm_prefix(prefix)
        else:
            await inner.warm()
        for conversation in chosen:
            times: list[float] = []
            try:
                miss = conversation.check(await converse(conversation, llm, clock, times))
            except AssertionError as exc:  # the test harness: no answer within its limit
                miss = f"the call failed: {str(exc)[:100]}"
            by_scenario.setdefault(conversation.scenario, []).append((conversation, miss, times))
            print(f"  {conversation.scenario:12s} {'ok  ' if miss is None else 'MISS'} {conversation.turns[0]!r}",
                  flush=True)
    finally:
        if close is not None:
            await close()
    print(f"\n--llm {which}, {len(chosen)} conversations, today {today} (load average "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())})")
    passed = total = 0
    all_times: list[float] = []
    for scenario, results in by_scenario.items():
        ok = sum(miss is None for _, miss, _ in results)
        times = [t for _, _, ts in results for t in ts]
        all_times.extend(times)
        passed += ok
        total += len(results)
        print(f"{scenario:12s} {ok}/{len(results)} passed; model round p50 {_median(times)} ({len(times)} rounds)")
        for conversation, miss, _ in results:
            if miss is not None:
                print(f"    miss {' | '.join(conversation.turns)!r}: {miss}")
    user = [r.evaluated for r in llm.rounds if not r.after_result]
    result = [r.evaluated for r in llm.rounds if r.after_result]
    print(f"total {passed}/{total} passed; model round p50 {_median(all_times)} ({len(all_times)} rounds); "
          f"prompt tokens evaluated p50 {_median(user, '')} after the caller's words ({len(user)} rounds), "
          f"{_median(result, '')} after a tool result ({len(result)} rounds)")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--llm", choices=("local", "scripted"), default="local")
    parser.add_argument("--only", nargs="*", default=(), help="scenarios to run (default: all)")
    args = parser.parse_args(argv)
    return asyncio.run(run(args.llm, args.only))


if __name__ == "__main__":
    sys.exit(main())
