"""Decision quality of the embedded LLM on the demo restaurant agent: the right tool at the right time.

Each case is a caller's utterance with a short context (earlier turns, tool results) and
the expected decision: a spoken reply (no tool), or one tool call with its arguments.
The system prompt is the demo agent's (examples/restaurant/agent.toml), or the
file given with ``--agent``, followed by the date line the cases assume.  The tools are
the demo's own.  Prints each miss and the rates:

* decision: the right kind of answer (text, or the right tool);
* exact: the right tool with exactly the expected arguments (text counts when it is text);
* first token and total time per case (medians), for the record.

Usage: ``python bench/local_llm_decisions.py [--agent FILE] [--only N]`` (needs the
``local-llm`` extra and ``brisvox models fetch qwen2_5_coder_0_5b_q4``).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime
import json
import statistics
import sys
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from time import perf_counter
from typing import Any

from brisvox.agent import AssistantMessage, Message, SystemMessage, ToolCall, ToolMessage, UserMessage
from brisvox.engine.rounds import with_date
from brisvox.providers.llm import Done, LlmError, LlmRequest, TextDelta, ToolCallDelta
from brisvox.providers.local.xllama import XLlamaLlm
from brisvox.server.demo import DEMO_AGENT_FILE, demo_tools

TODAY = datetime.date(2026, 12, 4)  # the cases' dates count from this day
TEXT = None  # the expected decision "a spoken reply"


@dataclass(frozen=True, slots=True)
class Case:
    said: str
    expect: tuple[str, dict[str, Any]] | None  # (tool, arguments) or TEXT
    context: tuple[Message, ...] = field(default=())


def _check(date: str, time: str, party: int) -> tuple[str, dict[str, Any]]:
    return ("check_availability", {"date": date, "time": time, "party_size": party})


def _book(name: str, date: str, time: str, party: int) -> tuple[str, dict[str, Any]]:
    return ("book_table", {"name": name, "date": date, "time": time, "party_size": party})


def _checked(user: str, date: str, time: str, party: int, free: bool, alternatives: list[str], reply: str) -> tuple[Message, ...]:
    """A context where the agent already looked the table up and told the caller."""
    args = {"date": date, "time": time, "party_size": party}
    result = {"free": free, "date": date, "time": time, "alternatives": alternatives}
    return (
        UserMessage(text=user),
        AssistantMessage(text="", tool_calls=(ToolCall(id="c1", name="check_availability", arguments=args),)),
        ToolMessage(call_id="c1", content=json.dumps(result)),
        AssistantMessage(text=reply),
    )


FREE_2 = _checked("A table for two on 2026-12-05 at 19:00?", "2026-12-05", "19:00", 2, True, [],
                  "A table for two on 2026-12-05 at 19:00 is free. May I have your name?")
FREE_4 = _checked("Four people, December 7th at 19:30.", "2026-12-07", "19:30", 4, True, [],
                  "Good news, 19:30 on December 7th is free for four. What name should I put it under?")
FULL_2 = _checked("Two people tomorrow at eight.", "2026-12-05", "20:00", 2, False, ["18:30", "19:00", "21:00"],
                  "Sorry, 20:00 is full. I can offer 18:30, 19:00 or 21:00.")

CASES: tuple[Case, ...] = (
    # A spoken reply: nothing to look up yet, or nothing to look up at all.
    Case("Hello?", TEXT),
    Case("Hi, I'd like to book a table.", TEXT),
    Case("What time do you open?", TEXT),
    Case("Do you have vegetarian dishes?", TEXT),
    Case("Where is the restaurant?", TEXT),
    Case("For four people.", TEXT, (UserMessage(text="I want to book."), AssistantMessage(text="Sure. For how many people, and when?"))),
    Case("Thank you, goodbye.", TEXT),
    Case("Can I bring my dog?", TEXT),
    Case("Tomorrow, please.", TEXT, (UserMessage(text="A table, please."), AssistantMessage(text="Of course. What day?"))),
    Case("Sorry, I didn't catch that.", TEXT),
    Case("No, forget it, cancel that.", TEXT, FREE_2),
    # Everything known: look it up.
    Case("Is there a table for two on December 5th at 19:00?", _check("2026-12-05", "19:00", 2)),
    Case("Do you have room for four people tomorrow at 7 pm?", _check("2026-12-05", "19:00", 4)),
    Case("A table for 6 on 2026-12-10 at 18:30, is that possible?", _check("2026-12-10", "18:30", 6)),
    Case("Can three of us come tonight at eight?", _check("2026-12-04", "20:00", 3)),
    Case("Any chance of a table for two on Saturday at 18:00?", _check("2026-12-05", "18:00", 2)),
    Case("We are five, December 12 at half past seven in the evening.", _check("2026-12-12", "19:30", 5)),
    Case("Is 20:00 free on December 6 for 2 people?", _check("2026-12-06", "20:00", 2)),
    Case("Is there space for eight people on December 20th at 18:00?", _check("2026-12-20", "18:00", 8)),
    Case("A table for one, today at 18:15?", _check("2026-12-04", "18:15", 1)),
    Case("Could I get a table for two at 21:00 on the 9th of December?", _check("2026-12-09", "21:00", 2)),
    Case("December 7th at 19:30.", _check("2026-12-07", "19:30", 4),
         (UserMessage(text="I'd like a table for four."), AssistantMessage(text="Sure, what day and time?"))),
    Case("Two of us.", _check("2026-12-05", "19:00", 2),
         (UserMessage(text="Tomorrow at seven in the evening."), AssistantMessage(text="How many people?"))),
    Case("Make it three people instead.", _check("2026-12-05", "19:00", 3), FREE_2),
    Case("18:30 then.", _check("2026-12-05", "18:30", 2), FULL_2),
    Case("Book a table for two tomorrow at 19:00 for Kemal.", _check("2026-12-05", "19:00", 2)),
    # The table is free and the name is given: book it (the engine holds it for the caller's yes).
    Case("It's Ayse.", _book("Ayse", "2026-12-05", "19:00", 2), FREE_2),
    Case("My name is John Smith.", _book("John Smith", "2026-12-05", "19:00", 2), FREE_2),
    Case("Under Maria, please.", _book("Maria", "2026-12-07", "19:30", 4), FREE_4),
    Case("Please book it, the name is Deniz.", _book("Deniz", "2026-12-07", "19:30", 4), FREE_4),
    Case("Put it under Lee.", _book("Lee", "2026-12-05", "19:00", 2), FREE_2),
    # A tool result just arrived: tell the caller.
    Case("", TEXT, FREE_2[:3]),
    Case("", TEXT, FULL_2[:3]),
)


def agent_prompt(path: Path) -> str:
    with path.open("rb") as f:
        prompt = tomllib.load(f)["agent"]["prompt"]
    assert isinstance(prompt, str)
    return prompt.strip()


def _messages(system: str, case: Case) -> tuple[Message, ...]:
    said = (UserMessage(text=case.said),) if case.said else ()
    return (*with_date((SystemMessage(text=system),), TODAY), *case.context, *said)  # as the engine sends it


async def run(agent: Path, only: int | None) -> int:
    tools = demo_tools()
    specs = tuple(tools.spec(n) for n in tools.names())
    system = agent_prompt(agent)
    llm = XLlamaLlm()
    decided = exact = 0
    firsts: list[float] = []
    totals: list[float] = []
    cases = CASES[:only] if only else CASES
    try:
        await llm.warm()
        for n, case in enumerate(cases, 1):
            request = LlmRequest(messages=_messages(system, case), tools=specs)
            text, name, args, error = "", None, "", None
            t0 = perf_counter()
            first: float | None = None
            async with llm.stream(request) as stream:
                async for event in stream:
                    if first is None and isinstance(event, TextDelta | ToolCallDelta):
                        first = perf_counter() - t0
                    if isinstance(event, TextDelta):
                        text += event.text
                    elif isinstance(event, ToolCallDelta):
                        name = event.name or name
                        args += event.arguments_fragment
                    elif isinstance(event, LlmError):
                        error = str(event.error)
                    elif isinstance(event, Done):
                        pass
            totals.append(perf_counter() - t0)
            if first is not None:
                firsts.append(first)
            got = (name, json.loads(args)) if name else TEXT
            ok_kind = (got is None) == (case.expect is None) and (got is None or case.expect is None or got[0] == case.expect[0])
            ok_exact = ok_kind and got == case.expect
            decided += ok_kind
            exact += ok_exact
            if not ok_exact:
                shown = f"error {error}" if error else (f"{got[0]} {json.dumps(got[1])}" if got else f"text {text[:70]!r}")
                want = f"{case.expect[0]} {json.dumps(case.expect[1])}" if case.expect else "text"
                print(f"  miss {n:2d} {case.said[:50]!r}: got {shown}; want {want}")
    finally:
        await llm.aclose()
    total = len(cases)
    print(f"cases {total}: decision {decided}/{total} ({100 * decided / total:.0f}%), "
          f"exact {exact}/{total} ({100 * exact / total:.0f}%)")
    print(f"first token p50 {statistics.median(firsts):.2f} s; whole answer p50 {statistics.median(totals):.2f} s, "
          f"max {max(totals):.2f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--agent", type=Path, default=DEMO_AGENT_FILE, help="agent file whose prompt to use")
    parser.add_argument("--only", type=int, default=None, help="run only the first N cases")
    args = parser.parse_args(argv)
    return asyncio.run(run(args.agent, args.only))


if __name__ == "__main__":
    sys.exit(main())
