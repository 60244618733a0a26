"""Decision quality of the embedded LLM on the demo restaurant agent: the right tool at the right time.

Each case is a caller's utterance with a short context (earlier turns, tool results) and
the expected decision: a spoken reply (no tool), or one tool call with its arguments.
Tool results are rendered as the engine renders them (a tool's value, the confirmation
gate's ``confirmation_required``), and the tools offered are the engine's (the demo's two
and ``confirm_pending``), so the cases after a held booking test the gate's instruction.
The system prompt is the demo agent's (examples/restaurant/agent.toml), or the
file given with ``--agent``, followed by the date line the cases assume.  The tools are
the demo's own, behind the agent file's confirmation gate, in a real tool engine: each
case's context is replayed through it (the caller's turns noted, the context's calls
executed), and the model is offered what the engine offers in that state
(``ToolEngine.offered_specs`` and ``ToolEngine.heard_offer``, the runner's two steps:
docs/TOOLS.md, "Offered now"; a case whose words name the look-up's slots is offered only
it, a call required, the heard values as constants).  ``--offer heard-free`` requires the
call but leaves its arguments to the model; ``--offer state`` leaves out the heard-slot rule; ``--offer all``
offers every registered tool in every state (what the agent offered before "Offered
now"), for the comparison.  The call the model makes is then planned by the same engine:
a wrong call the engine refuses before it runs (a name the caller did not say, a booking
without a free check) is counted as stopped.  Prints each miss and the rates:

* decision: the right kind of answer (text, or the right tool);
* exact: the right tool with exactly the expected arguments (text counts when it is text);
* stopped: of the wrong calls, how many the engine refused with a message (none ran);
* first token and total time per case (medians), for the record.

Usage: ``python bench/local_llm_decisions.py [--agent FILE] [--only N] [--first N] [--offer heard|heard-free|state|all]``
(needs the ``local-llm`` extra and ``brisvox models fetch qwen2_5_coder_0_5b_q4``).
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
from brisvox.agent.tools import CallMeta, CancelToken, Outcome, ToolEngine, ToolRegistry
from brisvox.agent.tools._answers import render
from brisvox.agent.tools.confirm import confirmation_required_body
from brisvox.core.clock import SystemClock
from brisvox.engine.rounds import with_date
from brisvox.providers.llm import Done, LlmError, LlmRequest, TextDelta, ToolCallDelta, ToolChoice
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
        ToolMessage(call_id="c1", content=render(result)),  # as the engine renders a tool's value
        AssistantMessage(text=reply),
    )


FREE_2 = _checked("A table for two on 2026-12-05 at 19:00?", "2026-12-05", "19:00", 2, True, [],
                  "A table for two on 2026-12-05 at 19:00 is free. May I have your name?")
FREE_4 = _checked("Four people, December 7th at 19:30.", "2026-12-07", "19:30", 4, True, [],
                  "Good news, 19:30 on December 7th is free for four. What name should I put it under?")
FULL_2 = _checked("Two people tomorrow at eight.", "2026-12-05", "20:00", 2, False, ["18:30", "19:00", "21:00"],
                  "Sorry, 20:00 is full. I can offer 18:30, 19:00 or 21:00.")

# The caller gave a name after a free check; the booking waits for the yes (call c2).
PENDING = (*FREE_2,
           UserMessage(text="It's Ayse."),
           AssistantMessage(text="", tool_calls=(ToolCall(id="c2", name="book_table",
                                                          arguments={"name": "Ayse", "date": "2026-12-05", "time": "19:00",
                                                                     "party_size": 2}),)),
           ToolMessage(call_id="c2", content=confirmation_required_body("book_table", "c2")),
           AssistantMessage(text="Just to confirm: a table for two on 2026-12-05 at 19:00 under Ayse. Shall I book it?"))
# The caller said yes and the booking was made.
BOOKED = (*PENDING,
          UserMessage(text="Yes, please."),
          AssistantMessage(text="", tool_calls=(ToolCall(id="c3", name="confirm_pending", arguments={"call_id": "c2"}),)),
          ToolMessage(call_id="c3", content=render({"status": "confirmed", "reservation_id": "R001"})),
          AssistantMessage(text="Booked: two at 19:00 on 2026-12-05 under Ayse. See you then!"))


def _confirm(call_id: str) -> tuple[str, dict[str, Any]]:
    return ("confirm_pending", {"call_id": call_id})


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
    # The booking waits for the caller's yes: confirm it on a yes, never on a no.
    Case("Yes, please.", _confirm("c2"), PENDING),
    Case("Yes, that's right.", _confirm("c2"), PENDING),
    Case("Sure, go ahead.", _confirm("c2"), PENDING),
    Case("No, cancel it.", TEXT, PENDING),
    Case("Actually no, don't book it.", TEXT, PENDING),
    # Free, but no name yet: ask for it (a name nobody said is not one to book under).
    Case("Great, book it please.", TEXT, FREE_2),
    Case("Yes, I'll take it.", TEXT, FREE_4),
    # Booked: nothing more to call.
    Case("Thank you, goodbye.", TEXT, BOOKED),
    Case("Great, thanks!", TEXT, BOOKED),
)


def agent_file(path: Path) -> dict[str, Any]:
    with path.open("rb") as f:
        agent = tomllib.load(f)["agent"]
    assert isinstance(agent, dict)
    return agent


def agent_prompt(agent: dict[str, Any]) -> str:
    prompt = agent["prompt"]
    assert isinstance(prompt, str)
    return prompt.strip()


def _messages(system: str, case: Case) -> tuple[Message, ...]:
    said = (UserMessage(text=case.said),) if case.said else ()
    return (*with_date((SystemMessage(text=system),), TODAY), *case.context, *said)  # as the engine sends it


async def _engine_in_state(registry: ToolRegistry, agent: dict[str, Any], case: Case) -> tuple[ToolEngine, int]:
    """A tool engine that lived through ``case``'s context (the caller's turns, its calls);
    returns it and the epoch of the case's own turn."""
    engine = ToolEngine(registry, "bench", SystemClock(), meta=CallMeta(call_id="bench", agent=agent["name"]))
    epoch = 0
    for m in case.context:
        if isinstance(m, UserMessage):
            epoch += 1
            engine.note_user_turn(m.text)
        elif isinstance(m, AssistantMessage) and m.tool_calls:
            await engine.execute(m.tool_calls, epoch, CancelToken())
    if case.said:
        epoch += 1
        engine.note_user_turn(case.said)
    return engine, epoch


async def run(agent_path: Path, only: int | None, offer: str, first_case: int = 1) -> int:
    agent = agent_file(agent_path)
    registry = demo_tools().registry(agent["tools"], confirm=agent.get("confirm_tools", ()))
    system = agent_prompt(agent)
    llm = XLlamaLlm()
    decided = exact = wrong_calls = stopped = 0
    firsts: list[float] = []
    totals: list[float] = []
    cases = CASES[:only] if only else CASES
    if first_case > 1:
        cases = cases[first_case - 1:]
    try:
        await llm.warm()
        for n, case in enumerate(cases, first_case):
            engine, epoch = await _engine_in_state(registry, agent, case)
            specs = tuple(registry.specs()) if offer == "all" else tuple(engine.offered_specs())
            choice = ToolChoice.AUTO
            if offer.startswith("heard"):  # as the runner offers: a turn naming the slots is the look-up
                offered, required = engine.heard_offer(specs, TODAY)
                if required and offer == "heard-free":  # the call required, its arguments left to the model
                    offered = [registry.spec(offered[0].name) or offered[0]]
                specs, choice = tuple(offered), ToolChoice.REQUIRED if required else ToolChoice.AUTO
            # The prompt describes the agent's tools, as the runner's requests do; the grammar the offer.
            request = LlmRequest(messages=_messages(system, case), tools=specs, tool_choice=choice,
                                 described=tuple(engine.listed_specs()))
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
            refusal = ""
            if got is not None and not ok_exact:
                wrong_calls += 1
                # The engine plans the call as it would in the call: a refused one never runs.
                ran = await engine.execute([ToolCall(id="m1", name=got[0], arguments=got[1])], epoch, CancelToken())
                if ran.outcomes[0] in (Outcome.INVALID_ARGUMENTS, Outcome.UNKNOWN_TOOL):
                    stopped += 1
                    refusal = f" (refused: {json.loads(ran.results[0].content)['detail'][:90]})"
            await engine.aclose()
            if not ok_exact:
                shown = f"error {error}" if error else (f"{got[0]} {json.dumps(got[1])}" if got else f"text {text[:70]!r}")
                want = f"{case.expect[0]} {json.dumps(case.expect[1])}" if case.expect else "text"
                print(f"  miss {n:2d} {case.said[:50]!r}: got {shown}; want {want}{refusal}")
    finally:
        await llm.aclose()
    total = len(cases)
    print(f"offer {offer}, cases {total}: decision {decided}/{total} ({100 * decided / total:.0f}%), "
          f"exact {exact}/{total} ({100 * exact / total:.0f}%), wrong calls {wrong_calls}, refused by the engine {stopped}")
    print(f"first token p50 {statistics.median(firsts):.2f} s; whole answer p50 {statistics.median(totals):.2f} s, "
          f"max {max(totals):.2f} s")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--agent", type=Path, default=DEMO_AGENT_FILE, help="agent file whose prompt to use")
    parser.add_argument("--only", type=int, default=None, help="run only the first N cases")
    parser.add_argument("--first", type=int, default=1, help="start at case N (1-based)")
    parser.add_argument("--offer", choices=("heard", "heard-free", "state", "all"), default="heard",
                        help="offer what the runner offers (the state and the heard-slot rule), the same with the "
                             "forced look-up's arguments left free (no const), the state's tools without the "
                             "heard-slot rule, or every registered tool")
    args = parser.parse_args(argv)
    return asyncio.run(run(args.agent, args.only, args.offer, args.first))


if __name__ == "__main__":
    sys.exit(main())
